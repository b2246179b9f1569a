"""Ack first, work after: surfaces hand a turn to a runner and return their HTTP response at once.

A `TurnJob` is plain data (it crosses to a Modal function as-is). Handlers are registered per job
kind by the surfaces; `LocalRunner` runs them as asyncio tasks in this process, and the Modal runner
(`deploy/modal_app.py`) `.spawn()`s a function that calls the very same handler remotely.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnJob:
    """Work to do after the ack: `kind` names the handler ("slack.turn", "teams.turn", …)."""

    kind: str
    payload: dict = field(default_factory=dict)
    # Quick jobs (button clicks, confirmations, home tabs) skip the queue of turns: a turn waiting for a
    # Run/Cancel click must never wait behind the very click that would release it.
    quick: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


JobHandler = Callable[[TurnJob], Awaitable[None]]


class Runner(Protocol):
    """Schedules jobs; `submit` must return fast (it runs inside the platform's ack budget)."""

    def register(self, kind: str, handler: JobHandler) -> None:
        """Name the coroutine that runs jobs of `kind`."""

    async def submit(self, job: TurnJob) -> None:
        """Schedule a job and return without waiting for it."""

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for scheduled jobs (tests, graceful shutdown)."""


class LocalRunner:
    """In-process runner: each job is an asyncio task; failures are logged, never lost silently."""

    def __init__(self, *, max_concurrent: int = 8) -> None:
        self.handlers: dict[str, JobHandler] = {}
        self.tasks: set[asyncio.Task] = set()
        # Backpressure: beyond this many jobs at once, the rest wait their turn instead of competing for
        # the CPU with the event loop that must keep acking within the platforms' deadlines.
        self._slots = asyncio.Semaphore(max_concurrent)

    def register(self, kind: str, handler: JobHandler) -> None:
        self.handlers[kind] = handler

    async def submit(self, job: TurnJob) -> None:
        handler = self.handlers[job.kind]
        task = asyncio.create_task(self._run_in_slot(handler, job), name=f"job:{job.kind}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run_now(self, job: TurnJob) -> None:
        """Run a job in the current task (used by the remote side of other runners)."""
        await self._run(self.handlers[job.kind], job)

    async def _run_in_slot(self, handler: JobHandler, job: TurnJob) -> None:
        if job.quick:
            return await self._run(handler, job)
        async with self._slots:
            await self._run(handler, job)

    @staticmethod
    async def _run(handler: JobHandler, job: TurnJob) -> None:
        try:
            await handler(job)
        except Exception:
            log.exception("job %s failed", job.kind)

    async def drain(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self.tasks:
            remaining = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait(set(self.tasks), timeout=remaining)
            if remaining == 0.0 or (not done and deadline is not None):
                break
