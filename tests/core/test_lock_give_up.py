"""A session lock try that failed is given up in the background (core/lock_release.py) only when it may
have left something in the store (core/lock_queue.py, `left_behind`). Every failed try used to start a
give-up retried every 0.25 s for the lock's TTL: with Redis down, each incoming message added one (100
messages: ~400 connection attempts a second, and a burst as Redis came back), though a refused try
leaves nothing. A try a frozen Redis took and never answered is still given up
(tests/core/test_store_unanswered.py), and so is a waiter's place in the queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from core.lock_queue import WAIT_BEAT_S
from core.sessions import StoreUnavailable
from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from tests.fakes.redis_server import RedisServer, free_port
from tests.fakes.stalled_store import StalledStore

BUSY_S = 0.3  # SQLite's wait for a locked file, short for the test (10 s in production)


async def test_a_lock_try_redis_refused_gives_nothing_up_and_calls_no_more():
    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}/0")
    calls: list[int] = []
    listener = None
    try:
        with pytest.raises(StoreUnavailable):
            async with store.lock("s", ttl_s=60, wait_s=5):
                pytest.fail("the lock was taken from a Redis that is down")
        assert store._locks.releases.pending() == 0, "a give-up was started for a try that was refused"
        # Whatever still calls that port now connects: nothing should.
        listener = await asyncio.start_server(lambda r, w: calls.append(1) or w.close(), "127.0.0.1", port)
        await asyncio.sleep(0.8)
        assert calls == [], f"{len(calls)} connection(s) after the try had failed"
    finally:
        await store.close()
        if listener is not None:
            listener.close()
            await listener.wait_closed()


async def test_a_lock_try_on_a_sqlite_file_held_locked_gives_nothing_up(tmp_path, monkeypatch):
    """SQLite rolls the failed try back: a give-up only held a worker thread in the busy wait."""
    monkeypatch.setattr("core.sqlite_calls.BUSY_S", BUSY_S)
    stalled = StalledStore("sqlite", tmp_path)
    store = SqliteStore(stalled.database)
    try:
        stalled.freeze()
        with pytest.raises(StoreUnavailable):
            async with store.lock("s", ttl_s=60, wait_s=5):
                pytest.fail("the lock was taken from a file held locked")
        assert store._releases.pending() == 0, "a give-up was started for a try that rolled back"
        stalled.thaw()
        async with asyncio.timeout(2), store.lock("s", ttl_s=60, wait_s=1) as held:
            assert not held.lost
    finally:
        stalled.stop()
        await store.close()


@contextlib.asynccontextmanager
async def _backend(kind: str, tmp_path, monkeypatch):
    """Stores on one backend, and how to make it fail and come back: Redis killed and restarted with its
    data (an AOF), or the SQLite file held locked and let go."""
    if kind == "redis":
        server = RedisServer(persist=True).start()
        made: list = []

        def store():
            made.append(RedisStore(server.url))
            return made[-1]

        try:
            yield store, server.kill, server.start
        finally:
            for opened in made:
                await opened.close()
            server.stop()
        return
    monkeypatch.setattr("core.sqlite_calls.BUSY_S", BUSY_S)
    stalled = StalledStore("sqlite", tmp_path)
    made = []

    def sqlite_store():
        made.append(SqliteStore(stalled.database))
        return made[-1]

    try:
        yield sqlite_store, stalled.freeze, stalled.thaw
    finally:
        stalled.stop()
        for opened in made:
            await opened.close()


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
async def test_a_waiter_whose_try_failed_leaves_its_place_in_the_queue_once_the_store_is_back(
    kind, tmp_path, monkeypatch, caplog
):
    """Refused or rolled back, the try that failed changed nothing, but earlier ones queued this waiter:
    left there, it would hold the session's next question for its beat (15 s)."""
    caplog.set_level(logging.INFO, logger="datathread.store")
    async with _backend(kind, tmp_path, monkeypatch) as (store, fail, recover):
        holder, waiter, late = store(), store(), store()
        async with holder.lock("s", ttl_s=30) as held:
            queued = asyncio.Event()

            async def on_wait() -> None:  # called once a try has left it a place in the queue
                queued.set()

            async def wait_for_the_lock() -> None:
                async with waiter.lock("s", ttl_s=30, wait_s=20, on_wait=on_wait):
                    pytest.fail("the waiter took a lock that was held")

            waiting = asyncio.create_task(wait_for_the_lock())
            await asyncio.wait_for(queued.wait(), 5)  # it has queued behind the holder
            fail()
            with pytest.raises(StoreUnavailable):
                await asyncio.wait_for(waiting, 5)
            async with asyncio.timeout(5):  # its give-up has found the store away too
                while "could not give up a lock try on" not in caplog.text:
                    await asyncio.sleep(0.05)
            recover()
            held.release_by = time.monotonic() + 2
        started = time.monotonic()
        async with late.lock("s", ttl_s=30, wait_s=5):
            pass
        # without its give-up the gone waiter's place holds the queue for its beat (WAIT_BEAT_S, 15 s)
        took = time.monotonic() - started
        assert took < WAIT_BEAT_S / 2, f"the next question waited {took:.1f} s behind a waiter that had gone"
        async with asyncio.timeout(5):  # the give-up's success is said from the background
            while "gave up a lock try on" not in caplog.text:
                await asyncio.sleep(0.05)
    said = caplog.text  # what the log says is the work it does, not a lock's release
    assert "could not give up a lock try on" in said and "gave up a lock try on" in said, said
    assert "could not release lock" not in said, said


async def test_a_lock_try_cancelled_after_redis_took_it_leaves_no_lock_behind(tmp_path):
    """Ctrl-C (or a shutdown) while a try is on its way: a Redis slow to answer applies it after the
    turn has gone, and the lock it took held the session's next question for the lock's TTL (60 s)."""
    stalled = StalledStore("redis", tmp_path)
    gone, nxt = RedisStore(stalled.server.url), RedisStore(stalled.server.url)
    try:
        await nxt.ping()  # its connection is made before the freeze

        async def ask() -> None:
            async with gone.lock("s", ttl_s=60, wait_s=5):
                pytest.fail("the lock was taken while Redis was frozen")

        async with gone.lock("another", ttl_s=5):  # Redis has the try's script (else EVALSHA fails)
            pass
        stalled.freeze()
        asking = asyncio.create_task(ask())
        await asyncio.sleep(0.3)  # the try is sent; its answer is not coming
        asking.cancel()
        await asyncio.sleep(0.2)
        stalled.thaw()  # the try is applied now, and takes the free lock
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asking, 5)
        started = time.monotonic()
        async with nxt.lock("s", ttl_s=60, wait_s=3):
            pass
        assert time.monotonic() - started < 1
    finally:
        stalled.stop()
        await gone.close()
        await nxt.close()


async def test_a_lock_try_cancelled_while_its_sqlite_write_commits_leaves_no_lock_behind(
    tmp_path, monkeypatch
):
    """A try whose thread had begun writing when the turn was cancelled still commits (the store never
    leaves half a transaction): the lock it took was left to its TTL."""
    import threading

    from core import lock_queue

    wrote, go_on = threading.Event(), threading.Event()
    real_try = lock_queue.sqlite_try

    def slow_try(con, *args):
        took = real_try(con, *args)
        wrote.set()
        go_on.wait(5)  # the commit comes after the cancellation
        return took

    monkeypatch.setattr(lock_queue, "sqlite_try", slow_try)
    gone, nxt = SqliteStore(tmp_path / "state.sqlite3"), SqliteStore(tmp_path / "state.sqlite3")
    try:

        async def ask() -> None:
            async with gone.lock("s", ttl_s=60, wait_s=5):
                pytest.fail("a cancelled try's lock was handed to its turn")

        asking = asyncio.create_task(ask())
        async with asyncio.timeout(5):
            while not wrote.is_set():
                await asyncio.sleep(0.01)
        asking.cancel()
        await asyncio.sleep(0.2)
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asking, 5)
        monkeypatch.setattr(lock_queue, "sqlite_try", real_try)
        started = time.monotonic()
        async with nxt.lock("s", ttl_s=60, wait_s=3):
            pass
        assert time.monotonic() - started < 1
    finally:
        go_on.set()
        await gone.close()
        await nxt.close()
