"""What Teams says in words where it shows a card: the notification of a message that is only a card,
and the receipt's "data as of" time in each reader's own zone.

A message whose only content is a card reached people as "datathread sent a card": Teams' toast,
activity feed and chat list show the activity's `summary` (or its `text`) and know nothing of a card's
body. The progress card, a large chart, a file offer and a Run/Cancel question each pinged a phone with
no words. Every card carries its words (bot/teams_render.py's `card()`: `fallbackText` and `speak`),
and `summary_of` gives a message without text its first card's words as its summary. Not as `text`:
Teams draws a message's text above its card, a second copy of the card's own first line.
https://github.com/MicrosoftDocs/msteams-docs/issues/4405 (summary replaces "sent a card")

The receipt's time is written with Adaptive Cards' DATE() and TIME() functions, which Teams draws in
the reader's own locale and time zone ("data as of 7 Dec 2026 17:48 UTC" left everyone elsewhere to
work out their own time). They work in a card TextBlock only, so the receipt's words keep UTC.
https://learn.microsoft.com/adaptive-cards/authoring-cards/text-features#datetime-formatting-and-localization
"""

from __future__ import annotations

from datetime import UTC, datetime

from bot.teams_render import ADAPTIVE, FILE_CONSENT, FILE_INFO, briefly, inert
from core.events import TurnFinished
from core.receipt import AsOf, receipt_line

SUMMARY_CHARS = 150  # a toast shows a line or two; the chat list less


def summary_of(text: str, attachments: list[dict] | None) -> str | None:
    """The activity `summary` of a message: None when it has text (Teams shows that), else what its
    first attachment says — a card's words, a file offer's name and what to do with it."""
    if text or not attachments:
        return None
    first = attachments[0]
    kind, content = first.get("contentType", ""), first.get("content") or {}
    name = inert(str(first.get("name") or "a file"))
    if kind == ADAPTIVE:
        words = content.get("fallbackText") or ""
    elif kind == FILE_CONSENT:
        words = f"{name} is ready: accept it to save it to your OneDrive"
    elif kind == FILE_INFO:
        words = f"{name} is in your OneDrive"
    elif kind.startswith("image/"):
        words = f"Chart: {name}"
    else:
        words = ""
    return briefly(words, SUMMARY_CHARS) or None


def local_time(as_of: AsOf) -> str:
    """The "data as of" moment as Adaptive Card date functions, drawn in the reader's locale and zone:
    the date, and its time of day when the data is recent. The functions take RFC 3339 in whole
    seconds only; anything else shows raw, so the moment is written in UTC with a `Z`."""
    stamp = as_of.moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    day = f"{{{{DATE({stamp}, SHORT)}}}}"
    return f"{day} {{{{TIME({stamp})}}}}" if as_of.with_time else day


def receipt_lines(finished: TurnFinished, *, now: datetime | None = None) -> tuple[str, str]:
    """The answer's receipt for its card (times in each reader's zone) and in words (UTC), or ("", "")
    for a turn that has none."""
    if not (finished.ok and finished.receipt):
        return "", ""
    now = now or datetime.now(UTC)  # one moment for both: the two lines show the same parts
    return receipt_line(finished.receipt, now=now, dated=local_time), receipt_line(finished.receipt, now=now)
