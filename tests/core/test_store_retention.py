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
