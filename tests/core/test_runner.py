"""The local runner: submit returns at once, turns queue beyond the limit, quick jobs never queue."""

from __future__ import annotations

import asyncio
import logging

from core.runner import LocalRunner, TurnJob


async def test_turns_are_bounded_and_quick_jobs_skip_the_queue():
    runner = LocalRunner(max_concurrent=2)
    running, peak, release = 0, 0, asyncio.Event()
    order: list[str] = []

    async def turn(job: TurnJob) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    async def click(job: TurnJob) -> None:
        order.append(job.payload["id"])
        release.set()  # the click that unblocks waiting turns must not wait behind them

    runner.register("t", turn)
    runner.register("click", click)
    for i in range(5):
        await runner.submit(TurnJob("t", {"id": i}))
    await asyncio.sleep(0.05)
    assert running == 2 and not order
    await runner.submit(TurnJob("click", {"id": "c"}, quick=True))
    await runner.drain(timeout=5)
    assert order == ["c"] and peak == 2 and running == 0 and not runner.tasks


async def test_a_failing_job_is_logged_and_others_go_on(caplog):
    runner = LocalRunner()
    done: list[int] = []

    async def job(j: TurnJob) -> None:
        if j.payload["n"] == 1:
            raise RuntimeError("boom")
        done.append(j.payload["n"])

    runner.register("j", job)
    with caplog.at_level(logging.ERROR):
        for n in range(3):
            await runner.submit(TurnJob("j", {"n": n}))
        await runner.drain(timeout=5)
    assert sorted(done) == [0, 2]
    assert "job j failed" in caplog.text
