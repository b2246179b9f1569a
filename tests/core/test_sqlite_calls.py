"""A call to the SQLite store whose database another process holds locked (core/sqlite_calls.py):
SQLite's own 30 s busy wait cannot be cut short, so a turn that stopped waiting left a thread in it —
which then wrote what the turn had given up on, after the person was told — and closing the store (or
the process: `datathread ask` with its answer in hand) waited for that thread."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.sessions import StoreUnavailable
from core.store_sqlite import SqliteStore
from tests.fakes.stalled_store import StalledStore


async def test_a_call_given_up_on_a_locked_database_writes_nothing_and_closing_waits_for_none(tmp_path):
    stalled = StalledStore("sqlite", tmp_path)
    store = SqliteStore(stalled.database)
    try:
        await store.save_history("s", [{"role": "user", "content": "first"}])
        stalled.freeze()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await store.save_history("s", [{"role": "user", "content": "given up"}])
        stalled.thaw()
        await asyncio.sleep(0.5)  # the lock is free: a thread still waiting for it would write now
        assert await store.load_history("s") == [{"role": "user", "content": "first"}]

        stalled.freeze()
        waiting = asyncio.create_task(store.save_history("s", [{"role": "user", "content": "closing"}]))
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await asyncio.wait_for(store.close(), 10)
        assert time.monotonic() - started < 1.5, "closing waited for a call stuck on the lock"
        with pytest.raises(StoreUnavailable):
            await waiting
    finally:
        stalled.stop()
        await store.close()
