"""The answer's text for Slack's stream while Claude writes it: what of the text so far can be shown
now, rendered exactly as the whole answer will be, so no appended piece ever needs taking back.

`chat.appendStream` only appends. Text is rendered for Slack per block (`bot/slack_render.py`: links
vetted, `<`, `>`, `&` made inert, tables drawn as fenced previews), and a block's rendering can change
while it is being written — a line of pipes may turn out to be a table header, an opening fence a code
block, `[label](` a link whose target decides whether it stays one. So this shows:

- every block closed by a blank line (later text never changes a block above a blank line), and
- of the block still being written, the words so far — unless it may still become a table or a code
  block, and never past an unfinished link or code span.

Text of a model call that went on to run steps (a preamble: "Let me check the flights table.") is
shown too, as the Slack assistant shows text between its tasks; the turn's answer is the last call's.
A step shows as a task card (`task_card`). Nothing here does I/O: `SlackProgress` sends what `take`
returns, at a rate Slack allows.
"""

from __future__ import annotations

import re

from slack_sdk.models.messages.chunk import TaskUpdateChunk

from bot.slack_render import inert, to_units, unit_markdown
from bot.transcript import StepLine

STREAM_STATUS = {"running": "in_progress", "done": "complete", "failed": "error"}

_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.M)
_BLANK = re.compile(r"\n[ \t]*\n")
_CODE_SPAN = r"`[^`\n]+`"
_DEFINITION = re.compile(r"(?:^|(?<=\n)) {0,3}\[[^\]\n]*(?:\]:|$)")  # a line that may be a link definition


def render(markdown: str) -> str:
    """Markdown as the stream shows it: each block rendered for Slack, blocks one blank line apart."""
    return "\n\n".join(unit_markdown(u) for u in to_units(markdown))


def settled(text: str, *, complete: bool) -> str:
    """The part of one call's text whose rendering can no longer change (all of it once `complete`)."""
    if complete:
        return text
    closed = _closed_blocks(text)
    tail = text[len(closed) :]
    return closed + _safe_words(tail)


def _closed_blocks(text: str) -> str:
    """Text up to the last blank line that is not inside an open code fence."""
    cut = 0
    for match in _BLANK.finditer(text):
        if len(_FENCE.findall(text[: match.start()])) % 2 == 0:
            cut = match.end()
    return text[:cut]


def _safe_words(tail: str) -> str:
    """Of the block being written: whole words so far, if it is plain text (not a table or code yet)
    and up to the first unfinished link or code span."""
    if _FENCE.search(tail) or "|" in tail:
        return ""
    words = tail[: max(tail.rfind(" "), tail.rfind("\n")) + 1]
    definition = _DEFINITION.search(words)  # `[1]: https://…` renders as nothing once it is whole
    words = words[: definition.start()] if definition else words
    # A bracket closed and not followed by "(" is no link; one followed by "(" is a link once its ")" is there.
    open_code = _unfinished(words, _CODE_SPAN, "`")
    in_code = re.sub(_CODE_SPAN, lambda m: "x" * len(m.group(0)), words)  # a `[` in code opens no link
    open_link = _unfinished(in_code, r"\[[^\]\n]*\]\([^)\s]*\)|\[[^\]\n]*\](?!\()", "[")
    return words[: min(open_link, open_code)]


def _unfinished(text: str, finished: str, opener: str) -> int:
    """Where the first `opener` that does not begin a finished construct is (len(text) if none)."""
    pos = 0
    for match in re.finditer(finished, text):
        found = text.find(opener, pos, match.start())
        if found != -1:
            return found
        pos = match.end()
    found = text.find(opener, pos)
    return len(text) if found == -1 else found


class StreamedText:
    """The text of a turn's model calls as it streams, and how much of it Slack has been sent."""

    def __init__(self) -> None:
        self.calls: dict[int, str] = {}
        self.closed: set[int] = set()
        self.sent = ""  # rendered text appended to the stream so far

    def add(self, call: int, text: str) -> None:
        self.calls[call] = self.calls.get(call, "") + text

    def close(self) -> None:
        """Every call so far is complete (a step started, or the turn is ending)."""
        self.closed.update(self.calls)

    def showable(self) -> str:
        """What the stream can show now, rendered."""
        parts = [settled(text, complete=call in self.closed) for call, text in sorted(self.calls.items())]
        return render_parts(parts)

    def ready(self) -> str:
        """The rendered text not yet sent that can be sent now ('' if none)."""
        now = self.showable()
        if not now.startswith(self.sent) or len(now) == len(self.sent):
            return ""
        return now[len(self.sent) :]

    def delivered(self, piece: str) -> None:
        """`piece`, the beginning of what `ready` gave, reached Slack: only now is it counted as sent."""
        self.sent += piece

    def take(self) -> str:
        """`ready`, counted as sent at once (for callers that cannot fail to deliver it)."""
        new = self.ready()
        self.delivered(new)
        return new

    def rest(self, answer: str) -> str:
        """At the end of the turn: what must still be appended so the stream ends with `answer` (the
        last call's text as the loop settled it). When the text streamed so far is not a beginning of
        that — the loop replaced it (a refusal, a cut-short note) — the answer follows in full."""
        parts = [text for call, text in sorted(self.calls.items())][:-1] + [answer]
        expected = render_parts(parts)
        if expected.startswith(self.sent):
            return expected[len(self.sent) :]
        return "\n\n" + render(answer)


def render_parts(parts: list[str]) -> str:
    """Calls' texts rendered and joined as one stream, a blank line between non-empty ones."""
    rendered = [render(p) for p in parts]
    return "\n\n".join(r for r in rendered if r)


def task_card(line: StepLine) -> TaskUpdateChunk:
    """A step's task card (slack-sdk's model of the chunk; empty fields are left out)."""
    details = inert(line.detail) if line.status == "running" else ""
    return TaskUpdateChunk(
        id=line.step_id,
        title=inert(line.title),
        status=STREAM_STATUS[line.status],
        details=details or None,
        output=inert(line.outcome) or None,
    )
