"""Leaving a session lock while the store does not answer (core/lock_release.py): a frozen Redis held
the turn for the release's three 5 s tries, a locked SQLite file for its 30 s busy wait, before the
person heard anything. The holder now waits no longer than it allows (`HeldLock.release_by`); the
release goes on and frees the lock as soon as the store answers, well before it would expire."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from tests.fakes.stalled_store import StalledStore


@pytest.fixture(params=["redis", "sqlite"])
def stalled(request, tmp_path):
    store = StalledStore(request.param, tmp_path)
    yield store
    store.stop()


@pytest.fixture
async def replicas(stalled):
    """Stores on the stalled backend, each one a replica; closed after the test."""
    opened: list = []

    def replica():
        opened.append(RedisStore(stalled.server.url) if stalled.server else SqliteStore(stalled.database))
        return opened[-1]

    yield replica
    stalled.thaw()
    for store in opened:
        await store.close()


async def test_leaving_a_lock_waits_no_longer_than_its_holder_allows_and_frees_it_once_the_store_answers(
    stalled, replicas
):
    store, other = replicas(), replicas()
    async with store.lock("s1", ttl_s=30) as held:
        stalled.freeze()
        held.release_by = time.monotonic() + 0.5
        left = time.monotonic()
    waited = time.monotonic() - left
    stalled.thaw()
    assert waited < 1.5, f"leaving the lock took {waited:.1f} s"
    # Freed in the background once the store answered: not after its 30 s expiry (the holder lives on).
    started = time.monotonic()
    async with other.lock("s1", ttl_s=30, wait_s=10):
        pass
    assert time.monotonic() - started < 5


async def test_a_turn_that_ends_and_a_process_that_closes_on_a_frozen_store_take_seconds(stalled, replicas):
    """`datathread ask` as Redis froze: leave the lock, close the store, exit. The release still under
    way is stopped at close; the lock expires, or is taken at once from its dead holder (same host)."""
    store = replicas()
    async with store.lock("s2", ttl_s=30) as held:
        stalled.freeze()
        started = time.monotonic()
        held.release_by = time.monotonic()  # the turn's deadline has passed
    await asyncio.wait_for(store.close(), 10)
    assert time.monotonic() - started < 2
