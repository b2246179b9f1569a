"""Turns in worker processes with `REDIS_URL` (`core/runner_redis.py`): two web apps (replicas) served in
this loop on one real throwaway redis-server, one worker process each, take every job exactly once, and
a dead worker's job is reported once. A module of its own (not in test_turn_workers.py) so that the two
slowest worker-process modules run on two test workers at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time

import pytest
import redis as redis_py

from bot.slack_jobs import STOPPED
from tests.bot.slack_harness import mention, said, serve, until
from tests.fakes.anthropic_api import text
from tests.fakes.redis_server import RedisServer

pytestmark = pytest.mark.own_sandbox  # the workers start their own fork servers anyway


@contextlib.asynccontextmanager
async def replicas(settings, api, redis_url: str):
    """Two web apps (replicas) on one Redis, one worker process each."""
    shared = settings.model_copy(update={"turn_workers": 1, "redis_url": redis_url, "lock_ttl": 2.0})
    async with serve(shared, api) as a, serve(shared, api) as b:
        yield a, b


@pytest.fixture
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


async def test_with_redis_two_replicas_workers_take_each_job_exactly_once(
    settings, api, fake_model, redis_server
):
    async with replicas(settings, api, redis_server.url) as (a, b):
        questions = [f"Q-{n}" for n in range(8)]
        for n, q in enumerate(questions):  # slash commands: no de-dup claim hides a second run
            resp = await (a if n % 2 else b).command(q)
            assert resp.status_code == 200
        await until(lambda: all(said(api, f"asked: {q}") for q in questions))
        await until(lambda: len(fake_model.requests) >= len(questions))
        await asyncio.sleep(1.5)  # a job taken twice would show up by now
        turns = {q: sum(q in json.dumps(r["messages"][0]) for r in fake_model.requests) for q in questions}
        assert turns == dict.fromkeys(questions, 1)  # each question was one turn: one model call
        assert [said(api, f"asked: {q}") for q in questions] == [1] * len(questions)
        with redis_py.Redis.from_url(redis_server.url) as r:  # each acked and gone (once its answer is out)
            await until(lambda: r.xlen("dt:jobs:turns") == 0 and r.xlen("dt:jobs:quick") == 0)


async def test_with_redis_a_dead_workers_turn_is_reported_by_its_replica(
    settings, api, fake_model, redis_server
):
    async with replicas(settings, api, redis_server.url) as (a, b):
        victims = a.state.runner.pids() + b.state.runner.pids()

        def kill_the_worker(body: dict) -> dict:
            for pid in victims:  # whichever worker took it: both die, both are replaced
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            return text("never delivered")

        fake_model.enqueue(kill_the_worker)
        await a.event(mention("first question", ts="1700000200.000100"))
        await until(lambda: said(api, STOPPED[:40]) > 0)
        assert said(api, STOPPED[:40]) == 1 and said(api, "never delivered") == 0
        await until(lambda: len(a.state.runner.pids() + b.state.runner.pids()) == 2)

        fake_model.enqueue(text("Still here."))
        await b.event(mention("still there?", ts="1700000201.000100", thread_ts="1700000200.000100"))
        await until(lambda: said(api, "Still here.") > 0)


async def test_with_redis_an_abandoned_job_is_reported_once_however_many_find_it(redis_server):
    """A dead replica's entry found at once by its replica's takeover and by another replica's sweep:
    one lost job, the entry gone."""
    from core.runner import LOST, TurnJob
    from core.runner_redis import QUICK, TURNS, RedisJobs
    from core.runner_worker import report_lost

    jobs = RedisJobs(redis_server.url)
    try:
        await jobs.prepare()
        await jobs.put(TurnJob(kind="slack.turn", payload={"text": "Q"}))
        (taken,) = await jobs.take("dead-worker", turns=True, block_ms=100)  # then the worker died
        takeover = await jobs.take_over("dead-worker", "replica-a-supervisor")
        swept = await jobs.reclaim("replica-b-worker", min_idle_ms=0)
        assert [t.entry_id for t in takeover] == [t.entry_id for t in swept] == [taken.entry_id]
        reported = await asyncio.gather(*(report_lost(jobs, t) for t in takeover + swept))
        assert sorted(reported) == [False, True]
        lost = await jobs.r.xrange(QUICK)
        assert len(lost) == 1 and json.loads(lost[0][1][b"job"])["kind"] == LOST
        assert await jobs.r.xlen(TURNS) == 0
        assert await report_lost(jobs, takeover[0]) is False  # found again later: still settled
        assert await jobs.r.xlen(QUICK) == 1
    finally:
        await jobs.close()
