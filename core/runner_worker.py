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
from typing import BinaryIO

from core.runner import LocalRunner, TurnJob
from core.runner_redis import RedisJobs, Renewer, Taken

log = logging.getLogger("datathread.workers")

LOST = "runner.lost"  # a job whose worker died: its surface says the answer stopped
LOST_SUFFIX = ".lost"
FINISH_S = 30.0  # how long a stopping worker lets the jobs it holds finish


def lost_kind(kind: str) -> str:
    """The job kind whose handler tells the user that a job of `kind` stopped with its worker."""
    return kind + LOST_SUFFIX


def lost_job(job: TurnJob) -> TurnJob:
    """The job that replaces one whose worker died (quick: it only posts a sentence)."""
    return TurnJob(kind=LOST, payload={"job": job.to_dict()}, quick=True)


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


class Worker:
    """Runs jobs on `runner` with at most `slots` turns at once (quick jobs never wait for a slot)."""

    def __init__(self, runner: LocalRunner, out: BinaryIO, *, slots: int):
        self.runner = runner
        self.out = out
        self.slots = slots
        self.busy = 0  # turns running now
        self.tasks: set[asyncio.Task] = set()

    def send(self, message: dict) -> None:
        self.out.write(json.dumps(message).encode() + b"\n")
        self.out.flush()

    async def run(self, job: TurnJob) -> None:
        """Run one job with its surface's handler; a lost job with its surface's lost handler."""
        if job.kind == LOST:
            original = job.payload.get("job") or {}
            kind = lost_kind(str(original.get("kind", "")))
            if kind not in self.runner.handlers:
                log.warning("a %s job stopped with its worker; no one to tell", original.get("kind"))
                return
            job = TurnJob(kind=kind, payload=dict(original.get("payload") or {}), quick=True)
        await self.runner.run_now(job)

    def start(self, job: TurnJob, done) -> None:
        async def one() -> None:
            if not job.quick:
                self.busy += 1
            try:
                await self.run(job)
            finally:
                if not job.quick:
                    self.busy -= 1
                await done()

        task = asyncio.create_task(one(), name=f"job:{job.kind}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def finish(self) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=FINISH_S)

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
        await jobs.prepare()
        held: dict[str, Taken] = {}
        renewer = Renewer(jobs.url, consumer, held, interval_s=max(lost_after_s / 3, 0.2)).start()
        closed = asyncio.create_task(stdin.read())  # EOF: the parent wants this worker to stop
        sweeper = asyncio.create_task(self._sweep(jobs, consumer, lost_after_s))
        try:
            while not closed.done():
                try:
                    found = await jobs.take(consumer, turns=self.busy < self.slots, block_ms=500)
                except OSError as exc:  # Redis unreachable: retry, the entries wait in the stream
                    log.warning("cannot take jobs: %s", exc)
                    await asyncio.sleep(1)
                    continue
                for taken in found:
                    held[taken.entry_id] = taken
                    if taken.job is None:
                        await self._release(jobs, held, taken)
                        continue
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


async def report_lost(jobs: RedisJobs, taken: Taken) -> bool:
    """Replace an abandoned entry by its lost job, once however many find it (a lost job that was
    itself lost is dropped). True when this call reported it."""
    lost = lost_job(taken.job) if taken.job is not None and taken.job.kind != LOST else None
    reported = await jobs.settle(taken, lost)
    if reported and lost is not None:
        log.warning("a %s job stopped with its worker; telling the thread", lost.payload["job"]["kind"])
    return reported
