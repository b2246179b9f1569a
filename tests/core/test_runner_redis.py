"""The Redis job streams (core/runner_redis.py) against a real redis-server: what a put that missed its
deadline leaves behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis

from core.runner import TurnJob
from core.runner_redis import RedisJobs
from tests.fakes.redis_server import RedisServer


@pytest.fixture
def frozen_redis():
    server = RedisServer().start()
    yield server
    os.kill(server.proc.pid, signal.SIGCONT)
    server.stop()


async def test_a_put_that_timed_out_in_a_frozen_redis_is_withdrawn_and_never_run(frozen_redis):
    """Redis frozen (`kill -STOP`, a long fork, a failover): the put misses its deadline and the thread
    is told the store is unreachable, ask again — but the XADD sits in Redis's socket and lands when it
    thaws, and a worker answered the question anyway, late, or twice after the person asked again. The
    web process withdraws such a put; a worker sees the mark before it could run the job."""
    web, worker = RedisJobs(frozen_redis.url), RedisJobs(frozen_redis.url)
    try:
        await web.prepare()
        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        with pytest.raises(redis.TimeoutError):
            await web.put(TurnJob(kind="slack.message", payload={"n": 1}))
        await asyncio.sleep(0.5)  # the withdrawal, sent meanwhile, waits in Redis's socket too
        os.kill(frozen_redis.proc.pid, signal.SIGCONT)
        await web.put(TurnJob(kind="slack.message", payload={"n": 2}))  # Redis is back: queued as ever
        taken = []
        for _ in range(50):
            taken += await worker.take("w1", turns=True, block_ms=100)
            if len(taken) == 2:
                break
        assert [t.job.payload["n"] for t in taken] == [1, 2]  # the late put did land
        assert [await worker.may_run(t) for t in taken] == [False, True]
        assert not await worker.may_run(taken[1])  # claimed once: a second look does not run it again
    finally:
        await web.close()
        await worker.close()


async def test_a_job_a_worker_took_first_is_not_withdrawn_after_it(frozen_redis):
    """Withdrawing and running are one or the other: a worker that claimed the job first runs it, and
    the late withdrawal leaves it so (one log line), rather than both happening."""
    web, worker = RedisJobs(frozen_redis.url), RedisJobs(frozen_redis.url)
    try:
        await web.prepare()
        await web.put(TurnJob(kind="slack.message", payload={"n": 3}))
        [taken] = await worker.take("w1", turns=True, block_ms=1000)
        assert await worker.may_run(taken)
        await web._withdraw(taken.put_id)  # as the web process would after its deadline
        assert await worker.r.get("dt:jobs:fate:" + taken.put_id) == b"run"
    finally:
        await web.close()
        await worker.close()


async def test_an_answer_waiting_after_an_event_loop_stall_is_read_not_given_up(frozen_redis):
    """The web process's loop blocked past the deadline while Redis answered at once: the put was
    cancelled and withdrawn though the job was queued (and a worker may have run it), and its thread
    was told to ask again. An answer already in the socket is read."""
    web = RedisJobs(frozen_redis.url)
    try:
        await web.prepare()
        putting = asyncio.ensure_future(web.put(TurnJob(kind="slack.message", payload={"n": 4})))
        looking = redis.Redis.from_url(frozen_redis.url)  # blocking: it does not let the loop run
        for _ in range(1000):
            await asyncio.sleep(0)
            if looking.xlen("dt:jobs:turns"):  # Redis has the XADD: its answer is on the way
                break
        time.sleep(1.5)  # the event loop stalls past PUT_DEADLINE_S (1 s) before reading that answer
        looking.close()
        await putting  # no TimeoutError
        assert await web.r.xlen("dt:jobs:turns") == 1 and not web._withdrawing
    finally:
        await web.close()


async def test_a_job_redis_cannot_mark_started_is_not_run_unmarked(frozen_redis, monkeypatch):
    """Redis froze between a worker's take and its mark that the job started: the worker ran it anyway,
    unmarked, so a worker dying mid-turn had it queued again as never started, and run twice (half an
    answer posted, then a whole one). Now the mark is tried again until Redis answers — the first try,
    which landed when Redis thawed, is found as this worker's own — and the job runs marked; a mark that
    cannot be made in time leaves it pending for a sweep, not run."""
    from core import runner_redis
    from core.runner_redis import Settled
    from core.runner_worker import _may_start, report_lost

    monkeypatch.setattr(runner_redis, "SOCKET_TIMEOUT_S", 0.3)
    web, worker = RedisJobs(frozen_redis.url), RedisJobs(frozen_redis.url)
    try:
        await web.prepare()
        for n in (5, 6):
            await web.put(TurnJob(kind="slack.message", payload={"n": n}))
        first, second = [(await worker.take("w1", turns=True, block_ms=1000))[0] for _ in range(2)]
        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        asyncio.get_running_loop().call_later(1.0, os.kill, frozen_redis.proc.pid, signal.SIGCONT)
        assert await _may_start(worker, first, "w1") == "run"  # after the thaw, marked w1's
        assert await web.r.get("dt:jobs:fate:" + first.put_id) == b"run w1"
        assert not await web.may_run(first, "w2")  # nobody else runs it

        os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
        assert await _may_start(worker, second, "w1", tries_s=0.5) == "later"  # not run unmarked
        os.kill(frozen_redis.proc.pid, signal.SIGCONT)
        await asyncio.sleep(0.2)
        swept = {t.entry_id: t for t in await web.reclaim("w2", min_idle_ms=0)}  # a live worker's sweep
        settled = await report_lost(web, swept[second.entry_id])
        # queued again if its mark never landed; if it did, the thread hears it stopped: never run twice
        assert settled in (Settled.REQUEUED, Settled.LOST)
    finally:
        await web.close()
        await worker.close()
