"""An answer's Adaptive Cards, each within what one Teams message may carry: its tables, its receipt
and its actions (Show SQL & code, the votes, Export notebook, Schedule…).

The Bot Connector refuses an activity over about 28 KB, text, card and envelope together
(bot/teams_render.py's MAX_MESSAGE_BYTES keeps a margin). Tables are capped at 20 rows and 8 columns
of 80-character cells, but one such table is a 32 KB card, and two tables of short cells 44 KB: the
answer's message was refused with 413 and the person got neither text nor tables. So the tables are
shared out over as many cards as they need, a table too large on its own shows fewer rows (its
"Not shown" note says how many more), and the last card keeps the receipt and the actions.
"""

from __future__ import annotations

import json
from dataclasses import replace

from bot.teams_render import (
    MAX_MESSAGE_BYTES,
    MAX_TABLE_COLS,
    Table,
    card,
    split_message,
    submit,
    table_element,
)
from core.schedules import ANSWER_CADENCES
from core.wording import counted

# The votes in words as well as signs: a screen reader read the 👍 button as "thumbs up sign", and a
# phone has no hover to show a tooltip. (title, value, tooltip)
VOTES = (
    ("👍 Helpful", "up", "Mark this answer as helpful"),
    ("👎 Not helpful", "down", "Mark this answer as not helpful"),
)


def size(value: object) -> int:
    """Bytes of JSON, as the Bot Connector receives an attachment or a text (ASCII escapes: the
    connector client's `json.dumps` writes "é" as 6 bytes)."""
    return len(json.dumps(value))


def answer_cards(
    turn_id: str,
    tables: list[Table],
    receipt: str = "",
    *,
    schedulable: bool = False,
    receipt_words: str = "",
    limit: int = MAX_MESSAGE_BYTES,
) -> list[dict]:
    """One card, or several when the tables need them; every card is at most `limit` bytes."""
    last_card = {"receipt": receipt, "schedulable": schedulable, "receipt_words": receipt_words}
    room = limit - size(answer_card(turn_id, [], **last_card))  # the last card's share
    groups: list[list[Table]] = [[]]
    for table in tables:
        fitted = _fitted(table, room)
        if groups[-1] and size(_tables_card(groups[-1] + [fitted])) > room:
            groups.append([])
        groups[-1].append(fitted)
    *earlier, last = groups
    return [_tables_card(group) for group in earlier] + [answer_card(turn_id, last, **last_card)]


def answer_messages(text: str, cards: list[dict]) -> list[tuple[str, tuple[dict, ...]]]:
    """The messages (text, attachments) an answer goes out in: a long one in several, cut between
    paragraphs; the first card rides on the last when both fit one message, any other card comes in a
    message of its own — so the card with the actions is in the last message."""
    *parts, last = split_message(text)
    ride = cards[:1] if cards and size(last) + size(cards[0]) <= MAX_MESSAGE_BYTES else []
    return [(part, ()) for part in parts] + [(last, tuple(ride))] + [("", (c,)) for c in cards[len(ride) :]]


def answer_card(
    turn_id: str,
    tables: list[Table],
    receipt: str = "",
    *,
    schedulable: bool = False,
    receipt_words: str = "",
) -> dict:
    """Tables of the answer, its receipt, and the actions: Show SQL & code, the votes, Export notebook
    and (in channels and group chats) Schedule…, which opens a cadence picker. `receipt_words` is the
    receipt where the card is not drawn (`receipt` may hold DATE()/TIME(), which only a card reads)."""
    body: list[dict] = []
    for table in tables:
        body += table_element(table)
    if receipt:  # plain text: a card TextBlock renders Markdown, so nothing in it may format
        body.append({"type": "TextBlock", "text": receipt, "isSubtle": True, "size": "Small", "wrap": True})
    if not body:
        body = [{"type": "TextBlock", "text": "Was this answer useful?", "isSubtle": True, "wrap": True}]
    actions = [
        submit("Show SQL & code", "show_steps", turn_id=turn_id),
        *(
            {**submit(title, "feedback", turn_id=turn_id, value=value), "tooltip": tip}
            for title, value, tip in VOTES
        ),
        submit("Export notebook", "export_notebook", turn_id=turn_id),
    ]
    if schedulable:
        actions.append(schedule_action(turn_id))
    words = [*(table_words(t) for t in tables), receipt_words or receipt]
    return card(body, actions, words=" · ".join(w for w in words if w) or "Was this answer useful?")


def schedule_action(turn_id: str) -> dict:
    """ "Schedule…": a card with the cadences; its submit carries the pick as `cadence`."""
    picker = {
        "type": "Input.ChoiceSet",
        "id": "cadence",
        "label": "How often",  # an input's name for screen readers (Adaptive Cards 1.3)
        "value": ANSWER_CADENCES[0][1],
        "choices": [{"title": label, "value": cron} for label, cron in ANSWER_CADENCES],
    }
    return {
        "type": "Action.ShowCard",
        "title": "Schedule…",
        "card": {
            "type": "AdaptiveCard",
            "body": [picker],
            "actions": [submit("Schedule", "schedule", turn_id=turn_id)],
        },
    }


def table_words(table: Table) -> str:
    """A table in a few words, for where its card is not drawn: its columns and how many rows."""
    columns = ", ".join(table.header[:MAX_TABLE_COLS]) + ("…" if len(table.header) > MAX_TABLE_COLS else "")
    return f"Table of {columns}: {counted(len(table.rows), 'row')}"


def _tables_card(tables: list[Table]) -> dict:
    words = " · ".join(table_words(t) for t in tables)
    return card([element for table in tables for element in table_element(table)], words=words)


def _fitted(table: Table, room: int) -> Table:
    """The table with as many of its rows as fit a card of `room` bytes (at least one)."""
    rows = min(table.max_rows, len(table.rows))
    while rows > 1 and size(_tables_card([replace(table, max_rows=rows)])) > room:
        rows -= max(1, rows // 4)
    return replace(table, max_rows=rows)
