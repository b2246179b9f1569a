"""Scheduled runs wired into a serving process: the `schedule.run` job kind on the state's runner, the
scheduler loop inside `datathread serve` and `slack --socket`, and `schedule run-now` from the terminal.

The loop only claims due occurrences and submits jobs; the job runs through the same runner as any
turn (a task here, a spawned function on Modal), so scheduled turns get the same slots and caps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from bot.schedule_slack import JOB_SCHEDULE_COMMAND, run_schedule_command
from core.runner import TurnJob
from core.runner_modal import Spawn
from core.schedules import Clock, UnknownSchedule, iso, utc_now
from core.schedules_run import RunResult, SchedulePoster, run_occurrence
from core.schedules_store import ScheduleBook
from core.schedules_tick import JOB_SCHEDULE_RUN, DueRun, run_scheduler, tick
from core.sessions import open_store

if TYPE_CHECKING:
    from bot.server import AppState
    from core.config import Settings

log = logging.getLogger("datathread.schedules")

_LOOP_KEY = "schedules.loop"


def poster_for(state: AppState, surface: str) -> SchedulePoster:
    """The surface's poster, over this process's shared clients."""
    if surface == "teams":
        from bot.schedule_teams import TeamsSchedulePoster
        from bot.teams_app import bot_for

        return TeamsSchedulePoster(bot=bot_for(state), state=state)
    from bot.schedule_slack import SlackSchedulePoster
    from bot.slack_turn import client_for

    return SlackSchedulePoster(client=client_for(state), analyst=state.analyst)


def book_for(state: AppState) -> ScheduleBook:
    return ScheduleBook.from_settings(state.analyst.store, state.settings)


async def run_due(state: AppState, due: DueRun, *, force: bool = False) -> RunResult | None:
    """Run one claimed occurrence with the poster of the schedule's surface."""
    book = book_for(state)
    schedule = await book.get(due.schedule_id)
    return await run_occurrence(book, poster_for(state, schedule.surface), due, force=force)


def register_jobs(state: AppState) -> None:
    """Name the `schedule.run` handler on the runner (here, and on remote workers)."""

    async def handler(job: TurnJob) -> None:
        with contextlib.suppress(UnknownSchedule):  # removed between the claim and the run
            await run_due(state, DueRun.from_payload(job.payload))

    state.runner.register(JOB_SCHEDULE_RUN, handler)

    async def slash(job: TurnJob) -> None:
        await run_schedule_command(state, job.payload)

    state.runner.register(JOB_SCHEDULE_COMMAND, slash)


def routes(state: AppState) -> list:
    return []


async def on_startup(state: AppState) -> None:
    """Register the job and start the scheduler loop in this process (unless a cron function ticks)."""
    register_jobs(state)
    if not state.settings.scheduler_loop:
        return
    stop = asyncio.Event()
    grace = timedelta(seconds=state.settings.schedule_grace_s)
    task = asyncio.create_task(
        run_scheduler(book_for(state), state.runner.submit, grace=grace, stop=stop),
        name="datathread-scheduler",
    )
    state.extras[_LOOP_KEY] = (stop, task)


async def on_shutdown(state: AppState) -> None:
    loop = state.extras.pop(_LOOP_KEY, None)
    if loop is not None:
        stop, task = loop
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, timeout=5)


async def tick_once(settings: Settings, spawn: Spawn, *, clock: Clock = utc_now) -> list[DueRun]:
    """One tick for the Modal cron function: claim what is due and spawn the turn function per run."""

    async def submit(job: TurnJob) -> None:
        await spawn(job.to_dict())

    store = await open_store(settings)
    try:
        book = ScheduleBook.from_settings(store, settings, clock=clock)
        return await tick(book, submit, grace=timedelta(seconds=settings.schedule_grace_s))
    finally:
        await store.close()


async def run_once(settings: Settings, schedule_id: str) -> RunResult:
    """`datathread schedule run-now ID`: one occurrence now, in this process, waited for."""
    from bot.server import AppState
    from bot.slack_turn import close_client
    from core.analyst import Analyst
    from core.config import require_model
    from core.runner import LocalRunner

    require_model(settings)
    analyst = await Analyst.create(settings)
    state = AppState(settings=settings, runner=LocalRunner(), analyst=analyst, ready=True)
    try:
        book = book_for(state)
        await book.get(schedule_id)  # unknown id: one sentence before anything is posted
        result = await run_due(state, DueRun(schedule_id, iso(book.now())), force=True)
    finally:
        await close_client(state)
        await analyst.close()
    return result or RunResult(ok=False, error="the schedule was removed meanwhile")
