"""The runner of the Modal deployment: `submit` spawns the turn function and returns at once.

The web container acks the platform's request, hands the job to `ModalRunner.submit`, and the turn
runs in another container (`deploy/modal_app.py: TurnWorker.run`), which runs the very handler the
surface registered, through `LocalRunner.run_now`. This module does not import `modal`: the spawn
callable is injected (`TurnWorker().run.spawn.aio` on Modal, a recording stand-in in tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from core.runner import JobHandler, TurnJob

Spawn = Callable[[dict], Awaitable[object]]
JOB_ID = "id"  # each spawned job's id: the turn container runs a job Modal gives it twice only once
JOB_MEMORY_S = 86_400.0  # how long a job's id is remembered (Modal restarts an input within minutes)


def as_spawned(job: TurnJob) -> dict:
    """A job as the turn function gets it: plain data, with an id of its own (every spawn: turns from
    the web container, scheduled runs from the cron function)."""
    return {**job.to_dict(), JOB_ID: uuid.uuid4().hex}


class ModalRunner:
    """Runner protocol over a remote spawn. Handlers are remembered by name only: they run remotely."""

    def __init__(self, spawn: Spawn):
        self._spawn = spawn
        self.kinds: set[str] = set()

    def register(self, kind: str, handler: JobHandler) -> None:
        """Record the job kind so a typo fails here, in the web container, not later in a turn container."""
        del handler  # the turn container registers the same handler itself (same surfaces, same code)
        self.kinds.add(kind)

    async def submit(self, job: TurnJob) -> None:
        """Spawn the turn function with the job as plain data and an id; one round trip to Modal."""
        if job.kind not in self.kinds:
            raise KeyError(f"no handler registered for job kind {job.kind!r}")
        await self._spawn(as_spawned(job))

    async def drain(self, timeout: float | None = None) -> None:
        """Nothing to wait for: spawned calls belong to Modal and outlive this container."""
        return None
