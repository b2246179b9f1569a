"""Turns in worker processes: the web process acks and submits; N workers, each with its own event
loop, run the jobs with the very handlers the surfaces registered.

Why: turns in the web server's own loop and process compete with the acks for the loop and the CPU
(Slack wants its 200 within 3 s; a burst of turns pushed the ack p99 to 2.3× a bare Bolt app). Here
the web process only verifies, filters and submits.

Jobs reach the workers over each worker's stdin (the parent picks the worker holding the fewest), or
with `REDIS_URL` through Redis streams (`core/runner_redis.py`), from which any replica's workers take
them, each exactly once. A worker that dies is restarted; for the jobs it had started this process
runs the surfaces' lost handlers at once (the thread hears that the answer stopped; the session lock
the dead turn held is taken over at once, core/lock_owner.py); with Redis, the ones it had taken and
not started are queued again (core/runner_redis.py). Over pipes, each job is also noted in a
file until it ends (core/job_journal.py): after a killed web process restarts, its jobs' threads hear.

The worker program is injected by module name (`bot.turn_worker` builds the surfaces; the core never
imports a surface) and forked from a template that has imported it once (`core/worker_fork.py`).
Workers get the settings as one JSON line on stdin, never in argv or a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr
from redis.exceptions import RedisError

from core.background import Background
from core.config import Settings
from core.job_journal import JobJournal
from core.runner import LOST, TELL_LOST_S, JobHandler, TurnJob, tell_lost, tell_store_down
from core.runner_redis import QUICK, TURNS, RedisJobs, Settled
from core.runner_worker import FINISH_S, HURRY_SIGNAL
from core.store_base import StoreUnavailable
from core.store_redis import redis_failure
from core.worker_fork import ForkedWorker, start_worker

log = logging.getLogger("datathread.workers")

START_S = 180.0  # a worker builds the core and starts its fork server: seconds on a loaded host
RESTART_PAUSE_S = 0.25  # after a crash; doubled for each failed start in a row (a worker that cannot start)
MAX_RESTART_PAUSE_S = 60.0  # a worker that keeps failing to start is retried ever more slowly, up to this


def settings_values(settings: Settings) -> dict:
    """Every setting as plain JSON values (secrets revealed: they go to our own worker process)."""
    out = {}
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, Path):
            value = str(value)
        out[name] = value
    return out


@dataclass
class _Proc:
    """One worker process and what the parent knows of it."""

    index: int
    name: str  # its Redis consumer name
    proc: ForkedWorker
    ready: asyncio.Future
    held: dict[int, TurnJob] = field(default_factory=dict)  # pipe mode: jobs sent, not yet done
    protections: dict = field(default_factory=dict)


class WorkerRunner:
    """Runner protocol over worker processes (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        module: str,
        *,
        workers: int,
        log_level: str = "WARNING",
        finish_s: float = FINISH_S,
        grace_s: float = TELL_LOST_S,
    ):
        self.settings = settings
        self.module = module  # the worker program: a module whose `main()` speaks the protocol
        self.count = max(1, workers)
        self.log_level = log_level
        self.finish_s = finish_s  # at shutdown, how long the workers let their jobs finish
        self.grace_s = grace_s  # then how long cancelled jobs get to end, and telling their threads
        self.handlers: dict[str, JobHandler] = {}  # the lost handlers run here when a worker can't
        self.redis = RedisJobs(settings.redis_url) if settings.redis_url else None
        self.journal = None if self.redis else JobJournal(settings.home / "jobs")  # for after a kill
        self.lost_after_s = settings.lock_ttl
        self._procs: list[_Proc | None] = [None] * self.count
        self._watchers = Background()  # one a worker: reads its protocol lines, restarts it
        self._tells = Background()  # threads told after the ack (a job not queued, a killed serve's)
        self._next_id = 0
        self._backlog: list[TurnJob] = []  # pipe mode: jobs waiting for a worker to (re)start
        self._failed_starts = [0] * self.count  # in a row, per worker slot: sets the restart pause
        self._stopping = False
        self._host = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def register(self, kind: str, handler: JobHandler) -> None:
        """Record the handler (a typo fails at submit); the workers register the same handlers themselves,
        and run them; this process runs only lost handlers, for jobs no worker is left to tell about."""
        self.handlers[kind] = handler

    def protections(self) -> dict[str, str]:
        """What the workers' sandbox enforces (as the first ready worker reported it)."""
        return next((dict(p.protections) for p in self._procs if p and p.protections), {})

    def pids(self) -> list[int]:
        """The process ids of the workers now running (operations, tests)."""
        return [p.proc.pid for p in self._procs if p is not None and p.proc.returncode is None]

    async def start(self) -> None:
        """Start every worker and wait until each has built its core (raises with the worker's reason)."""
        if self.redis is not None:
            await self.redis.prepare()
        for i in range(self.count):
            await self._spawn(i)
        procs = [p for p in self._procs if p is not None]
        await asyncio.wait_for(asyncio.gather(*(p.ready for p in procs)), timeout=START_S)
        for job in self.journal.orphans() if self.journal else []:  # a killed serve's: now they hear
            self._tell(tell_lost(self.handlers, job))

    async def submit(self, job: TurnJob) -> None:
        if job.kind not in self.handlers and job.kind != LOST:
            raise KeyError(f"no handler registered for job kind {job.kind!r}")
        if self.redis is not None:
            try:
                await self.redis.put(job)
            except (RedisError, OSError) as exc:  # the platform still gets its ack; the thread hears why
                down = StoreUnavailable(redis_failure(self.redis.url, exc))
                self._tell(tell_store_down(self.handlers, job, down))
            return
        live = [
            p
            for p in self._procs
            if p is not None and p.proc.returncode is None and p.ready.done() and not p.ready.exception()
        ]
        if not live:
            self._backlog.append(job)
            return
        target = min(live, key=lambda p: len(p.held))
        self._next_id += 1
        target.held[self._next_id] = job
        if self.journal:
            self.journal.write(self._next_id, job)
        assert target.proc.stdin is not None
        target.proc.stdin.write(json.dumps({"id": self._next_id, "job": job.to_dict()}).encode() + b"\n")

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until no job is queued or running (tests, benchmarks); the workers keep running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while await self._busy() and (deadline is None or time.monotonic() < deadline):
            await asyncio.sleep(0.05)

    async def _busy(self) -> bool:
        if self.redis is not None:  # an entry leaves its stream only when its job has ended
            return any([await self.redis.r.xlen(QUICK), await self.redis.r.xlen(TURNS)])
        return bool(self._backlog) or any(p.held for p in self._procs if p is not None)

    def _tell(self, telling: Coroutine[None, None, None]) -> None:
        """Tell a thread after the ack, in the background (waited for by `stop`)."""
        self._tells.start(telling)

    def stopping(self) -> None:
        """From now on a worker that ends is not restarted, nor logged as a failure: the process is
        stopping (its stop signal may end the workers' template before `stop` runs). Sets a flag only:
        it is called from a signal handler."""
        self._stopping = True

    def hurry(self) -> None:
        """A second Ctrl-C: the workers stop waiting for the jobs they hold, cancel them and tell their
        threads (`HURRY_SIGNAL`; a worker not ready yet has no jobs). Called from a signal handler."""
        for p in self._procs:
            if p is not None and p.proc.returncode is None and p.ready.done():
                with contextlib.suppress(OSError):  # gone, or its pid already someone else's
                    os.kill(p.proc.pid, HURRY_SIGNAL)

    async def stop(self) -> None:
        """Shut down: close every worker's stdin (it gives what it holds `finish_s` to end, then tells the
        threads of the rest), wait, then kill what remains. Never silence: the jobs a killed worker still
        held, and jobs no worker took, are told here that their answer stopped (with Redis, jobs nobody
        took stay in the stream for the other replicas' workers)."""
        self._stopping = True
        procs = [p for p in self._procs if p is not None]
        for p in procs:
            if p.proc.stdin is not None:
                with contextlib.suppress(Exception):
                    p.proc.stdin.close()
        waits = [asyncio.create_task(p.proc.wait()) for p in procs]
        if waits:
            await asyncio.wait(waits, timeout=self.finish_s + 2 * self.grace_s)
        killed = [p for p in procs if p.proc.returncode is None]
        for p in killed:
            with contextlib.suppress(ProcessLookupError):
                p.proc.kill()
            await p.proc.wait()
        await self._watchers.wait(TELL_LOST_S)  # each reads its worker's last `done` lines to the pipe's end
        self._watchers.cancel()
        await self._tell_unfinished(procs, killed)
        await self._tells.wait(TELL_LOST_S)
        if self.redis is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.redis.close(), TELL_LOST_S)
        if self.journal:  # every job it held has finished or been told
            self.journal.clear()

    async def _tell_unfinished(self, procs: list[_Proc], killed: list[_Proc]) -> None:
        if self.redis is None:
            left = [job for p in procs for job in p.held.values()] + self._backlog
            self._backlog = []
        else:
            left = []
            try:  # bounded as a whole: a Redis that stopped answering held the stop for ever (a second
                async with asyncio.timeout(TELL_LOST_S):  # Ctrl-C included); each call here may wait
                    for p in killed:  # its socket timeout, with retries, once per killed worker
                        with contextlib.suppress(Exception):  # Redis gone: another replica's sweep finds them
                            for taken in await self.redis.take_over(p.name, f"{self._host}-supervisor"):
                                if await self.redis.settle(taken) is Settled.LOST and taken.job is not None:
                                    left.append(taken.job)
            except TimeoutError:
                log.warning(
                    "Redis did not answer while stopping: the jobs the stopped workers held are left in its "
                    "stream for another replica's workers"
                )
        if left:
            log.warning("stopping with %d job(s) no worker finished; telling their threads", len(left))
            tells = [asyncio.create_task(tell_lost(self.handlers, job)) for job in left]
            await asyncio.wait(tells, timeout=TELL_LOST_S)

    # --- processes ---------------------------------------------------------------------------------
    async def _spawn(self, index: int) -> None:
        name = f"{self._host}-w{index}-{uuid.uuid4().hex[:4]}"
        # Its own process group (set by the child), so the terminal's Ctrl-C reaches the web process
        # only — but not its own session: on Linux with autogroups every session is a scheduling
        # group at nice 0 and a nice value only ranks processes inside their session, so a worker in
        # a session of its own competed with the web process at full weight whatever its nice
        # (bot/turn_worker.py).
        proc = await start_worker(self.module, limit=2**20)
        first = {
            "settings": settings_values(self.settings),
            "consumer": name,
            "redis": self.redis is not None,
            "lost_after_s": self.lost_after_s,
            "finish_s": self.finish_s,
            "grace_s": self.grace_s,
            "log_level": self.log_level,
        }
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(first).encode() + b"\n")
        worker = _Proc(index=index, name=name, proc=proc, ready=asyncio.get_running_loop().create_future())
        self._procs[index] = worker
        self._watchers.start(self._watch(worker), name=f"worker-{index}")

    async def _watch(self, worker: _Proc) -> None:
        """Read the worker's protocol lines until it exits; then account for what it held and restart it."""
        assert worker.proc.stdout is not None
        while line := await worker.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if "ready" in msg and not worker.ready.done():
                    self._failed_starts[worker.index] = 0
                    worker.protections = msg.get("protections") or {}
                    worker.ready.set_result(True)
                    await self._flush_backlog()
                elif "done" in msg:
                    worker.held.pop(msg["done"], None)
                    if self.journal:
                        self.journal.done(msg["done"])
        code = await worker.proc.wait()
        if not worker.ready.done():
            self._failed_starts[worker.index] += 1
            worker.ready.set_exception(RuntimeError(f"A turn worker could not start (exit code {code})."))
            worker.ready.exception()  # retrieved: a failure at start is raised by start() instead
            if self._stopping or self._procs[worker.index] is not worker:
                return
        if self._stopping:  # what it held is told by `stop`
            if code:
                log.info("turn worker %s ended (exit code %s) while stopping", worker.index, code)
            return
        log.error("turn worker %s ended (exit code %s); restarting it", worker.index, code)
        await self._account_for(worker)
        fails = self._failed_starts[worker.index]
        await asyncio.sleep(min(RESTART_PAUSE_S * 2**fails, MAX_RESTART_PAUSE_S))
        if not self._stopping:
            await self._spawn(worker.index)

    async def _account_for(self, worker: _Proc) -> None:
        """The jobs a dead worker held: their threads hear from this process, at once, that the answer
        stopped (no wait for a worker to restart). With Redis, each entry is settled first, so a sweep
        finding it at the same time does not report it again, and one it never started is queued again."""
        held: list[int] = []  # pipe mode: the ids its journal holds
        if self.redis is not None:
            jobs = []
            try:
                for taken in await self.redis.take_over(worker.name, f"{self._host}-supervisor"):
                    if await self.redis.settle(taken) is Settled.LOST and taken.job is not None:
                        jobs.append(taken.job)
            except Exception as exc:  # the sweep of another worker finds them after lost_after_s
                log.warning("could not take over the jobs of worker %s: %s", worker.index, exc)
        else:
            jobs, held, worker.held = list(worker.held.values()), list(worker.held), {}
        if jobs:
            await asyncio.wait(
                [asyncio.create_task(tell_lost(self.handlers, j)) for j in jobs], timeout=TELL_LOST_S
            )
        for job_id in held:
            if self.journal:
                self.journal.done(job_id)

    async def _flush_backlog(self) -> None:
        backlog, self._backlog = self._backlog, []
        for job in backlog:
            await self.submit(job)
