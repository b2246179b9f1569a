"""The worker side of `core/runner_workers.py`: a process with its own event loop that runs turn jobs.

The worker's entry point (`bot/turn_worker.py`) builds the same app as the web process around a
`LocalRunner`, so the surfaces register the very same handlers; `serve_jobs` then feeds that runner.
Jobs come either from the parent over stdin (one JSON line each, answered with a `done` line on the
protocol pipe) or, with Redis, from the job streams (`core/runner_redis.py`). The parent closing
stdin (or dying: the kernel kills this process then) means stop taking jobs and finish the ones held.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import BinaryIO, TypeVar

from redis.exceptions import RedisError

from core.outage import Outage
from core.runner import (
    LOST,
    TELL_LOST_S,
    LocalRunner,
    TurnJob,
    cancel_and_tell,
    let_finish,
    lost_job,
    lost_kind,
    tell_lost,
)
from core.runner_redis import RedisJobs, Renewer, Settled, Taken
from core.store_redis import redis_reason, redis_where

__all__ = ["LOST", "Worker", "die_with_parent", "lost_job", "lost_kind", "report_lost"]

log = logging.getLogger("datathread.workers")

# The parent's word for a second Ctrl-C: stop now, telling the threads of the jobs still running.
HURRY_SIGNAL = signal.SIGUSR1
T = TypeVar("T")
TAKE_GRACE_S = 2.0  # a stopping worker waits this long for its read of the job queue (it blocks 0.5 s)
FINISH_S = 30.0  # how long a stopping worker lets the jobs it holds finish (the parent may say otherwise)


def die_with_parent() -> None:
    """Linux: the kernel SIGKILLs this process when its parent dies, so a killed web process never
    leaves a worker finishing (and saving) a turn nobody accounts for. Elsewhere stdin EOF stops it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the line above took effect
        os._exit(1)
    # Ctrl-C on the terminal or a service manager's SIGTERM is for the web process: it stops the
    # workers in order (stdin closed); a worker killed first would look like a crash and be restarted.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(HURRY_SIGNAL, signal.SIG_IGN)  # until the worker's loop handles it: never its death


class Worker:
    """Runs jobs on `runner` with at most `slots` turns at once (quick jobs never wait for a slot).
    Stopping, held jobs get `finish_s` to end, then are cancelled and get `grace_s` more."""

    def __init__(
        self,
        runner: LocalRunner,
        out: BinaryIO,
        *,
        slots: int,
        finish_s: float = FINISH_S,
        grace_s: float = TELL_LOST_S,
    ):
        self.runner = runner
        self.out = out
        self.slots = slots
        self.finish_s = finish_s
        self.grace_s = grace_s
        self.hurried = asyncio.Event()  # set by `hurry` (the parent's SIGUSR1: a second Ctrl-C)
        self.busy = 0  # turns running now
        self.tasks: dict[asyncio.Task, TurnJob] = {}
        self._releases: dict[asyncio.Task, Callable[[], Awaitable[None]]] = {}  # each task's `done`, once

    def send(self, message: dict) -> None:
        self.out.write(json.dumps(message).encode() + b"\n")
        self.out.flush()

    async def run(self, job: TurnJob) -> bool:
        """Run one job with its surface's handler; a lost job with its surface's lost handler. True when
        a stopped turn told its thread itself (`LocalRunner.run_now`)."""
        if job.kind == LOST:
            await tell_lost(self.runner.handlers, job)
            return False
        return await self.runner.run_now(job)

    def start(self, job: TurnJob, done: Callable[[], Awaitable[None]]) -> None:
        released = False

        async def release() -> None:  # at the job's end, or earlier by `finish`: never twice
            nonlocal released
            if not released:
                released = True
                await done()

        async def one() -> bool:
            if not job.quick:
                self.busy += 1
            try:
                return await self.run(job)
            finally:
                if not job.quick:
                    self.busy -= 1
                await release()

        task = asyncio.create_task(one(), name=f"job:{job.kind}")
        self.tasks[task] = job
        self._releases[task] = release
        task.add_done_callback(self._forget)

    def hurry(self) -> None:
        """Stopping without waiting for the jobs held (`HURRY_SIGNAL` from the parent, on the loop)."""
        self.hurried.set()
        self.runner.hurry()

    def _forget(self, task: asyncio.Task) -> None:
        self.tasks.pop(task, None)
        self._releases.pop(task, None)

    async def finish(self) -> None:
        """Stopping: the jobs held get `finish_s` to end; the rest are cancelled and their threads told.
        Each job's entry or `done` line is then released, so nobody reports it again — at once for a job
        still running after its grace (it ignores its cancellation): its thread has heard, and the
        parent, killing this worker later, would otherwise tell it a second time."""
        await let_finish(self.tasks, self.finish_s, self.hurried)
        cancelled = dict(self.tasks)
        await cancel_and_tell(cancelled, self.runner.handlers, grace_s=self.grace_s)
        for task in cancelled:
            if release := self._releases.get(task):
                await release()

    # --- jobs from the parent (no Redis) ------------------------------------------------------------
    async def serve_pipe(self, stdin: asyncio.StreamReader) -> None:
        """Run every job the parent sends at once (the Analyst bounds the turns running at once)."""
        while line := await stdin.readline():
            msg = json.loads(line)
            job = TurnJob(**msg["job"])

            async def done(n=msg["id"]) -> None:
                self.send({"done": n})

            self.start(job, done)
        await self.finish()

    # --- jobs from Redis ----------------------------------------------------------------------------
    async def serve_redis(
        self, jobs: RedisJobs, consumer: str, stdin: asyncio.StreamReader, *, lost_after_s: float
    ) -> None:
        """Take jobs from the streams while stdin is open; renew held ones; turn abandoned ones into lost jobs."""
        held: dict[str, Taken] = {}
        renewer = Renewer(jobs.url, consumer, held, interval_s=max(lost_after_s / 3, 0.2)).start()
        closed = asyncio.create_task(stdin.read())  # EOF: the parent wants this worker to stop
        sweeper = asyncio.create_task(self._sweep(jobs, consumer, lost_after_s))
        outage = Outage(log, f"Redis at {redis_where(jobs.url)} (turn jobs)")
        prepared = False  # the streams and their group exist
        try:
            while not closed.done():
                try:
                    if outage.down or not prepared:  # a restarted Redis may have lost the group
                        if not (await _unless_stopping(jobs.prepare(), closed))[0]:
                            break
                        prepared = True
                    taken_in_time, found = await _unless_stopping(
                        jobs.take(consumer, turns=self.busy < self.slots, block_ms=500), closed
                    )
                    if not taken_in_time:
                        break
                except (RedisError, OSError) as exc:  # the entries wait in the stream: retry, quietly
                    pause = outage.failed(redis_reason(exc))
                    await asyncio.wait({closed}, timeout=pause)
                    continue
                outage.recovered()
                for taken in found:
                    held[taken.entry_id] = taken
                    fate = "gone" if taken.job is None else await _may_start(jobs, taken, consumer)
                    if fate == "later":  # neither acked nor renewed: a sweep queues it again, not started
                        held.pop(taken.entry_id, None)
                    elif fate == "gone":
                        await self._release(jobs, held, taken)
                    else:
                        self.start(taken.job, lambda t=taken: self._release(jobs, held, t))
        finally:
            sweeper.cancel()
            await self.finish()
            renewer.stop()

    async def _release(self, jobs: RedisJobs, held: dict[str, Taken], taken: Taken) -> None:
        try:
            await jobs.done(taken)
        except Exception as exc:  # the renewer stops renewing it; it is then reported lost
            log.warning("could not ack job %s: %s", taken.entry_id, exc)
        held.pop(taken.entry_id, None)

    async def _sweep(self, jobs: RedisJobs, consumer: str, lost_after_s: float) -> None:
        """Every so often, claim entries whose worker stopped renewing them and report them lost."""
        while True:
            await asyncio.sleep(max(lost_after_s / 2, 0.5))
            with contextlib.suppress(Exception):
                for taken in await jobs.reclaim(consumer, min_idle_ms=int(lost_after_s * 1000)):
                    await report_lost(jobs, taken)


MARK_TRIES_S = 60.0  # how long a worker keeps trying to mark a job it took as started


async def _may_start(jobs: RedisJobs, taken: Taken, consumer: str, *, tries_s: float = MARK_TRIES_S) -> str:
    """ "run" once this worker has marked the job started (its fate key), "gone" when it was withdrawn —
    its queueing timed out in the web process and its thread was told to ask again — or queued again
    for a dead worker's meanwhile. Redis not answering, the mark is tried again (held and renewed
    meanwhile; a mark that landed unanswered is found as this worker's own): run unmarked, a worker
    dying mid-turn would have it queued again and run twice. Still unmarked after `tries_s`, "later":
    left pending and no longer renewed, a sweep settles it once Redis answers (queued again, or, if
    the mark did land, its thread told it stopped). The turn needs Redis, its session store, anyway."""
    deadline, pause = asyncio.get_running_loop().time() + tries_s, 0.25
    while True:
        try:
            marked = await jobs.may_run(taken, consumer)
            break
        except (RedisError, OSError) as exc:
            if asyncio.get_running_loop().time() + pause > deadline:
                log.warning("not starting a %s job: Redis did not mark it started (%s)", taken.job.kind, exc)
                return "later"
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
    if not marked:
        log.info("not running a %s job: withdrawn, or queued again, before it started", taken.job.kind)
    return "run" if marked else "gone"


async def report_lost(jobs: RedisJobs, taken: Taken) -> Settled:
    """Settle an abandoned entry, once however many find it: queued again if its job never started,
    else replaced by its lost job (a lost job that was itself lost is dropped)."""
    lost = lost_job(taken.job) if taken.job is not None and taken.job.kind != LOST else None
    settled = await jobs.settle(taken, lost)
    if settled is Settled.REQUEUED:
        log.info("a %s job its worker never started was queued again", taken.job.kind if taken.job else "?")
    return settled  # telling the thread logs where it was (`tell_lost`)


async def _unless_stopping(call: Awaitable[T], closed: asyncio.Task) -> tuple[bool, T | None]:
    """`(True, call's result)`, or `(False, None)` when the worker is told to stop before Redis answers:
    a Redis that answers does within TAKE_GRACE_S (a take blocks 0.5 s; what it took then runs), one that
    stopped answering has its call dropped — it held the worker's stop, and `serve`'s, for ever."""
    task = asyncio.ensure_future(call)
    await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await asyncio.wait({task}, timeout=TAKE_GRACE_S)
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
            await task
        return False, None
    return True, task.result()
