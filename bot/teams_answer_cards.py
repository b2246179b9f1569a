"""An answer's Adaptive Cards, each within what one Teams message may carry.

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

from bot.teams_render import MAX_MESSAGE_BYTES, Table, answer_card, card, table_element


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
    limit: int = MAX_MESSAGE_BYTES,
) -> list[dict]:
    """One card, or several when the tables need them; every card is at most `limit` bytes."""
    room = limit - size(answer_card(turn_id, [], receipt, schedulable=schedulable))  # the last card's share
    groups: list[list[Table]] = [[]]
    for table in tables:
        fitted = _fitted(table, room)
        if groups[-1] and size(_tables_card(groups[-1] + [fitted])) > room:
            groups.append([])
        groups[-1].append(fitted)
    *earlier, last = groups
    return [_tables_card(group) for group in earlier] + [
        answer_card(turn_id, last, receipt, schedulable=schedulable)
    ]


def _tables_card(tables: list[Table]) -> dict:
    return card([element for table in tables for element in table_element(table)])


def _fitted(table: Table, room: int) -> Table:
    """The table with as many of its rows as fit a card of `room` bytes (at least one)."""
    rows = min(table.max_rows, len(table.rows))
    while rows > 1 and size(_tables_card([replace(table, max_rows=rows)])) > room:
        rows -= max(1, rows // 4)
    return replace(table, max_rows=rows)
