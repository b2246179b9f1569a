"""Ack first, work after: surfaces hand a turn to a runner and return their HTTP response at once.

A `TurnJob` is plain data (it crosses to a Modal function as-is). Handlers are registered per job
kind by the surfaces; `LocalRunner` runs them as asyncio tasks in this process, and the Modal runner
(`deploy/modal_app.py`) `.spawn()`s a function that calls the very same handler remotely.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from core.store_base import StoreUnavailable

log = logging.getLogger(__name__)


class TurnStopped(asyncio.CancelledError):
    """Raised by a turn that was cancelled (Ctrl-C, a shutdown) once it has saved its history and told
    its thread that it stopped (`Analyst.handle`: the `TurnFailed` event its surface draws). Still a
    cancellation to whatever awaits the turn; a runner's shutdown (`cancel_and_tell`) then leaves that
    thread alone instead of telling it a second time, in other words."""


@dataclass(frozen=True)
class TurnJob:
    """Work to do after the ack: `kind` names the handler ("slack.turn", "teams.turn", …)."""

    kind: str
    payload: dict = field(default_factory=dict)
    # Quick jobs (button clicks, confirmations, home tabs) skip the queue of turns: a turn waiting for a
    # Run/Cancel click must never wait behind the very click that would release it.
    quick: bool = False

    def to_dict(self) -> dict:
        # Not dataclasses.asdict: it deep-copies the payload, and this runs inside every ack.
        return {"kind": self.kind, "payload": dict(self.payload), "quick": self.quick}


JobHandler = Callable[[TurnJob], Awaitable[None]]

LOST = "runner.lost"  # a job whose process ended before it did: its surface says the answer stopped
LOST_SUFFIX = ".lost"
TELL_LOST_S = 10.0  # how long telling one thread that its answer stopped may take at shutdown
WHY = "why"  # the lost handler's payload key saying why the job did not finish (absent: its process ended)
ERROR_ID = "error_id"  # the lost handler's payload key: the id of the log line saying where it stopped
STORE_DOWN = "store"  # …because the session store (or Redis under the job queue) was unreachable
STORE_DOWN_TEXT = (
    "I can't answer right now: my session store is unreachable. Please ask again in a few minutes."
)


def lost_kind(kind: str) -> str:
    """The job kind whose handler tells the user that a job of `kind` stopped with its process."""
    return kind + LOST_SUFFIX


def lost_job(job: TurnJob) -> TurnJob:
    """The job that replaces one whose process ended (quick: it only posts a sentence)."""
    return TurnJob(kind=LOST, payload={"job": job.to_dict()}, quick=True)


async def tell_lost(handlers: dict[str, JobHandler], job: TurnJob, *, why: str = "") -> None:
    """Run the lost handler of `job` (a lost job, or the job itself): its thread hears that the answer
    stopped — or, with `why=STORE_DOWN`, that it could not start because the session store is
    unreachable. Never raises; a kind without a lost handler (a click, a home tab) is only logged."""
    original = (job.payload.get("job") or {}) if job.kind == LOST else job.to_dict()
    kind = str(original.get("kind", ""))
    handler = handlers.get(lost_kind(kind))
    payload = {**(original.get("payload") or {}), **({WHY: why} if why else {})}
    if not why:  # the process ended: an id the thread shows and this line carries, and where it was
        payload[ERROR_ID] = uuid.uuid4().hex[:8]
        told = "telling its thread" if handler else "no one to tell"
        log.warning(
            "a %s job stopped with its process (%s) error_id=%s; %s",
            kind,
            job_where(payload),
            payload[ERROR_ID],
            told,
        )
    if handler is None:
        return
    try:
        await handler(TurnJob(kind=lost_kind(kind), payload=payload, quick=True))
    except StoreUnavailable as exc:  # the store is down: its sentence, not a traceback
        log.warning("could not tell a %s job's thread that it stopped: %s", kind, exc)
    except Exception:
        log.exception("could not tell a %s job's thread that it stopped", kind)


def job_where(payload: dict) -> str:
    """Where a job's answer was going, for a log line: a Slack job's team, channel, thread and person,
    a Teams activity's conversation and sender, a scheduled run's schedule and occurrence (a lost
    turn's line named nothing to look for)."""
    activity = payload.get("activity") if isinstance(payload.get("activity"), dict) else None
    if activity is not None:
        sender = activity.get("from") or {}
        parts = {
            "conversation": (activity.get("conversation") or {}).get("id"),
            "user": sender.get("aadObjectId") or sender.get("id"),
        }
    else:
        keys = ("team", "channel", "thread_ts", "user", "schedule_id", "occurrence")
        parts = {k: payload.get(k) for k in keys}
    return " ".join(f"{k}={v}" for k, v in parts.items() if v) or "no thread"


async def tell_store_down(handlers: dict[str, JobHandler], job: TurnJob, exc: Exception) -> None:
    """A job could not be queued or run because the session store is unreachable: one log line (the
    store's sentence, no traceback) and, for a job that has a thread, a short reply there saying so."""
    log.warning("a %s job could not run: %s", job.kind, exc)
    await tell_lost(handlers, job, why=STORE_DOWN)


async def cancel_and_tell(
    tasks: dict[asyncio.Task, TurnJob], handlers: dict[str, JobHandler], *, grace_s: float = TELL_LOST_S
) -> None:
    """Shutdown: the jobs still running are cancelled, and each thread hears that its answer stopped
    (never silence) — once: a turn that said so itself as it stopped (its task returned True, see
    `TurnStopped`) is not told again. Bounded: cancelled jobs get `grace_s` to end and telling takes at
    most as long, so neither a job ignoring its cancellation nor a platform that does not answer holds
    the shutdown."""
    running = {task: job for task, job in tasks.items() if not task.done()}
    for task in running:
        task.cancel()
    if running:
        await asyncio.wait(set(running), timeout=grace_s)
    jobs = [job for task, job in running.items() if not _told_its_thread(task)]
    if jobs:
        log.warning("stopping with %d job(s) unfinished; telling their threads", len(jobs))
        await asyncio.wait([asyncio.create_task(tell_lost(handlers, j)) for j in jobs], timeout=grace_s)


async def let_finish(
    tasks: dict[asyncio.Task, TurnJob],
    timeout: float,
    hurried: asyncio.Event,
    *,
    say: Callable[[str], None] | None = None,
) -> None:
    """Stopping: give the jobs running now — and any that start meanwhile (a scheduled run) — up to
    `timeout` seconds to end, or until `hurried` is set (a second Ctrl-C), saying once what it waits
    for: the first Ctrl-C with an answer still being written was followed by up to 30 s of silence,
    and a second Ctrl-C did not shorten them. `say` is where that goes (default: a log warning, which
    `serve` shows; `slack --socket` shows its terminal only its own lines)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    said = False
    while not hurried.is_set() and (left := deadline - loop.time()) > 0:
        running = {task for task in tasks if not task.done()}
        if not running:
            return
        turns = sum(not tasks[task].quick for task in running if task in tasks)
        if turns and not said:
            said = True
            (say or log.warning)(
                f"stopping: waiting up to {timeout:g} s for {turns} answer(s) still running; "
                "Ctrl-C again stops them now (their threads are told)"
            )
        cut = asyncio.ensure_future(hurried.wait())
        try:
            await asyncio.wait({*running, cut}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut.cancel()


def _told_its_thread(task: asyncio.Task) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None and task.result() is True


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
        self.tasks: dict[asyncio.Task, TurnJob] = {}  # running jobs (a dict: shutdown tells their threads)
        self._hurried = False  # a second Ctrl-C: `stop` does not wait for running jobs
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None  # `stop`'s, while it waits
        # Backpressure: beyond this many jobs at once, the rest wait their turn instead of competing for
        # the CPU with the event loop that must keep acking within the platforms' deadlines.
        self._slots = asyncio.Semaphore(max_concurrent)

    def register(self, kind: str, handler: JobHandler) -> None:
        self.handlers[kind] = handler

    async def submit(self, job: TurnJob) -> None:
        handler = self.handlers[job.kind]
        task = asyncio.create_task(self._run_in_slot(handler, job), name=f"job:{job.kind}")
        self.tasks[task] = job
        task.add_done_callback(lambda t: self.tasks.pop(t, None))

    async def run_now(self, job: TurnJob) -> bool:
        """Run a job in the current task (used by the remote side of other runners); True when its turn
        was stopped and told its thread so (see `_run`)."""
        return await self._run(self.handlers[job.kind], job)

    async def _run_in_slot(self, handler: JobHandler, job: TurnJob) -> bool:
        if job.quick:
            return await self._run(handler, job)
        async with self._slots:
            return await self._run(handler, job)

    async def _run(self, handler: JobHandler, job: TurnJob) -> bool:
        """Run the handler. A turn stopped by a cancellation that has told its thread ends the job
        (True: nobody needs to tell that thread again); any other cancellation goes on up. A store that
        is unreachable before the turn starts (de-dup, time zone) is no bug: its thread hears so."""
        try:
            await handler(job)
        except TurnStopped:
            return True
        except StoreUnavailable as exc:
            await tell_store_down(self.handlers, job, exc)
        except Exception:
            log.exception("job %s failed", job.kind)
        return False

    async def stop(self, timeout: float, *, say: Callable[[str], None] | None = None) -> None:
        """Shutdown: let jobs finish for `timeout` seconds (or until `hurry`); the rest are cancelled and
        their threads told. `say`: where the line saying what it waits for goes (see `let_finish`)."""
        hurried = asyncio.Event()
        self._wake = (asyncio.get_running_loop(), hurried)
        if self._hurried:  # before `stop`, or between the check in `hurry` and the line above
            hurried.set()
        try:
            await let_finish(self.tasks, timeout, hurried, say=say)
        finally:
            self._wake = None
        await cancel_and_tell(dict(self.tasks), self.handlers)

    def hurry(self) -> None:
        """A second Ctrl-C: `stop` stops waiting for running jobs. Called from a signal handler, so it
        only sets a flag and wakes the loop."""
        self._hurried = True
        if (wake := self._wake) is not None:
            loop, hurried = wake
            loop.call_soon_threadsafe(hurried.set)

    async def drain(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while self.tasks:
            remaining = None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            done, _ = await asyncio.wait(set(self.tasks), timeout=remaining)
            if remaining == 0.0 or (not done and deadline is not None):
                break
