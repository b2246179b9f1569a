"""What the stores keep past its time is removed by the hourly sweep (core/store_retention.py):
SQLite's expired rows, which nothing deleted (DATATHREAD_HISTORY_TTL_DAYS hid a transcript without
removing it), and Redis turn records written before records expired, which never did."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import redis as redis_py

from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore

DAY = 86_400


def rows(path, table: str) -> int:
    with sqlite3.connect(path) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


async def test_sqlite_forgets_expired_transcripts_markers_and_the_threads_they_made(tmp_path):
    path = tmp_path / "state.sqlite3"
    short = SqliteStore(path, history_ttl_s=0.3)
    kept = SqliteStore(path, history_ttl_s=3600)
    try:
        await short.save_history("sl-old", [{"role": "user", "content": "a secret question"}])
        await short.update_meta("sl-old", surface="slack", participant="U1")
        await kept.save_history("sl-live", [{"role": "user", "content": "still talking"}])
        await kept.update_meta("sl-live", surface="slack", participant="U2")
        await short.first_seen("Ev1", ttl_s=0.3)
        await short.set_once("note:job", "C1", ttl_s=0.3)
        await short.add_usage("tokens:U1", 10, ttl_s=0.3)
        await asyncio.sleep(0.5)
        assert rows(path, "history") == 2 and rows(path, "seen") == 1  # expired, but still on disk
        assert await short.purge_expired() >= 5
        assert (rows(path, "history"), rows(path, "seen"), rows(path, "kv"), rows(path, "usage")) == (
            1,
            0,
            0,
            0,
        )
        assert await short.get_meta("sl-old") is None  # a reply there is no follow-up any more
        assert (await kept.get_meta("sl-live"))["participants"] == ["U2"]
        assert await kept.load_history("sl-live") == [{"role": "user", "content": "still talking"}]
        with sqlite3.connect(path) as con:
            assert not con.execute("SELECT 1 FROM history WHERE messages LIKE '%secret question%'").fetchall()
        assert await short.purge_expired() == 0
    finally:
        await short.close()
        await kept.close()


async def test_redis_gives_turn_records_from_before_expiry_their_expiry(redis_server):
    redis_server.flush()
    store = RedisStore(redis_server.url, turn_ttl_s=30 * DAY)
    now = time.time()
    try:
        with redis_py.Redis.from_url(redis_server.url) as r:  # as an older version wrote them: no expiry
            r.set("dt:t:recent", json.dumps({"turn_id": "recent", "started": now - 10 * DAY}))
            r.set("dt:t:ancient", json.dumps({"turn_id": "ancient", "started": now - 400 * DAY}))
            await store.record_turn({"turn_id": "new", "started": now})
            assert r.ttl("dt:t:recent") == -1 and r.ttl("dt:t:ancient") == -1
            assert await store.purge_expired() == 2
            assert abs(r.ttl("dt:t:recent") - 20 * DAY) < 60  # what it would have had
            assert not r.exists("dt:t:ancient")  # long past keeping
            assert await store.purge_expired() == 0
    finally:
        await store.close()


def record_the_old_way(r, turn_id: str, started: float, session: str) -> None:
    """What a release before turn records expired writes (af746ca's `record_turn`): the record and its
    index sets, none with an expiry."""
    r.set(f"dt:t:{turn_id}", json.dumps({"turn_id": turn_id, "session_id": session, "started": started}))
    r.zadd("dt:ti:all", {turn_id: started})
    r.zadd(f"dt:ti:s:{session}", {turn_id: started})
    r.zadd("dt:ti:u:terminal", {turn_id: started})


async def test_redis_ages_what_an_old_replica_records_after_a_sweep_has_run(redis_server):
    """A rolling deploy: old and new replicas share one Redis. The pass that gave old records their
    expiry ran once and flagged itself done (`dt:v:aged`); records and index sets an old replica wrote
    after it kept ttl=-1 for good."""
    redis_server.flush()
    store = RedisStore(redis_server.url, turn_ttl_s=30 * DAY)
    now = time.time()
    try:
        with redis_py.Redis.from_url(redis_server.url) as r:
            record_the_old_way(r, "before", now - 5 * DAY, "te-a")
            await store.purge_expired()  # the first hourly sweep after the new release started
            r.set("dt:v:aged", b"1")  # as the once-only pass left it
            record_the_old_way(r, "after", now - 2 * DAY, "te-b")  # an old replica, still running
            r.zadd("dt:ti:s:te-b", {"ancient": now - 400 * DAY})  # past keeping: trimmed away
            assert r.ttl("dt:t:after") == -1 and r.ttl("dt:ti:s:te-b") == -1
            assert await store.purge_expired() >= 3  # a later sweep looks again
            assert abs(r.ttl("dt:t:after") - 28 * DAY) < 60
            for index in ("dt:ti:all", "dt:ti:s:te-b", "dt:ti:u:terminal"):
                assert abs(r.ttl(index) - 28 * DAY) < 60, index  # expires with its newest member
            assert abs(r.ttl("dt:ti:s:te-a") - 25 * DAY) < 60
            assert r.zrange("dt:ti:s:te-b", 0, -1) == [b"after"]
            assert not r.exists("dt:v:aged")
            assert await store.purge_expired() == 0  # nothing left without an expiry
            assert [t["turn_id"] for t in await store.list_turns(session_id="te-b")] == ["after"]
    finally:
        await store.close()
