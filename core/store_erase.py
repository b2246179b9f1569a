"""Deleting on request from the SQLite store: the threads a person, channel or workspace (team) took
part in, and their history, metadata, turn records and cached look-ups (`datathread forget`,
`reset`; core/forget.py decides what goes, this only deletes rows).

Why apart from core/store_sqlite.py: it is one concern (erasure), and the store stays readable. Each
function runs inside one of the store's transactions (`SqliteCalls.run`); callers pass ids in
chunks of `CHUNK` so no transaction holds the file for long (a big purge in one transaction kept a turn
of another process waiting past its deadline).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

CHUNK = 500  # session ids (or rows) per transaction


def sqlite_threads(
    con: sqlite3.Connection, *, user_id: str | None, channel_id: str | None, team_id: str | None
) -> dict[str, list[str]]:
    """Session id → everyone who took part (metadata participants and turn-record users), for every
    thread whose metadata or any turn record matches each filter given."""
    found: dict[str, set[str]] = {}
    for session_id, raw in con.execute("SELECT session_id, data FROM meta"):
        meta = json_dict(raw)
        people = {str(p) for p in meta.get("participants") or ()}
        if matches(meta, people, user_id=user_id, channel_id=channel_id, team_id=team_id):
            found.setdefault(session_id, set()).update(people)
    rows = con.execute("SELECT session_id, user_id, channel_id, data FROM turns WHERE session_id IS NOT NULL")
    users: dict[str, set[str]] = {}
    for session_id, user, channel, raw in rows:
        if user:
            users.setdefault(session_id, set()).add(user)
        record = {"channel_id": channel, "team_id": json_dict(raw).get("team_id") if team_id else None}
        if matches(
            record, {user} if user else set(), user_id=user_id, channel_id=channel_id, team_id=team_id
        ):
            found.setdefault(session_id, set())
    return {sid: sorted(people | users.get(sid, set())) for sid, people in found.items()}


def matches(
    data: dict, people: set[str], *, user_id: str | None, channel_id: str | None, team_id: str | None
) -> bool:
    """Whether a thread's metadata or turn record (`data`, with the `people` in it) matches every
    filter given; both stores' finders use it (core/store_erase_redis.py too)."""
    if user_id is not None and user_id not in people:
        return False
    if channel_id is not None and data.get("channel_id") != channel_id:
        return False
    return team_id is None or data.get("team_id") == team_id


def json_dict(raw: bytes | str | None) -> dict:
    """A stored JSON object, or {} for anything else (a damaged row never stops an erasure)."""
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def sqlite_erase_sessions(con: sqlite3.Connection, session_ids: Sequence[str], turns: bool) -> dict[str, int]:
    """Delete these sessions' history and metadata, and with `turns` their turn records (at most
    CHUNK ids a call); how many rows of each went."""
    marks = ",".join("?" * len(session_ids))
    counts = {
        "history": con.execute(f"DELETE FROM history WHERE session_id IN ({marks})", session_ids).rowcount,
        "metadata": con.execute(f"DELETE FROM meta WHERE session_id IN ({marks})", session_ids).rowcount,
        "turn records": 0,
    }
    if turns:
        counts["turn records"] = con.execute(
            f"DELETE FROM turns WHERE session_id IN ({marks})", session_ids
        ).rowcount
    return counts


def sqlite_erase_user_turns(con: sqlite3.Connection, user_id: str, session_id: str | None) -> int:
    """Delete up to CHUNK of this person's turn records (in any thread, or in `session_id`'s); how
    many went."""
    return con.execute(
        "DELETE FROM turns WHERE rowid IN (SELECT rowid FROM turns WHERE user_id=? "
        "AND (? IS NULL OR session_id=?) LIMIT ?)",
        (user_id, session_id, session_id, CHUNK),
    ).rowcount


def sqlite_erase_values(con: sqlite3.Connection, pattern: str) -> int:
    """Delete the kept values (`set_once`) whose key matches the glob `pattern`; how many went."""
    return con.execute("DELETE FROM kv WHERE key GLOB ?", (pattern,)).rowcount


async def erase_sessions(run, session_ids: Sequence[str], turns: bool) -> dict[str, int]:
    """`sqlite_erase_sessions` over any number of ids, CHUNK ids a transaction."""
    counts = {"history": 0, "metadata": 0, "turn records": 0}
    ids = list(session_ids)
    for i in range(0, len(ids), CHUNK):
        for what, n in (await run(sqlite_erase_sessions, ids[i : i + CHUNK], turns)).items():
            counts[what] += n
    return counts


async def erase_user_turns(run, user_id: str, session_id: str | None = None) -> int:
    """`sqlite_erase_user_turns` until none is left, CHUNK rows a transaction."""
    total = 0
    while removed := await run(sqlite_erase_user_turns, user_id, session_id):
        total += removed
    return total
