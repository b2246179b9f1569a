"""Pure rendering for Slack: Claude's Markdown → Slack mrkdwn and `markdown` blocks, within Slack's
limits (the controls and views around an answer are bot/slack_blocks.py).

Nothing here does I/O. Limits (https://docs.slack.dev/reference/block-kit/blocks/section-block and
https://docs.slack.dev/reference/methods/chat.postMessage): a section's text ≤ 3000 characters, ≤ 50
blocks per message, message `text` ≤ 40,000 characters; streamed `markdown_text` ≤ 12,000 per call, and
a `markdown` block ≤ 12,000 (slack-sdk's `MarkdownBlock.text_max_length`, which Slack also applies to
all of one message's markdown blocks together). Answers go to Slack as standard Markdown (streamed, or
one `markdown` block per message); mrkdwn only where Slack requires it (sections, context, fallback
`text`). Answers are split between paragraphs, never inside a code block or a table (a block that alone is too
big is cut at line boundaries and its fences/header are repeated, so every piece is still valid).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from slack_sdk.models.blocks import MarkdownBlock

from bot.markdown import blocks, grapheme_start, honest_label, lead_sentence, pack
from core.wording import counted

SECTION_LIMIT = 3000
MAX_BLOCKS = 50
STREAM_LIMIT = 12_000
MARKDOWN_LIMIT = MarkdownBlock.text_max_length  # per message: Slack sums a message's markdown blocks
TABLE_PREVIEW_ROWS = 20
CONTINUED = "(continued)"  # a long answer's later messages, in their notification


@dataclass(frozen=True)
class Unit:
    """One indivisible piece of an answer: a paragraph, a code block or a table."""

    kind: str  # "text" | "code" | "table"
    text: str


# --- units: the shared parse (bot/markdown.py), tables as aligned previews ------------------------
def to_units(markdown: str) -> list[Unit]:
    """Paragraphs, fenced code blocks and tables (tables become aligned monospace previews)."""
    units = []
    for block in blocks(markdown):
        if block.kind == "table":
            rows = [list(r) for r in block.rows]
            units.append(Unit("table", table_text(list(block.header), rows, align=block.align)))
        else:
            units.append(Unit(block.kind, block.text))
    return units


def table_to_text(lines: list[str], *, max_rows: int = TABLE_PREVIEW_ROWS) -> str:
    """A Markdown table (its source lines) as an aligned preview."""
    tables = [b for b in blocks("\n".join(lines)) if b.kind == "table"]
    if not tables:
        return ""
    table = tables[0]
    return table_text(list(table.header), [list(r) for r in table.rows], max_rows=max_rows, align=table.align)


def table_text(
    header: list[str], body: list[list[str]], *, max_rows: int = TABLE_PREVIEW_ROWS, align: Sequence[str] = ()
) -> str:
    """A table as aligned monospace text, at most `max_rows` rows plus a 'more rows' note. Columns are
    aligned as the table's delimiter row says (`:-:` centred, `-:` right, `:-` left), else numbers
    right and text left."""
    header, body = [_plain(c) for c in header], [[_plain(c) for c in r] for r in body]
    hidden = max(0, len(body) - max_rows)
    body = body[:max_rows]
    width = max(len(r) for r in [header, *body])
    grid = [r + [""] * (width - len(r)) for r in [header, *body]]
    sizes = [max(cell_len(r[c]) for r in grid) for c in range(width)]
    numeric = [all(_is_number(r[c]) for r in grid[1:] if r[c]) and len(grid) > 1 for c in range(width)]
    how = [
        (align[c] if c < len(align) and align[c] else "right" if numeric[c] else "left") for c in range(width)
    ]

    def fmt(row: list[str]) -> str:
        return "  ".join(_pad(v, sizes[c], how[c]) for c, v in enumerate(row)).rstrip()

    out = [fmt(grid[0]), "  ".join("-" * s for s in sizes), *(fmt(r) for r in grid[1:])]
    if hidden:
        out.append(f"… {counted(hidden, 'more row')}")
    return "\n".join(out)


def _pad(value: str, size: int, how: str) -> str:
    """`value` padded to `size` columns as a monospace font shows it: 東京 takes four, an accent typed
    as a combining mark none (padding by characters misaligned every column after a CJK cell). Centred
    as `str.center` does."""
    gap = max(0, size - cell_len(value))
    left = {"right": gap, "center": gap // 2 + (gap & size & 1)}.get(how, 0)
    return " " * left + value + " " * (gap - left)


def _plain(cell: str) -> str:
    return unicodedata.normalize("NFC", re.sub(r"\*\*|__|`", "", cell).strip())


def _is_number(value: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d,]*\.?\d+%?|[-+]?\$[\d,.]+", value.strip()))


# --- Markdown → mrkdwn ----------------------------------------------------------------------------
def escape(text: str) -> str:
    """Slack's three control characters (https://docs.slack.dev/messaging/formatting-message-text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# Only these link targets become Slack links: `<!channel|x>` or `<@U123|x>` would ping people.
_SAFE_LINK = re.compile(r"(?i)(https?://|mailto:)[^\s<>|]+")


def _link(label: str, target: str) -> str:
    """`[label](target)` as a Slack link when the target is a web or mail address, else inert text."""
    if _SAFE_LINK.fullmatch(target):
        return f"<{target}|{escape(honest_label(label, target))}>"
    return escape(f"{label} ({target})")


def inert(text: str) -> str:
    """Plain text from a model or a step, safe in any Slack text field: no mention, no broadcast, no
    link; one line (https://docs.slack.dev/messaging/formatting-message-text#escaping)."""
    return escape(" ".join(text.split()))


def to_mrkdwn(markdown: str) -> str:
    """Convert one paragraph of Markdown (no fences) to Slack mrkdwn; every `<`, `>`, `&` that is not
    a link we built is escaped, so model text can never become `<!here>` or `<@U…>`."""
    keep: list[str] = []

    def stash(value: str) -> str:
        keep.append(value)
        return f"\x00{len(keep) - 1}\x00"

    text = re.sub(r"`([^`\n]+)`", lambda m: stash(f"`{escape(m.group(1))}`"), markdown)
    text = re.sub(r"\[([^\]\n]+)\]\((\S+?)\)", lambda m: stash(_link(m.group(1), m.group(2))), text)
    text = re.sub(r"<(https?://[^>\s|]+)>", lambda m: stash(f"<{m.group(1)}>"), text)
    quoted = [line.startswith(">") for line in text.split("\n")]
    text = "\n".join(
        line.lstrip(">").lstrip() if q else line for line, q in zip(text.split("\n"), quoted, strict=True)
    )
    text = escape(text)
    lines = []
    for line, q in zip(text.split("\n"), quoted, strict=True):
        line = _line_mrkdwn(line)
        lines.append(f"> {line}" if q else line)
    text = "\n".join(lines)
    return re.sub(r"\x00(\d+)\x00", lambda m: keep[int(m.group(1))], text)


def _line_mrkdwn(line: str) -> str:
    heading = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
    if heading:
        inner = re.sub(r"\*\*|__", "", heading.group(1))
        return f"*{inner}*" if inner else ""
    if re.fullmatch(r"\s*([-*_])\s*(\1\s*){2,}", line):
        return "──────────"
    line = re.sub(r"^(\s*)[-*+]\s+", lambda m: f"{m.group(1)}• ", line)
    line = re.sub(r"\*\*(.+?)\*\*|__(.+?)__", lambda m: f"\x01{m.group(1) or m.group(2)}\x01", line)
    line = re.sub(r"(?<![*\w])\*(?!\s)([^*\n]+?)(?<!\s)\*(?![*\w])", r"_\1_", line)
    line = re.sub(r"~~(.+?)~~", r"~\1~", line)
    return line.replace("\x01", "*")


def unit_mrkdwn(unit: Unit) -> str:
    """One unit as mrkdwn: code and tables fenced (Slack ignores language hints), text converted."""
    if unit.kind == "text":
        return to_mrkdwn(unit.text)
    return _fenced(escape(unit.text))


def _fenced(code: str) -> str:
    """A code block Slack draws as one: a run of three backticks inside the code (a Markdown string,
    say) closed the fence early and broke the rest of the answer, and Slack's mrkdwn knows no longer
    fences, so such a run is split by a zero-width space."""
    return "```\n" + re.sub(r"`(?=`)", "`\u200b", code) + "\n```"  # no two backticks side by side


def unit_markdown(unit: Unit) -> str:
    """One unit as standard Markdown (for streamed replies): tables become fenced previews; `<`, `>`,
    `&` outside code become entities (Markdown shows them as the characters; Slack parses no control
    sequence from them), and only web and mail links stay links."""
    if unit.kind != "text":
        return _fenced(_defuse(unit.text))
    keep: list[str] = []

    def stash(value: str) -> str:
        keep.append(value)
        return f"\x00{len(keep) - 1}\x00"

    text = re.sub(r"`[^`\n]+`", lambda m: stash(_defuse(m.group(0))), unit.text)
    text = re.sub(r"\[([^\]\n]+)\]\((\S+?)\)", lambda m: stash(_md_link(m.group(1), m.group(2))), text)
    text = re.sub(r"^(\s*)>", lambda m: stash(m.group(0)), text, flags=re.M)  # block quotes stay quotes
    return re.sub(r"\x00(\d+)\x00", lambda m: keep[int(m.group(1))], escape(text))


def _defuse(code: str) -> str:
    """Code stays as written (no entities: Markdown shows them literally in code) except that a `<`
    opening a Slack control sequence (`<!here>`, `<@U…>`, `<#C…>`) gets a zero-width space after it."""
    return re.sub(r"<(?=[!@#])", "<​", code)


def _md_link(label: str, target: str) -> str:
    if _SAFE_LINK.fullmatch(target):
        return f"[{escape(honest_label(label, target))}]({target})"
    return escape(f"{label} ({target})")


# --- splitting ------------------------------------------------------------------------------------
def split_units(units: list[Unit], render, limit: int) -> list[str]:
    """Pack rendered units into chunks ≤ `limit` characters, breaking only between units."""
    return pack((piece for unit in units for piece in _fit(unit, render, limit)), limit)


def _fit(unit: Unit, render, limit: int) -> list[str]:
    """A unit that alone exceeds the limit is cut at line boundaries into valid smaller units."""
    whole = render(unit)
    if len(whole) <= limit:
        return [whole]
    lines = unit.text.split("\n")
    header = lines[:2] if unit.kind == "table" else []
    if sum(len(h) + 1 for h in header) > limit // 2:  # a header that leaves no room is not repeated
        header = []
    budget = limit - 10 - sum(len(h) + 1 for h in header)
    pieces: list[str] = []
    current: list[str] = []

    def fits(part: str) -> bool:
        return len(render(Unit(unit.kind, "\n".join([*header, part])))) <= limit

    for line in lines[len(header) :]:
        for part in (p for piece in _pieces(line, budget // 2) for p in _fitting(piece, fits)):
            if current and len(render(Unit(unit.kind, "\n".join([*header, *current, part])))) > limit:
                pieces.append(render(Unit(unit.kind, "\n".join([*header, *current]))))
                current = []
            current.append(part)
    if current:
        pieces.append(render(Unit(unit.kind, "\n".join([*header, *current]))))
    return pieces


def _pieces(line: str, size: int) -> list[str]:
    """`line` in pieces of at most `size` characters, each cut between two graphemes."""
    pieces, size = [], max(1, size)
    while len(line) > size:
        cut = grapheme_start(line, size)
        pieces.append(line[:cut])
        line = line[cut:]
    return [*pieces, line]


def _fitting(part: str, fits: Callable[[str], bool]) -> list[str]:
    """`part`, halved between graphemes until each half `fits` rendered: escaping can make a piece
    five times longer ("&" is "&amp;"), and a piece over the limit made an empty or refused message."""
    if len(part) <= 1 or fits(part):
        return [part]
    half = grapheme_start(part, len(part) // 2) or len(part) // 2
    return _fitting(part[:half], fits) + _fitting(part[half:], fits)


def stream_chunks(markdown: str, limit: int = STREAM_LIMIT) -> list[str]:
    """The answer as standard Markdown pieces for `chat.appendStream` (≤ 12,000 characters each)."""
    return split_units(to_units(markdown), unit_markdown, limit)


def split_rendered(text: str, limit: int) -> list[str]:
    """Rendered stream text in pieces of at most `limit` characters, cut after a line where one fits
    (appended in order, the pieces join to `text` whatever the cut)."""
    pieces = []
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit) + 1 or grapheme_start(text, limit)
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text] if text else pieces


def answer_messages(markdown: str, footer: list[dict] | None = None) -> list[dict]:
    """The answer as chat messages ({text, blocks}): one `markdown` block of standard Markdown each
    (rendered as the stream renders it: entities for `<`, `>`, `&`, only web and mail links), the
    footer blocks on the last message. `text` is all a phone's notification shows
    (https://docs.slack.dev/changelog/2026/07/13/notification-changes): the answer's lead sentence,
    plain, from the Markdown as written (it was the rendered part's words, so an answer opening with
    a table notified its monospace preview); a later part's, marked as continued."""
    parts = split_units(to_units(markdown), unit_markdown, MARKDOWN_LIMIT) or [" "]
    leads = [lead_sentence(markdown)] + [f"{CONTINUED} {lead_sentence(part)}" for part in parts[1:]]
    messages = [
        {"text": escape(lead).strip() or " ", "blocks": [MarkdownBlock(text=part).to_dict()]}
        for part, lead in zip(parts, leads, strict=True)
    ]
    messages[-1]["blocks"] += footer or []
    return messages
