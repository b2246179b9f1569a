"""Answers as Markdown in the terminal, with tables that never cut a number short.

rich's Markdown tables squeeze their columns to the terminal's width and end what does not fit with
"…": a nine-column revenue table in an 80-column terminal showed `1,234,…`, a number that is not the
answer's. Here a cell too wide folds onto the next line instead, every digit kept.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown, TableElement
from rich.table import Table


class _FoldedTable(TableElement):
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = Table(
            box=box.SIMPLE,
            pad_edge=False,
            style="markdown.table.border",
            show_edge=True,
            collapse_padding=True,
        )
        if self.header is not None and self.header.row is not None:
            for column in self.header.row.cells:
                heading = column.content.copy()
                heading.stylize("markdown.table.header")
                table.add_column(heading, overflow="fold")  # rich's default: "ellipsis"
        if self.body is not None:
            for row in self.body.rows:
                table.add_row(*(element.content for element in row.cells))
        yield table


class AnswerMarkdown(Markdown):
    """rich's Markdown, its tables folding wide cells instead of cutting them."""

    elements = {**Markdown.elements, "table_open": _FoldedTable}
