"""Tasks that may outlive the wait for them: kept until they end, waited for or cancelled on close.

A lock's release, a turn's record, a thread told after the ack, a worker's watcher, a withdrawn put:
each is started, waited for a bounded while (or not at all), and left to finish in the background.
asyncio keeps only a weak reference to a running task, so one nobody holds may be collected before it
ends; each owner kept its own set for that, with the same four lines around it. `Background` is that
set. It is not `asyncio.TaskGroup` (or anyio's): a task group lives for one `async with` block, waits
for every task without a bound as the block ends and cancels the rest when one fails, while these
tasks belong to an object (a store, a runner) whose close cancels what is left, or waits for it only
so long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Background:
    """The running tasks of one owner; a task leaves the set as it ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()

    def start(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run `coro` in a task kept until it ends; the caller may wait for it, or not."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self, timeout: float) -> None:
        """Wait up to `timeout` for the tasks running now to end (those started meanwhile are not
        waited for); what is still running afterwards goes on."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    def cancel(self) -> None:
        """Cancel every task still running, without waiting for them to end."""
        for task in list(self._tasks):
            task.cancel()
