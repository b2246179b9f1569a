"""The scheduler's tick: which occurrences are due now, claimed exactly once across replicas.

Every replica (a `datathread serve` process, `slack --socket`, or Modal's once-a-minute function)
calls `claim_due` with the same clock. An occurrence is claimed with `set_once` in the shared store,
like event de-dup, so exactly one replica runs it. After downtime there is no pile-up: only the latest
missed occurrence may run, and only while it is at most `grace` late; the others are skipped, counted
on the schedule and noted in the audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from core.outage import Outage
from core.runner import TurnJob
from core.schedules import Schedule, iso, occurrences, too_often
from core.schedules_store import ScheduleBook
from core.store_base import StoreUnavailable

log = logging.getLogger("datathread.schedules")

JOB_SCHEDULE_RUN = "schedule.run"
CLAIM_TTL_S = 8 * 86400  # longer than any gap a claim must outlive between two ticks
SCAN_LIMIT = 10_000  # occurrences looked at per schedule per tick (an every-minute job after a week off)
TICK_S = 30.0


@dataclass(frozen=True)
class DueRun:
    """One claimed occurrence to run: plain data, so it travels as a job payload to any worker."""

    schedule_id: str
    occurrence: str  # ISO 8601 with offset
    skipped: int = 0  # occurrences missed just before it, to mention in the post

    def to_job(self) -> TurnJob:
        return TurnJob(kind=JOB_SCHEDULE_RUN, payload=asdict(self))

    @classmethod
    def from_payload(cls, payload: dict) -> DueRun:
        return cls(**{k: payload[k] for k in ("schedule_id", "occurrence", "skipped") if k in payload})


async def claim_due(
    book: ScheduleBook,
    *,
    grace: timedelta,
    replica: str = "",
    now: datetime | None = None,
    surfaces: Collection[str] | None = None,
    unpostable: Callable[[Schedule], None] = lambda schedule: None,
) -> list[DueRun]:
    """Claim every occurrence due by `now`; returns the ones this replica won and should run. With
    `surfaces`, only schedules posting there: the others are left (not claimed, not counted) to a
    replica that can post them, and each is handed to `unpostable` to be told of."""
    now = now or book.now()
    replica = replica or uuid.uuid4().hex[:8]
    won: list[DueRun] = []
    for schedule in await book.list():
        if schedule.paused:
            continue
        if problem := too_often(schedule.cron):  # made before the limit: paused, not run
            log.warning("schedule %s: paused: %s", schedule.id, problem)
            await book.pause(schedule.id, reason=problem, by="datathread")
            continue
        if surfaces is not None and schedule.surface not in surfaces:
            unpostable(schedule)
            continue
        due = await _claim_one(book, schedule, now=now, grace=grace, replica=replica)
        if due is not None:
            won.append(due)
    return won


LATE_GRACE_CAP = timedelta(hours=2)


def late_grace(schedule: Schedule, occurrence: datetime, grace: timedelta) -> timedelta:
    """How late `occurrence` may still run: the setting, or half the gap to the schedule's next
    occurrence when that is longer, up to two hours. A fixed 10 minutes skipped a weekly report for a
    week when the bot was down for 11 minutes at its hour; an hourly one still keeps to its hour."""
    following = next(
        occurrences(schedule.cron, schedule.tz, occurrence, occurrence + timedelta(days=400)), None
    )
    if following is None:
        return grace
    return max(grace, min((following - occurrence) / 2, LATE_GRACE_CAP))


async def _claim_one(
    book: ScheduleBook, schedule: Schedule, *, now: datetime, grace: timedelta, replica: str
) -> DueRun | None:
    missed = list(occurrences(schedule.cron, schedule.tz, schedule.cursor_time(), now, limit=SCAN_LIMIT))
    if not missed:
        return None
    latest = missed[-1]
    runnable = now - latest <= late_grace(schedule, latest, grace)
    skipped = len(missed) - (1 if runnable else 0)
    claim = f"schedule:{schedule.id}:{int(latest.timestamp())}"
    if not await book.store.set_once(claim, replica, ttl_s=CLAIM_TTL_S):
        return None  # another replica has it
    await book.update(schedule.id, cursor=iso(latest), skipped=schedule.skipped + skipped)
    if skipped:
        note = f"skipped {skipped} occurrence(s) up to {iso(missed[-1 if not runnable else -2])}"
        log.info("schedule %s: %s (no scheduler was running then)", schedule.id, note)
        await book.audit("skipped", schedule, note=note)
    return DueRun(schedule.id, iso(latest), skipped) if runnable else None


async def tick(
    book: ScheduleBook,
    submit: Callable[[TurnJob], Awaitable[None]],
    *,
    grace: timedelta,
    replica: str = "",
    now: datetime | None = None,
    surfaces: Collection[str] | None = None,
    unpostable: Callable[[Schedule], None] = lambda schedule: None,
) -> list[DueRun]:
    """Claim what is due and hand each run to the runner (locally a task, on Modal a spawned function)."""
    won = await claim_due(
        book, grace=grace, replica=replica, now=now, surfaces=surfaces, unpostable=unpostable
    )
    for due in won:
        await submit(due.to_job())
    return won


async def run_scheduler(
    book: ScheduleBook,
    submit: Callable[[TurnJob], Awaitable[None]],
    *,
    grace: timedelta,
    stop: asyncio.Event,
    interval_s: float = TICK_S,
    surfaces: Collection[str] | None = None,
    needs: Mapping[str, str] | None = None,
) -> None:
    """Tick until `stop` is set (the loop inside `datathread serve` and `slack --socket`). Schedules
    of a surface not in `surfaces` are left to another replica, said once per schedule with what this
    process would need (`needs`: surface -> settings)."""
    replica = uuid.uuid4().hex[:8]
    told: set[str] = set()

    def unpostable(schedule: Schedule) -> None:
        if schedule.id not in told:
            told.add(schedule.id)
            log.warning(
                "schedule %s posts to %s, which is not configured in this process (%s): its runs are "
                "left to a replica that has it",
                schedule.id,
                schedule.surface,
                (needs or {}).get(schedule.surface, "its settings"),
            )

    # A store outage is one line when it starts and one when it ends, not a line every tick.
    outage = Outage(log, "The session store (schedules)", first_s=interval_s, max_s=interval_s)
    while not stop.is_set():
        try:
            await tick(book, submit, grace=grace, replica=replica, surfaces=surfaces, unpostable=unpostable)
            outage.recovered()
        except StoreUnavailable as exc:
            outage.failed(str(exc))
        except Exception:  # a store blip must not end the loop; the next tick tries again
            log.exception("schedule tick failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
