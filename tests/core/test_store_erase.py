"""Deleting on request (`datathread forget`, `reset`): both stores find the threads a person, channel or
workspace took part in and delete their history, metadata, turn records with their indexes, and cached
look-ups. Nothing deleted any of it before its TTL; the Redis side walks keys with SCAN, never KEYS."""

from __future__ import annotations

import sqlite3
import time

from core.store_sqlite import SqliteStore
from tests.fakes.kept_threads import DAY, Q, two_threads


async def test_threads_are_found_by_person_channel_and_team(make_store):
    store = make_store()
    await two_threads(store)
    assert await store.find_threads(user_id="U1") == {"sl-alone": ["U1"], "sl-shared": ["U1", "U2"]}
    assert await store.find_threads(channel_id="C2") == {"sl-shared": ["U1", "U2"]}
    assert set(await store.find_threads(team_id="T1")) == {"sl-alone", "sl-shared"}
    assert await store.find_threads(user_id="U1", channel_id="C1") == {"sl-alone": ["U1"]}
    assert await store.find_threads(user_id="nobody") == {}


async def test_a_thread_only_known_by_its_turn_records_is_found(make_store):
    store = make_store()
    await store.record_turn({"turn_id": "t1", "session_id": "sl-old", "user_id": "U7", "channel_id": "C7"})
    assert await store.find_threads(user_id="U7") == {"sl-old": ["U7"]}
    assert await store.find_threads(channel_id="C7") == {"sl-old": ["U7"]}


async def test_erasing_threads_removes_history_metadata_and_turn_records(make_store):
    store = make_store()
    await two_threads(store)
    counts = await store.erase_sessions(["sl-alone", "sl-shared"])
    assert counts == {"history": 2, "metadata": 2, "turn records": 3}
    for sid in ("sl-alone", "sl-shared"):
        assert await store.load_history(sid) == [] and await store.get_meta(sid) is None
        assert await store.list_turns(session_id=sid) == []
    assert await store.list_turns(user_id="U1") == [] and await store.list_turns(channel_id="C2") == []
    assert [t["turn_id"] for t in await store.list_turns()] == ["te-other-U3-0"]
    assert await store.load_history("te-other") == Q  # another thread: untouched
    assert await store.erase_sessions(["sl-alone"]) == {"history": 0, "metadata": 0, "turn records": 0}


async def test_reset_keeps_the_turn_records(make_store):
    store = make_store()
    await two_threads(store)
    counts = await store.erase_sessions(["sl-alone"], turns=False)
    assert counts == {"history": 1, "metadata": 1, "turn records": 0}
    assert len(await store.list_turns(session_id="sl-alone")) == 1


async def test_a_persons_turn_records_go_from_every_thread_and_index(make_store):
    store = make_store()
    await two_threads(store)
    assert await store.erase_user_turns("U1") == 2
    assert await store.list_turns(user_id="U1") == []
    assert [t["user_id"] for t in await store.list_turns(session_id="sl-shared")] == ["U2"]
    assert len(await store.list_turns()) == 2
    assert await store.load_history("sl-shared") == Q  # the shared thread's history is another decision


async def test_cached_person_lookups_go_by_pattern(make_store):
    store = make_store()
    for key in ("person:slack:T1:U1", "person:slack:T1:U2", "person:slack:T2:U1", "note:x"):
        await store.set_once(key, "{}", ttl_s=DAY)
    assert await store.erase_values("person:*:U1") == 2
    assert await store.get_value("person:slack:T1:U1") is None
    assert await store.get_value("person:slack:T1:U2") == "{}"
    assert await store.erase_values("person:slack:T1:*") == 1
    assert await store.get_value("note:x") == "{}"


async def test_sqlite_turn_records_past_their_ttl_are_deleted_by_the_sweep(tmp_path):
    """They were hidden from every read and stayed in the file (with question, answer and SQL) until a
    new turn happened to be recorded."""
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path, turn_ttl_s=90 * DAY)
    try:
        await store.record_turn({"turn_id": "new", "session_id": "sl-a", "started": time.time()})
        with sqlite3.connect(path) as con:
            con.executemany(
                "INSERT INTO turns VALUES (?,?,?,?,?,?)",
                [(f"old{i}", "sl-a", "U1", "C1", time.time() - 100 * DAY, "{}") for i in range(2500)],
            )
        assert await store.purge_expired() == 2500
        with sqlite3.connect(path) as con:
            assert con.execute("SELECT turn_id FROM turns").fetchall() == [("new",)]
    finally:
        await store.close()


async def test_sqlite_purges_in_short_transactions(tmp_path, monkeypatch):
    """A big purge is many transactions of at most BATCH rows, so a turn in another process waits for
    one batch, not for the whole purge."""
    from core import store_retention

    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path, history_ttl_s=DAY)
    sizes: list[int] = []
    real = store_retention.purge_batch

    def counted(con, *args):
        went, last = real(con, *args)
        sizes.append(went)
        return went, last

    monkeypatch.setattr(store_retention, "purge_batch", counted)
    try:
        with sqlite3.connect(path) as con:
            con.executemany(
                "INSERT INTO history VALUES (?,?,?,?)",
                [(f"sl-{i}", 1, "[]", time.time() - 1) for i in range(2500)],
            )
        assert await store.purge_expired() == 2500
        assert max(sizes) == store_retention.BATCH and sum(sizes) == 2500
    finally:
        await store.close()
