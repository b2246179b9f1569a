"""Pure builders for Teams: Markdown Teams renders, Adaptive Cards (tables, progress, confirmation,
'Show SQL & code'; the answer's own are in bot/teams_answer_cards.py) and attachments. Plain dicts
in, plain dicts out; no I/O. Attachments are built with botbuilder's own models (CardFactory,
FileConsentCard, FileInfoCard), which know the content types and field names, and handed on as the
JSON they serialize to.

Teams renders a subset of Markdown in messages (no tables, no headings beyond bold), so tables move
into Adaptive Card `Table` elements with row/column caps.
https://learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/cards-format
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field

from botbuilder.core import CardFactory
from botbuilder.schema import Attachment
from botbuilder.schema.teams import FileConsentCard, FileInfoCard
from botbuilder.schema.teams.additional_properties import ContentType

from bot.markdown import blocks, grapheme_end, grapheme_start, honest_links, pack
from bot.transcript import StepLine, recorded_steps
from core.wording import cut_at_word

ADAPTIVE = CardFactory.content_types.adaptive_card
FILE_CONSENT = ContentType.FILE_CONSENT_CARD
FILE_INFO = ContentType.FILE_INFO_CARD
ACTION_KEY = "datathread"  # Action.Submit data carries {"datathread": <action>, ...}
MAX_TABLE_ROWS = 20
MAX_TABLE_COLS = 8
MAX_CELL_CHARS = 80
MAX_CODE_CHARS = 3000
MAX_WORDS_CHARS = 300  # a card's fallbackText and speak


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    align: list[str] = field(default_factory=list)  # per column: "left", "center", "right" or "" (as set)
    max_rows: int = MAX_TABLE_ROWS  # rows shown on its card (fewer when the card must fit a message)


MAX_STREAMED_BYTES = 16_000  # the tail of a long answer while it streams onto a card (cards cap ~28 KB)
# The text of one message or streaming update, in bytes as it is sent: the Bot Connector refuses an
# activity over about 28 KB (text, card and envelope together), so a longer answer goes out in several
# messages. https://learn.microsoft.com/microsoftteams/platform/bots/how-to/format-your-bot-messages
MAX_MESSAGE_BYTES = 20_000
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def inert(text: str) -> str:
    """Model or step text in a Teams message: `<`, `>`, `&` as entities, so it can't become markup
    (an `<at>` mention, a tag) — Teams shows the entities as the characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_teams_markdown(text: str) -> tuple[str, list[Table]]:
    """Claude's Markdown → (Markdown Teams renders, the tables pulled out of it for cards). Blocks come
    from the shared parse (bot/markdown.py), so a table here is a table on every surface."""
    out: list[str] = []
    tables: list[Table] = []
    for block in blocks(text.strip()):
        if block.kind == "code":
            out += [f"```{block.lang}", *block.text.split("\n"), "```"]
        elif block.kind == "table":
            rows = [list(r) for r in block.rows]
            tables.append(Table(header=list(block.header), rows=rows, align=list(block.align)))
            out.append(f"*(table {len(tables)} below)*")
        else:
            for line in block.text.split("\n"):
                m = _HEADING.match(line)
                out.append(f"**{inert(m.group(1))}**" if m else _inert_outside_code(honest_links(line)))
    return _paragraphs(out), tables


def stream_prefix(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """What a streaming update may show of `text`: all of it, or its start up to `limit` bytes cut at a
    space or line break (each update must extend the last, so a capped stream simply stops growing;
    the final messages carry the whole answer)."""
    if _size(text) <= limit:
        return text
    head = _head(text, limit)
    cut = max(head.rfind("\n"), head.rfind(" "))
    return head[:cut] if cut > limit // 2 else head


def split_message(text: str, limit: int = MAX_MESSAGE_BYTES) -> list[str]:
    """Teams Markdown too long for one message → several of at most `limit` bytes, cut between
    paragraphs and never inside a code block (one too long on its own is cut between lines, each piece
    fenced again); a paragraph too long on its own is cut at spaces."""
    return pack((piece for unit in _units(text) for piece in _fit(unit, limit)), limit, _size) or [""]


def _size(text: str) -> int:
    """Bytes of `text` in the activity as the connector client sends it: JSON with ASCII escapes
    ("é" and "東" take 6 bytes, an emoji 12, a quote or a line break 2). Counted as UTF-8, an answer
    in Japanese went out at twice its measure and the connector refused it whole (413)."""
    return len(json.dumps(text)) - 2


def _head(text: str, limit: int) -> str:
    """The longest start of `text` whose size is at most `limit`."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if _size(text[:mid]) <= limit else (low, mid - 1)
    return text[: grapheme_start(text, low)]


def _tail(text: str, limit: int) -> str:
    """The longest end of `text` whose size is at most `limit` that starts a character a person sees.
    Found on the text as it is: cut on the reversed text, the grapheme rules read clusters backwards,
    and the progress card's tail started with half an emoji family or a lone accent."""
    low, high = 0, len(text)  # the smallest start whose end fits (the empty end always does)
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if _size(text[mid:]) <= limit else (mid + 1, high)
    return text[grapheme_end(text, low) :]


def _units(text: str) -> list[str]:
    """Paragraphs and whole code blocks, in order."""
    units: list[str] = []
    current: list[str] = []
    in_code = False
    for line in text.split("\n"):
        fence = line.lstrip().startswith("```")
        if not in_code and (fence or not line.strip()) and current:
            units.append("\n".join(current))
            current = []
        if line.strip() or in_code:
            current.append(line)
        if fence:
            in_code = not in_code
            if not in_code:  # a closing fence ends its unit
                units.append("\n".join(current))
                current = []
    if current:
        units.append("\n".join(current))
    return units


def _fit(unit: str, limit: int) -> list[str]:
    if _size(unit) <= limit:
        return [unit]
    lines = unit.split("\n")
    # A fence line too long to repeat on every piece (an info string of kilobytes) is cut as text.
    code = lines[0].lstrip().startswith("```") and _size(lines[0]) <= limit // 4
    head, tail = (lines[0], "```") if code else ("", "")
    body = lines[1:-1] if code and lines[-1].strip() == "```" else lines[1:] if code else lines
    budget = limit - _size(head) - _size(tail) - 2
    pieces: list[str] = []
    chunk: list[str] = []
    for line in body:
        for part in _cut_line(line, budget):
            if chunk and _size("\n".join([*chunk, part])) > budget:
                pieces.append("\n".join(chunk))
                chunk = []
            chunk.append(part)
    if chunk:
        pieces.append("\n".join(chunk))
    return [f"{head}\n{p}\n{tail}" if code else p for p in pieces]


def _cut_line(line: str, limit: int) -> list[str]:
    out: list[str] = []
    while _size(line) > limit:
        head = _head(line, limit)
        cut = head.rfind(" ")
        head = head[:cut] if cut > limit // 2 else head
        head = head or line[:1]  # always some progress, whatever the limit
        out.append(head)
        line = line[len(head) :].lstrip(" ")
    return [*out, line]


def _inert_outside_code(line: str) -> str:
    pieces = re.split(r"(`[^`]*`)", line)
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else inert(p) for p in pieces)


def _paragraphs(lines: list[str]) -> str:
    """Teams folds single newlines; keep line breaks by separating non-list lines with a blank line."""
    out: list[str] = []
    in_code = False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
        listy = bool(re.match(r"^\s*([-*+]|\d+[.)])\s", line))
        if out and not in_code and not line.lstrip().startswith("```") and not listy and out[-1] != "":
            out.append("")
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _clip(value: object, limit: int = MAX_CELL_CHARS) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(text: str) -> str:
    """A table cell as a card's TextBlock shows it: its Markdown is a subset without code spans, so
    `x<y` showed its backticks; bold and italics stay."""
    return text.replace("`", "")


def _column(align: str) -> dict:
    """A Table column, its cells aligned as the Markdown table's delimiter row said (`:-:`, `-:`)."""
    side = {"left": "Left", "center": "Center", "right": "Right"}.get(align)
    return {"width": 1, "horizontalCellContentAlignment": side} if side else {"width": 1}


def table_element(table: Table, *, max_rows: int | None = None, max_cols: int = MAX_TABLE_COLS) -> list[dict]:
    """An Adaptive Card Table (v1.5) for `table`, capped, plus a note of what was left out."""
    max_rows = table.max_rows if max_rows is None else max_rows
    cols = table.header[:max_cols]
    body_rows = table.rows[:max_rows]

    def row(cells: list[str], *, header: bool = False) -> dict:
        padded = (list(cells) + [""] * len(cols))[: len(cols)]
        return {
            "type": "TableRow",
            "cells": [
                {
                    "type": "TableCell",
                    "items": [
                        {
                            "type": "TextBlock",
                            "text": _clip(_cell(c)),
                            "wrap": True,
                            "weight": "Bolder" if header else "Default",
                        }
                    ],
                }
                for c in padded
            ],
        }

    element = {
        "type": "Table",
        "firstRowAsHeader": True,
        "gridStyle": "accent",
        "columns": [_column(table.align[c] if c < len(table.align) else "") for c in range(len(cols))],
        "rows": [row(cols, header=True), *(row(r) for r in body_rows)],
    }
    dropped = []
    if len(table.rows) > max_rows:
        dropped.append(f"{len(table.rows) - max_rows} more rows")
    if len(table.header) > max_cols:
        dropped.append(f"{len(table.header) - max_cols} more columns")
    note = [
        {
            "type": "TextBlock",
            "text": f"Not shown: {', '.join(dropped)}.",
            "isSubtle": True,
            "size": "Small",
            "wrap": True,
        }
    ]
    return [element, *(note if dropped else [])]


def card(body: list[dict], actions: list[dict] | None = None, *, words: str) -> dict:
    """An Adaptive Card attachment (schema 1.5, full width in Teams). `words` say what it shows where it
    is not drawn: a client that cannot (`fallbackText`), a screen reader or voice (`speak`), and the
    notification of a message that is only this card (bot/teams_words.py's `summary_of`)."""
    said = inert(briefly(words))  # step outcomes and titles are the model's: no markup in a notification
    content: dict = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.5",
        "msteams": {"width": "Full"},
        "fallbackText": said,
        "speak": said,
        "body": body,
    }
    if actions:
        content["actions"] = actions
    return CardFactory.adaptive_card(content).serialize()


def briefly(text: str, limit: int = MAX_WORDS_CHARS) -> str:
    """`text` on one line, cut at a space to at most `limit` characters (a card's words ride in its
    message, which the Bot Connector caps; a notification shows a line or two)."""
    return cut_at_word(" ".join(text.split()), limit)


def submit(title: str, action: str, **data: object) -> dict:
    """An Action.Submit whose data names our action; Teams posts it back as a message `value`."""
    return {"type": "Action.Submit", "title": title, "data": {ACTION_KEY: action, **data}}


PROGRESS_MARKS = {"running": "⏳", "done": "✅", "failed": "⚠️"}


def progress_line(line: StepLine) -> str:
    """One step on the progress card: its mark, title and outcome."""
    return f"{PROGRESS_MARKS[line.status]} {line.title}" + (f" — {line.outcome}" if line.outcome else "")


def progress_card(lines: list[str], *, status: str, answer: str = "") -> dict:
    """The one progress message, updated in place: a status line, one line per step and (channels and
    group chats, where Teams does not stream) the answer's text so far, already made inert."""
    body = [{"type": "TextBlock", "text": status, "weight": "Bolder", "wrap": True}]
    body += [{"type": "TextBlock", "text": line, "wrap": True, "spacing": "Small"} for line in lines[-12:]]
    if answer:
        body.append(
            {"type": "TextBlock", "text": _tail(answer, MAX_STREAMED_BYTES), "wrap": True, "separator": True}
        )
    return card(body, words=status)


def confirm_card(prompt: str, key: str, yes: str = "Run") -> dict:
    """Run/Cancel (or Create/Cancel) for a waiting step; the answer comes back as a submit with `key`."""
    return card(
        [{"type": "TextBlock", "text": prompt, "wrap": True}],
        [
            submit(yes or "Run", "confirm", key=key, answer="run", yes=yes or "Run"),
            submit("Cancel", "confirm", key=key, answer="cancel"),
        ],
        words=f"{prompt} ({yes or 'Run'} or Cancel)",
    )


def steps_markdown(record: dict | None) -> str:
    """The SQL and code of a recorded turn, as Markdown code blocks (for 'Show SQL & code')."""
    if not record:
        return "I can't find that answer any more."
    return recorded_steps(record, escape=inert, max_code=MAX_CODE_CHARS)


def failure_text(message: str, error_id: str) -> str:
    """What a person sees when a turn fails: the short reason and an id to quote, never a traceback."""
    message = inert(message)
    return f"⚠️ {message} (error id `{error_id}`)" if error_id else f"⚠️ {message}"


def image_attachment(name: str, data: bytes, mime: str = "image/png") -> dict:
    """An inline image (a data URI; Teams shows these in channels, group and personal chats)."""
    encoded = base64.b64encode(data).decode()
    return {"contentType": mime, "contentUrl": f"data:{mime};base64,{encoded}", "name": name}


def link_text(name: str, url: str, ttl_s: int) -> str:
    """A download link line with how long it lives."""
    minutes = max(1, round(ttl_s / 60))
    life = f"{minutes} minutes" if minutes < 120 else f"{round(minutes / 60)} hours"
    return f"📎 [{name}]({url}) — download link, valid for {life}"


def file_consent_card(name: str, size: int, context: dict) -> dict:
    """Teams' file-consent card: the user accepts, then Teams gives us an upload URL (personal chat only).
    https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4"""
    consent = FileConsentCard(
        description=f"{name} from datathread",
        size_in_bytes=size,
        accept_context=context,
        decline_context=context,
    )
    return Attachment(content_type=FILE_CONSENT, name=name, content=consent).serialize()


def file_info_card(upload_info: dict) -> dict:
    """The card that shows an uploaded file in the chat after the consent flow."""
    info = FileInfoCard(unique_id=upload_info.get("uniqueId"), file_type=upload_info.get("fileType"))
    return Attachment(
        content_type=FILE_INFO,
        content_url=upload_info.get("contentUrl"),
        name=upload_info.get("name"),
        content=info,
    ).serialize()
