"""Answers as Markdown in the terminal, with tables that never cut a number short.

rich's Markdown tables squeeze their columns to the terminal's width and end what does not fit with
"…": a nine-column revenue table in an 80-column terminal showed `1,234,…`, a number that is not the
answer's. Here a cell too wide folds onto the next line instead, every digit kept.

A link whose words name another address says where it goes, as on Slack and Teams (`honest_label`):
rich draws a link as a terminal hyperlink, so `[https://slack.com/signin](https://evil.example/login)`
showed one site and opened another.
"""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown, TableElement
from rich.table import Table

from bot.markdown import honest_label


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
    """rich's Markdown, its tables folding wide cells instead of cutting them, its links honest."""

    elements = {**Markdown.elements, "table_open": _FoldedTable}

    def __init__(self, markup: str, **kwargs) -> None:
        super().__init__(markup, **kwargs)
        for token in self.parsed:
            _honest_links(token.children or [])


def _honest_links(tokens: list) -> None:
    """Each link's words followed by its host when they name another one: markdown-it's inline tokens
    (link_open, its words as text tokens, link_close), so code and plain text are never touched."""
    opened, out = None, []
    for token in tokens:
        if token.type == "link_open":
            opened, words = token, []
        elif token.type == "link_close" and opened is not None:
            label = "".join(words)
            honest = honest_label(label, str(opened.attrs.get("href", "")))
            if honest != label:  # before this link's close (tokens compare equal by value: not .index)
                out.append(token.__class__("text", "", 0, content=honest[len(label) :]))
            opened = None
        elif opened is not None and token.type in ("text", "code_inline"):
            words.append(token.content)
        out.append(token)
    tokens[:] = out
