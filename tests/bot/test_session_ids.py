"""One id for a terminal session: `export`/`audit --session` take the key `chat`/`ask` print, or the full
session id. Resolution runs against a real SQLite store."""

from __future__ import annotations

import time

import pytest

from core.sessions import resolve_session_id, session_id_for
from core.store_sqlite import SqliteStore

SLACK_ID = session_id_for("slack", ("T1", "C1", "1.0"))
KEYED = session_id_for("terminal", ("abc",))
ODD = session_id_for("terminal", ("my session",))
SCHEDULE = "schedule:61b0dbec35"  # a schedule's audit records (core/schedules_store.py)


@pytest.fixture
async def store(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite3")
    for n, session_id in enumerate((SLACK_ID, KEYED, ODD, SCHEDULE)):
        await store.record_turn({"turn_id": f"t{n}", "session_id": session_id, "started": time.time()})
    yield store
    await store.close()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (SLACK_ID, SLACK_ID),  # a full id with turns is itself
        (KEYED, KEYED),
        ("abc", KEYED),  # the key `datathread chat` printed
        ("my session", ODD),  # a key that is not even a valid id
        (SCHEDULE, SCHEDULE),  # not a valid directory name, but the store holds it: itself
        ("te-unknown", "te-unknown"),  # neither has turns: keep the id, so the error names it
        ("no such key!", session_id_for("terminal", ("no such key!",))),
    ],
)
async def test_resolve_session_id(store, given, expected):
    assert await resolve_session_id(store, given) == expected
