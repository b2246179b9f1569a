"""The Redis job streams (core/runner_redis.py) against a real redis-server: what a put that missed its
deadline leaves behind."""

from __future__ import annotations

import asyncio
import os
import signal

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
        assert [await worker.withdrawn(t) for t in taken] == [True, False]
    finally:
        await web.close()
        await worker.close()
