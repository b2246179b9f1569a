"""Running one occurrence of a schedule: an ordinary turn posted by a surface, with the rules around it.

A run that fails posts a short failure and is retried once; a run whose retry fails too counts as one
failure, and three in a row pause the schedule and tell its owner. A channel that is gone (deleted,
archived, the bot removed) pauses the schedule at once: nothing could be posted there anyway.
The surface (`bot/schedule_slack.py`, `bot/schedule_teams.py`) only knows how to post; this module
decides what happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from core.events import EventSink, TurnEvent, TurnFailed
from core.runner import TurnStopped
from core.schedules import Schedule, UnknownSchedule, iso
from core.schedules_store import ScheduleBook
from core.schedules_tick import DueRun
from core.wording import causes, os_words

log = logging.getLogger("datathread.schedules")

MAX_FAILURES = 3
# A run whose process ended before it did (killed, a worker that died) or that a shutdown stopped.
STOPPED_WHY = "it stopped before finishing (the process running it ended)"


@dataclass(frozen=True)
class RunResult:
    """What one attempt did: `gone` = the channel or conversation no longer takes the bot's posts;
    `lasting` = a failure no retry can change (the owner may not use datathread here); `paused` = the
    schedule was paused because of it (`run-now` says so)."""

    ok: bool
    error: str = ""
    gone: bool = False
    turn_id: str = ""
    lasting: bool = False
    paused: bool = False
    retry: bool = True  # False: the turn stopped at its own limits, and a retry would only spend again
    limited: bool = False  # refused by its owner's daily budget or hourly limit: skipped, not counted
    thread: str = ""  # where the run answered (Slack: its header's ts; Teams: its conversation id)


class SchedulePoster(Protocol):
    """A surface's side of a scheduled run."""

    async def run(self, schedule: Schedule, *, turn_id: str, note: str, thread: str = "") -> RunResult:
        """Post the run's header (a new thread, or into the schedule's thread) and run the turn there;
        with `thread` (a retry: the first attempt's `RunResult.thread`), no new header: run it there."""

    async def post_notice(self, schedule: Schedule, text: str, *, thread: str = "") -> None:
        """A short line in `thread` (the run's: failures, retries), else the schedule's thread, else the
        channel's top level (a pause)."""

    async def tell_owner(self, schedule: Schedule, text: str) -> None:
        """Reach the schedule's owner directly (the schedule was paused)."""

    def resume_hint(self, schedule: Schedule) -> str:
        """How its owner resumes a paused schedule, as a sentence they can act on."""

    def places_owner(self, schedule: Schedule) -> bool:
        """Whether `run` asks the platform who the owner is before it posts anything, and refuses one
        the access settings refuse (core/schedules_owner.py): the check before the run is then its."""

    async def tell_stopped(self, schedule: Schedule, turn_ids: tuple[str, ...], text: str) -> None:
        """A run whose process ended: `text` where it was answering — the latest of `turn_ids` that
        left anything (closing its answer's stream), else the schedule's channel."""


def attempt_ids(schedule_id: str, occurrence: str) -> tuple[str, str]:
    """The turn ids of an occurrence's run and of its retry (its turn records start `s<ID>-`)."""
    base = f"s{schedule_id}-{int(_epoch(occurrence))}"
    return base, f"{base}-retry"


def turn_question(schedule: Schedule) -> str:
    """What the model is asked: the question, plus the verified SQL it came from when there is one."""
    if not schedule.sql:
        return schedule.question
    return (
        f"{schedule.question}\n\n(This is a scheduled report. The answer it was created from used this "
        f"verified SQL; reuse it unless the question needs otherwise:\n```sql\n{schedule.sql}\n```)"
    )


def run_header(schedule: Schedule, *, skipped: int = 0) -> str:
    """The first line of a run: what it is, and what was missed while nobody ran the scheduler."""
    text = f"Scheduled report ({schedule.cron}, {schedule.tz}): {schedule.question}"
    if skipped:
        text += (
            f"\n({skipped} earlier run{'s were' if skipped != 1 else ' was'} skipped while I was offline.)"
        )
    return text


async def run_occurrence(
    book: ScheduleBook, poster: SchedulePoster, due: DueRun, *, manual: bool = False
) -> RunResult | None:
    """Run one claimed occurrence with one retry; count failures, pause when it must. None if the
    schedule was removed, or paused after the claim. `manual` is an operator's `run-now`: it runs a
    paused schedule too, and its outcome is recorded but not counted — a test run must not bring a
    schedule closer to its automatic pause (nor clear the count the scheduled runs built).

    The owner's access is checked before anything is posted: a refused run posted its header, then a
    refusal addressed to "you", then retried both; it pauses the schedule now."""
    try:
        schedule = await book.get(due.schedule_id)
    except UnknownSchedule:
        return None
    if schedule.paused and not manual:
        return None
    base, again = attempt_ids(schedule.id, due.occurrence)
    note = run_header(schedule, skipped=due.skipped)
    # Where, never what: the question stays out of INFO lines, as a turn's own log lines keep it out.
    where = f"{schedule.surface} channel {schedule.channel}"
    where += f" thread {schedule.thread}" if schedule.thread else ""
    log.info("schedule %s: run %s started in %s%s", schedule.id, base, where, " (run-now)" if manual else "")
    # The surface that looks the owner up decides: it knows their organization, which a schedule made in
    # the terminal, or before it was recorded, lacks (DATATHREAD_ALLOWED_TEAMS may list it alone: every
    # run of such a Slack schedule was refused here, before Slack was asked).
    if not poster.places_owner(schedule) and book.owner_refused(schedule):
        owner = f"its owner ({schedule.owner})" if schedule.owner else "a schedule without an owner"
        why = f"datathread's access settings do not let {owner} ask in this channel"
        result = RunResult(ok=False, error=why, turn_id=base, lasting=True)
        return await _settle(book, poster, schedule, result, manual=manual)
    try:
        result = await _attempt(poster, schedule, turn_id=base, note=note)
        retried = not result.ok and not result.gone and result.retry
        # Paused or removed while the first attempt ran: no retry (a removed one's answer still ran).
        retried = retried and await _still_on(book, schedule.id, manual=manual)
        if retried:  # in the run's thread: a new thread per run flooded the channel's top level
            said = f"This scheduled run failed: {reason_words(result.error)}. Retrying once."
            await _notice(poster, schedule, said, thread=result.thread)
            first = result
            result = await _attempt(poster, schedule, turn_id=again, note=note, thread=first.thread)
            result = replace(result, thread=result.thread or first.thread)
    except asyncio.CancelledError as stop:  # a shutdown: recorded, and said unless the turn said it
        await run_stopped(book, poster, schedule, due, told=isinstance(stop, TurnStopped), manual=manual)
        raise TurnStopped from None  # its thread was told: the runner must not tell it again
    return await _settle(book, poster, schedule, result, manual=manual, retried=retried)


async def run_stopped(
    book: ScheduleBook,
    poster: SchedulePoster,
    schedule: Schedule,
    due: DueRun,
    *,
    error_id: str = "",
    told: bool = False,
    manual: bool = False,
) -> None:
    """A run that stopped before finishing — its process killed, its worker dead (the runner's lost
    handler), or cancelled by a shutdown: said where it was answering (its open stream closed with
    it) unless its turn said so itself, and recorded as failed. Not counted towards the pause: the
    process failed, not the schedule; the next occurrence runs as usual."""
    turn_ids = attempt_ids(schedule.id, due.occurrence)
    if not told:
        then = "" if manual else " I'll try again at the next scheduled time."
        said = f"This scheduled run stopped before finishing (the process running it ended).{then}"
        said += f" (error id `{error_id}`)" if error_id else ""
        try:
            await poster.tell_stopped(schedule, turn_ids[::-1], said)
        except Exception as exc:  # the record below keeps the truth
            log.warning("schedule %s: could not say that its run stopped: %s", schedule.id, exc)
    run = f"schedule {schedule.id}: run {turn_ids[0]}"
    log.warning("%s failed: %s%s", run, STOPPED_WHY, f" error_id={error_id}" if error_id else "")
    kind = "run-now" if manual else "run"
    await book.audit(
        "failed", schedule, by="datathread", note=f"{kind} {turn_ids[0]}: {STOPPED_WHY}", ok=False
    )
    with contextlib.suppress(UnknownSchedule):  # removed meanwhile: the audit record above remains
        await book.update(schedule.id, last_run=iso(book.now()), last_outcome=f"failed: {STOPPED_WHY}")


async def _still_on(book: ScheduleBook, schedule_id: str, *, manual: bool) -> bool:
    """Whether the schedule is still there and running (a `run-now` runs a paused one too)."""
    try:
        return manual or not (await book.get(schedule_id)).paused
    except UnknownSchedule:
        return False


async def _recorded(book: ScheduleBook, schedule_id: str, **fields: object) -> Schedule | None:
    """The run's outcome on the schedule's record; None when it was removed while the run ran (its
    audit record, written first, is what remains: the run was lost with the record)."""
    try:
        return await book.update(schedule_id, **fields)
    except UnknownSchedule:
        log.info("schedule %s: removed while its run ran; the audit trail keeps the run", schedule_id)
        return None


async def _attempt(
    poster: SchedulePoster, schedule: Schedule, *, turn_id: str, note: str, thread: str = ""
) -> RunResult:
    try:
        return await poster.run(schedule, turn_id=turn_id, note=note, thread=thread)
    except Exception as exc:  # a surface bug must count as a failed run, not kill the scheduler
        log.exception("schedule %s: run %s crashed", schedule.id, turn_id)
        why = failure_words(exc, surface=schedule.surface)
        return RunResult(ok=False, error=why, turn_id=turn_id, thread=thread)


# Retry advice at the end of a reason ("… Please try again shortly."): the run's own sentence says
# what happens next, and "please try again" next to "I'll try again next time" told two things.
_ADVICE = re.compile(r"(?:(?<=[.!?])\s+|\s*;\s*)(?:please\s+)?(?:try|ask)\s+again\b[^.!?]*[.!?]?$", re.I)


def reason_words(error: str) -> str:
    """A run's failure reason as a clause to put after a colon: one line, no retry advice and no
    closing full stop — the reason is often a sentence of its own ("I could not reach the Claude API
    (connection refused). Please try again shortly."), and in brackets it read "(… shortly.)."."""
    text = _ADVICE.sub("", " ".join(error.split()))
    return text.rstrip(" .") or "no reason was given"


# A refusal says "you" to the asker; in a scheduled run nobody asked, and the channel read it as itself.
_YOU = (
    (re.compile(r"\byou've used your\b", re.I), "the schedule's owner has used their"),
    (re.compile(r"\byou've\b", re.I), "the schedule's owner has"),
    (re.compile(r"\byour\b", re.I), "their"),
)


def owners_limit(refusal: str) -> str:
    """Why a run was refused by its owner's limits, as a clause: the owner's limit, not "you"."""
    said = reason_words(refusal)
    for you, owner in _YOU:
        said = you.sub(owner, said)
    return said


def skipped_words(refusal: str) -> str:
    """The channel's one line for a run its owner's limits refused."""
    return f"Skipped this run: {owners_limit(refusal)}. I'll try again at the next scheduled time."


def in_owners_name(sink: EventSink) -> EventSink:
    """The run's sink, with a refusal by a limit that lifts (it carries `retry_after_s`: the hourly
    questions, the daily budget) said as the schedule owner's, once, instead of to "you"."""

    async def said(event: TurnEvent) -> None:
        if isinstance(event, TurnFailed) and event.retry_after_s is not None:
            event = replace(event, message=skipped_words(event.message), retry_after_s=None)
        await sink(event)

    return said


def failure_words(exc: BaseException, *, surface: str) -> str:
    """Why a run crashed, in words for the channel notice and `run-now` ("ClientConnectorError" told
    nobody that Slack was unreachable); the traceback stays in the log."""
    place = {"slack": "Slack", "teams": "Teams"}.get(surface, surface)
    for cause in causes(exc):
        host = getattr(cause, "host", None)  # aiohttp's connection errors (the Slack and Teams SDKs)
        at = f" at {host}" if isinstance(host, str) and host else ""
        if isinstance(cause, TimeoutError):
            return f"{place}{at} did not answer in time"
        if why := os_words(cause):
            return f"could not reach {place}{at}: {why}"
    return f"an unexpected error ({type(exc).__name__}; the log has the details)"


async def _settle(
    book: ScheduleBook,
    poster: SchedulePoster,
    schedule: Schedule,
    result: RunResult,
    *,
    manual: bool,
    retried: bool = True,
) -> RunResult:
    stamp = iso(book.now())
    run = f"schedule {schedule.id}: run {result.turn_id}"
    # Each run in the schedule's own record (`audit --session schedule:ID`): a run that failed before
    # its turn ran (Slack unreachable, the channel gone) was in the log file only.
    kind = "run-now" if manual else "run"
    if result.ok:
        log.info("%s ok", run)
        counted = {} if manual else {"failures": 0}
        await book.audit("ran", schedule, by="datathread", note=f"{kind} {result.turn_id}")
        await _recorded(
            book, schedule.id, runs=schedule.runs + 1, last_run=stamp, last_outcome="ok", **counted
        )
        return result
    why = reason_words(result.error)
    if result.limited:  # the owner's limits: said in the run's thread (`in_owners_name`), not counted
        why = owners_limit(result.error)
        log.info("%s skipped: %s", run, why)
        await book.audit("skipped", schedule, by="datathread", note=f"{kind} {result.turn_id}: {why}")
        await _recorded(book, schedule.id, last_run=stamp, last_outcome=f"skipped: {why}")
        return result
    await book.audit("failed", schedule, by="datathread", note=f"{kind} {result.turn_id}: {why}", ok=False)
    if result.gone or result.lasting:  # no later run can do better: paused now, run-now included
        reason = f"the channel is gone or I was removed from it ({why})" if result.gone else why
        log.warning("%s failed: %s; paused", run, reason)
        updated = await _recorded(book, schedule.id, last_run=stamp, last_outcome=f"failed: {why}")
        if updated is None:
            return result
        if updated.paused:  # a run-now of a paused schedule: paused already, its owner told then
            return replace(result, paused=True)
        paused = await book.pause(schedule.id, reason=reason, by="datathread")
        if result.lasting:  # the channel is there to be told, once
            await _notice(poster, paused, f"I paused this schedule: {reason}.")
        await _tell(poster, paused, f"I paused your schedule {paused.describe()}: {reason}.")
        return replace(result, paused=True)
    failures = schedule.failures + (0 if manual else 1)
    counted = "run-now, not counted" if manual else f"failure {failures} of {MAX_FAILURES} before a pause"
    paused_too = "" if manual or failures < MAX_FAILURES else "; paused"
    log.warning("%s failed: %s; %s%s", run, why, counted, paused_too)
    updated = await _recorded(
        book, schedule.id, failures=failures, last_run=stamp, last_outcome=f"failed: {why}"
    )
    if updated is None:  # removed meanwhile: no next time to promise, nothing to pause
        return result
    if manual or failures < MAX_FAILURES or updated.paused:  # paused meanwhile: nothing to promise
        then = "" if manual or updated.paused else " I'll try again at the next scheduled time."
        said = f"The retry failed too: {why}." if retried else f"This scheduled run failed: {why}."
        await _notice(poster, updated, f"{said}{then}", thread=result.thread)
        return result
    reason = f"{failures} runs in a row failed; the last one: {why}"
    paused = await book.pause(schedule.id, reason=reason, by="datathread")
    text = f"I paused your schedule {paused.describe()} because {reason}. {poster.resume_hint(paused)}"
    await _notice(poster, paused, f"I paused this schedule: {reason}.")
    await _tell(poster, paused, text)
    return replace(result, paused=True)


async def _notice(poster: SchedulePoster, schedule: Schedule, text: str, *, thread: str = "") -> None:
    try:
        await poster.post_notice(schedule, text, thread=thread)
    except Exception as exc:  # the notice is a courtesy; the record keeps the truth
        log.warning("schedule %s: could not post a notice: %s", schedule.id, exc)


async def _tell(poster: SchedulePoster, schedule: Schedule, text: str) -> None:
    try:
        await poster.tell_owner(schedule, text)
    except Exception as exc:
        log.warning("schedule %s: could not tell the owner: %s", schedule.id, exc)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()
