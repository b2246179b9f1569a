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


async def test_with_redis_a_job_handed_to_a_worker_that_died_before_starting_it_is_answered(
    settings, api, fake_model, redis_server
):
    """Redis hands a new entry to a blocked read whose worker was killed a moment before (its socket not
    yet seen closed), or a worker dies between its read and the job's start: nobody has heard of that
    question, so it is queued again and answered — before, the thread was told the answer stopped."""
    async with replicas(settings, api, redis_server.url) as (a, b):
        workers = a.state.runner.pids() + b.state.runner.pids()
        with redis_py.Redis.from_url(redis_server.url) as r:

            def blocked_reads() -> int:
                return sum(
                    c.get("cmd") == "xreadgroup" and "b" in c.get("flags", "") for c in r.client_list()
                )

            for _ in range(100):  # frozen while at least one of them waits in its read of the streams
                for pid in workers:
                    os.kill(pid, signal.SIGSTOP)
                if blocked_reads():
                    break
                for pid in workers:
                    os.kill(pid, signal.SIGCONT)
                await asyncio.sleep(0.05)
            assert blocked_reads(), "no worker was caught waiting in its read"
            fake_model.enqueue(text("Answered after all."))
            await a.event(mention("a question at the wrong moment", ts="1700000300.000100"))
            await until(lambda: r.xpending("dt:jobs:turns", "workers")["pending"] == 1, timeout=30)
            for pid in workers:  # it was handed to a frozen worker, which dies without starting it
                os.kill(pid, signal.SIGKILL)
            await until(lambda: said(api, "Answered after all.") > 0)
            assert said(api, STOPPED[:40]) == 0
            assert (
                sum(
                    "a question at the wrong moment" in json.dumps(q["messages"]) for q in fake_model.requests
                )
                == 1
            )


async def test_with_redis_an_abandoned_job_is_settled_once_however_many_find_it(redis_server):
    """A dead replica's entry found at once by its replica's takeover and by another replica's sweep:
    settled once — queued again when its worker never started it, one lost job when it had."""
    from core.runner import LOST, TurnJob
    from core.runner_redis import QUICK, TURNS, RedisJobs, Settled
    from core.runner_worker import report_lost

    jobs = RedisJobs(redis_server.url)
    try:
        await jobs.prepare()
        for started in (False, True):
            await jobs.put(TurnJob(kind="slack.turn", payload={"text": f"started={started}"}))
            (taken,) = await jobs.take("dead-worker", turns=True, block_ms=100)
            if started:
                assert await jobs.may_run(taken)  # what a worker does just before it runs a job
            # then the worker died
            takeover = await jobs.take_over("dead-worker", "replica-a-supervisor")
            swept = await jobs.reclaim("replica-b-worker", min_idle_ms=0)
            assert [t.entry_id for t in takeover] == [t.entry_id for t in swept] == [taken.entry_id]
            settled = await asyncio.gather(*(report_lost(jobs, t) for t in takeover + swept))
            once = Settled.LOST if started else Settled.REQUEUED
            assert sorted(settled, key=lambda s: s.value) == sorted(
                [Settled.ALREADY, once], key=lambda s: s.value
            )
            assert await report_lost(jobs, takeover[0]) is Settled.ALREADY  # found again later: still settled
            if not started:  # the same job, queued again under a new put id, for any worker to run
                (again,) = await jobs.take("live-worker", turns=True, block_ms=100)
                assert again.job == taken.job and again.put_id != taken.put_id and again.requeues == 1
                assert await jobs.may_run(again) and not await jobs.may_run(taken)  # the old one never runs
                await jobs.done(again)
        lost = await jobs.r.xrange(QUICK)
        assert len(lost) == 1 and json.loads(lost[0][1][b"job"])["kind"] == LOST
        assert json.loads(lost[0][1][b"job"])["payload"]["job"]["payload"] == {"text": "started=True"}
        assert await jobs.r.xlen(TURNS) == 0
    finally:
        await jobs.close()


async def test_with_redis_a_job_queued_again_and_again_is_lost_in_the_end_and_a_withdrawn_one_is_not_told(
    redis_server,
):
    """A job whose workers keep dying before they start it is queued again MAX_REQUEUES times, then its
    thread hears it stopped; a withdrawn job (its thread was told to ask again) is settled silently."""
    from core.runner import TurnJob
    from core.runner_redis import MAX_REQUEUES, QUICK, TURNS, RedisJobs, Settled
    from core.runner_worker import report_lost

    jobs = RedisJobs(redis_server.url)
    try:
        await jobs.prepare()
        await jobs.put(TurnJob(kind="slack.turn", payload={"text": "Q"}))
        outcomes = []
        for n in range(MAX_REQUEUES + 1):
            (taken,) = await jobs.take(f"dead-{n}", turns=True, block_ms=100)
            outcomes.append(await report_lost(jobs, taken))
        assert outcomes == [Settled.REQUEUED] * MAX_REQUEUES + [Settled.LOST]
        assert await jobs.r.xlen(TURNS) == 0 and await jobs.r.xlen(QUICK) == 1
        await jobs.r.xtrim(QUICK, maxlen=0)  # that lost job told its thread

        await jobs.put(TurnJob(kind="slack.turn", payload={"text": "withdrawn"}))
        (taken,) = await jobs.take("dead-w", turns=True, block_ms=100)
        await jobs.r.set("dt:jobs:fate:" + taken.put_id, "withdrawn")  # as `put` does after its deadline
        assert await report_lost(jobs, taken) is Settled.WITHDRAWN
        assert await jobs.r.xlen(TURNS) == 0 and await jobs.r.xlen(QUICK) == 0
    finally:
        await jobs.close()
