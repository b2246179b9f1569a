"""Tasks kept until they end (core/background.py): the set the lock releases, turn records, runner
tells and watchers and withdrawn puts share."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from core.background import Background


async def test_a_task_nobody_else_holds_is_kept_while_it_runs_and_leaves_as_it_ends():
    """asyncio holds a waiting task only weakly: one waiting on a future only it holds is garbage once
    nobody else holds it, and is collected before it ends ("Task was destroyed but it is pending!").
    Here nothing but the set holds the task: it must survive a collection and finish its work."""
    tasks, done, futures = Background(), [], []

    async def wait_then_mark() -> None:
        woken = asyncio.get_running_loop().create_future()  # it and the task hold only each other
        futures.append(weakref.ref(woken))
        await woken
        done.append("ran")

    tasks.start(wait_then_mark(), name="datathread-kept")  # the task is not kept here
    await asyncio.sleep(0)  # it runs up to its await
    gc.collect()
    woken = futures[0]()
    assert woken is not None, "the waiting task was collected: nothing kept it"
    assert len(tasks) == 1 and "datathread-kept" in {t.get_name() for t in asyncio.all_tasks()}
    woken.set_result(None)
    del woken
    await tasks.wait(5)
    await asyncio.sleep(0)  # the done callback runs on the next pass of the loop
    assert done == ["ran"] and len(tasks) == 0


async def test_the_task_started_is_returned_with_its_name_for_the_caller_to_await():
    tasks, gate = Background(), asyncio.Event()
    task = tasks.start(gate.wait(), name="datathread-gate")
    assert task.get_name() == "datathread-gate"
    gate.set()
    assert await task is True


async def test_a_task_that_raises_leaves_the_set_and_its_error_stays_on_the_task():
    tasks = Background()

    async def fail():
        raise ValueError("boom")

    task = tasks.start(fail())
    await asyncio.wait({task})
    await asyncio.sleep(0)
    assert len(tasks) == 0 and isinstance(task.exception(), ValueError)


async def test_wait_is_bounded_and_leaves_what_is_still_running_running():
    tasks, gate = Background(), asyncio.Event()
    quick, slow = tasks.start(asyncio.sleep(0)), tasks.start(gate.wait())
    await tasks.wait(0.05)
    assert quick.done() and not slow.done() and len(tasks) == 1
    gate.set()
    await tasks.wait(5)
    assert slow.done() and len(tasks) == 0


async def test_wait_with_nothing_running_returns_at_once():
    await asyncio.wait_for(Background().wait(60), 1)


async def test_wait_does_not_wait_for_tasks_started_meanwhile():
    tasks, go, later = Background(), asyncio.Event(), asyncio.Event()

    async def start_another():
        await go.wait()
        tasks.start(later.wait())

    tasks.start(start_another())
    waiting = asyncio.create_task(tasks.wait(60))
    await asyncio.sleep(0)  # the wait has seen what runs now
    go.set()
    await asyncio.wait_for(waiting, 1)  # the first task, not the one it started
    assert len(tasks) == 1
    tasks.cancel()


async def test_cancel_cancels_what_is_left_without_waiting_for_it():
    tasks, ended = Background(), []

    async def slow_to_stop():
        try:
            await asyncio.sleep(60)
        finally:
            ended.append("cancelled")

    task = tasks.start(slow_to_stop())
    await asyncio.sleep(0)  # let it start
    tasks.cancel()
    assert not task.done() and not ended  # asked to stop, not waited for
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["cancelled"]
