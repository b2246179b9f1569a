"""Shutting down worker processes (`core/runner_workers.py`, `core/runner_worker.py`): real worker
processes speaking the real protocol, over their pipes or through a real redis-server's streams."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from core.runner import TurnJob
from core.runner_worker import lost_kind
from core.runner_workers import WorkerRunner
from tests.core.stubborn_worker import KIND


@pytest.mark.parametrize("jobs_via", ["pipe", "redis"])
async def test_a_job_ignoring_its_cancellation_at_shutdown_is_told_once(settings, jobs_via, request):
    """A turn still running after its grace is told by its worker; the parent, killing that worker
    later, must not tell the same thread again."""
    if jobs_via == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()
        settings = settings.model_copy(update={"redis_url": server.url})
    command = [sys.executable, "-m", "tests.core.stubborn_worker"]
    runner = WorkerRunner(settings, command, workers=1, finish_s=0.2, grace_s=0.5)
    told_here: list[dict] = []

    async def never_here(job: TurnJob) -> None:
        raise AssertionError("jobs run in the worker")

    async def tell_here(job: TurnJob) -> None:
        told_here.append(job.payload)

    runner.register(KIND, never_here)
    runner.register(lost_kind(KIND), tell_here)
    await runner.start()
    question = {"thread": "T1", "ignore_s": 60}
    await runner.submit(TurnJob(kind=KIND, payload=question))
    deadline = time.monotonic() + 30
    while not (settings.home / "started").exists():
        assert time.monotonic() < deadline, "the worker never ran the job"
        await asyncio.sleep(0.05)

    started = time.monotonic()
    await runner.stop()  # the worker outlives its grace with the job: it is killed
    assert time.monotonic() - started < 10  # the injected grace, not the default 10 s, bounded it

    told = settings.home / "told.jsonl"
    told_there = [json.loads(line) for line in told.read_text().splitlines()] if told.exists() else []
    assert told_there + told_here == [question]
