"""Answers as Markdown in the terminal, with tables that never split a number or cut it short.

rich's Markdown tables squeeze their columns to the terminal's width and end what does not fit with
"…": a nine-column revenue table in an 80-column terminal showed `1,234,…`, a number that is not the
answer's. Folding instead kept every digit but split them: at 40 columns `54173` showed as `5417` over
`3` and the header `carrier` as `carri` over `er`. Now a table is drawn only when every column can be as
wide as its longest word (a number whole, spaces and all); otherwise each row is one record,
`F9 — avg_delay 20.2; flights 685`, its lines wrapped between words.

Where the output is not an interactive terminal (a pipe, a file, `TERM=dumb` — what a screen reader
user is told to set) a table has no rule under its header: a line of box-drawing characters is read
aloud one "box drawings light horizontal" at a time.

A link whose words name another address says where it goes, as on Slack and Teams (`honest_label`):
rich draws a link as a terminal hyperlink, so `[https://slack.com/signin](https://evil.example/login)`
showed one site and opened another.
"""

from __future__ import annotations

import re

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown, TableElement
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from bot.markdown import honest_label

# A cell that is a number (sign, currency, digit groups, decimals, percent): never broken, even at a
# space between digit groups ("1 234 567").
_NUMBER = re.compile(r"[-+−(]?[$€£¥]?\d[\d\s.,'’]*%?\)?")


def _widths(text: Text) -> tuple[int, int]:
    """The narrowest a cell may be (its longest word; a number whole) and its natural width."""
    plain = text.plain.strip()
    widest = max((cell_len(line) for line in plain.splitlines()), default=0)
    if _NUMBER.fullmatch(plain):
        return widest, widest
    return max((cell_len(word) for word in plain.split()), default=0), widest


def _share(least: list[int], most: list[int], room: int) -> list[int]:
    """Column widths summing to at most `room`: each its least, the rest handed out evenly to those
    that want more (a narrow column whole before a wide one grows)."""
    widths, spare = list(least), room - sum(least)
    while spare > 0:
        wanting = [i for i, width in enumerate(widths) if width < most[i]]
        if not wanting:
            break
        each = max(spare // len(wanting), 1)
        for i in sorted(wanting, key=lambda i: most[i] - widths[i]):
            more = min(each, most[i] - widths[i], spare)
            widths[i] += more
            spare -= more
    return widths


class _WholeNumberTable(TableElement):
    """A table whose every column is at least as wide as its longest word, or else its records."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.header is None or self.header.row is None:  # markdown-it always gives one
            yield from super().__rich_console__(console, options)
            return
        header = [cell.content for cell in self.header.row.cells]
        rows = [[cell.content for cell in row.cells] for row in (self.body.rows if self.body else [])]
        plain = not console.is_interactive  # a pipe, a file, TERM=dumb: no rule to read aloud
        table = Table(
            box=None if plain else box.SIMPLE,
            pad_edge=False,
            style="markdown.table.border",
            show_edge=not plain,
            collapse_padding=not plain,  # without a box the padding alone parts the columns
        )
        for heading in header:
            styled = heading.copy()
            styled.stylize("markdown.table.header")
            table.add_column(styled, overflow="fold")
        for row in rows:
            table.add_row(*row)
        columns = [[_widths(text) for text in column] for column in zip(header, *rows, strict=False)]
        least = [max(w[0] for w in column) for column in columns]
        most = [max(w[1] for w in column) for column in columns]
        natural = Measurement.get(console, options.update_width(sum(most) + 1000), table).maximum
        room = options.max_width - (natural - sum(most))  # less the padding and the box's rules
        if sum(least) > room and rows:
            yield from _records(header, rows, console, options.max_width)
            return
        if sum(most) > room:
            for column, width in zip(table.columns, _share(least, most, room), strict=True):
                column.width = width
        yield table


def _records(header: list[Text], rows: list[list[Text]], console: Console, width: int) -> RenderResult:
    """Each row on lines of its own: its first cell, then each other column's name and value, a name
    and its value kept on one line; the lines after a record's first indented, so where one ends shows."""
    for row in rows:
        pairs = [(name, cell) for name, cell in zip(header[1:], row[1:], strict=False) if cell.plain.strip()]
        parts = [Text.assemble(row[0] if row else Text(), " —" * bool(pairs))]
        for n, (name, cell) in enumerate(pairs, 1):
            parts.append(
                Text.assemble((name.plain, "markdown.table.header"), " ", cell, ";" * (n < len(pairs)))
            )
        inner = max(width - 2, 1)  # the lines after the first are indented two
        for n, line in enumerate(_packed(parts, inner)):
            for m, folded in enumerate(line.wrap(console, inner, justify="default", overflow="fold")):
                yield Text.assemble("  ", folded) if n or m else folded


def _packed(parts: list[Text], width: int) -> list[Text]:
    """`parts` on lines of `width`, a space between two; a part that would pass the end starts a line."""
    lines = [Text()]
    for part in parts:
        if lines[-1].plain and lines[-1].cell_len + 1 + part.cell_len > width:
            lines.append(Text())
        elif lines[-1].plain:
            lines[-1].append(" ")
        lines[-1].append_text(part)
    return lines


class AnswerMarkdown(Markdown):
    """rich's Markdown, its tables keeping numbers whole, its links honest."""

    elements = {**Markdown.elements, "table_open": _WholeNumberTable}

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
