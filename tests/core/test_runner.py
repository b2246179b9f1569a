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


async def test_stopping_waits_for_running_turns_until_hurried_then_tells_their_threads(caplog):
    """`stop` gives running turns their time and says so once; `hurry` (a second Ctrl-C, from a
    signal handler: another thread here, as the handler runs outside the loop's callbacks) ends the
    wait at once; each stopped job's thread is told through its surface's lost handler."""
    from core.runner import lost_kind

    runner = LocalRunner()
    told: list[str] = []

    async def turn(job: TurnJob) -> None:
        await asyncio.Event().wait()  # an answer still being written

    async def lost(job: TurnJob) -> None:
        told.append(job.payload["id"])

    runner.register("t", turn)
    runner.register(lost_kind("t"), lost)
    for i in ("a", "b"):
        await runner.submit(TurnJob("t", {"id": i}))
    await runner.submit(TurnJob("t", {"id": "quick"}, quick=True))
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.WARNING):
        stopping = asyncio.create_task(runner.stop(timeout=30))
        await asyncio.sleep(0.3)
        assert not stopping.done()  # it waits for the answers…
        started = loop.time()
        await asyncio.to_thread(runner.hurry)
        await asyncio.wait_for(stopping, 5)  # …until hurried
    assert loop.time() - started < 5  # at once (bounded for a loaded machine)
    assert "waiting up to 30 s for 2 answer(s) still running" in caplog.text
    assert sorted(told) == ["a", "b", "quick"] and not runner.tasks


async def test_hurried_before_stopping_does_not_wait_at_all():
    runner = LocalRunner()

    async def turn(job: TurnJob) -> None:
        await asyncio.Event().wait()

    runner.register("t", turn)
    await runner.submit(TurnJob("t", {"id": 1}))
    await asyncio.sleep(0.05)
    runner.hurry()
    await asyncio.wait_for(runner.stop(timeout=30), 5)
    assert not runner.tasks


async def test_a_job_that_starts_while_stopping_waits_gets_its_time_too():
    """A scheduled run submitted during the first Ctrl-C's wait: waited for like the others (it was
    cancelled — "stopped" in its thread — as soon as the earlier ones ended)."""
    from core.runner import lost_kind

    runner = LocalRunner()
    finished: list[str] = []
    told: list[str] = []

    async def turn(job: TurnJob) -> None:
        await asyncio.sleep(job.payload["s"])
        finished.append(job.payload["id"])

    async def lost(job: TurnJob) -> None:
        told.append(job.payload["id"])

    runner.register("t", turn)
    runner.register(lost_kind("t"), lost)
    await runner.submit(TurnJob("t", {"id": "first", "s": 0.2}))
    stopping = asyncio.create_task(runner.stop(timeout=10))
    await asyncio.sleep(0.1)
    await runner.submit(TurnJob("t", {"id": "scheduled", "s": 0.6}))
    await asyncio.wait_for(stopping, 10)
    assert finished == ["first", "scheduled"] and told == []
