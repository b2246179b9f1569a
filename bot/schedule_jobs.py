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

from starlette.routing import Route

from bot.schedule_slack import (
    JOB_SCHEDULE_ANSWER,
    JOB_SCHEDULE_COMMAND,
    SlackSchedulePoster,
    run_schedule_answer,
    run_schedule_command,
)
from bot.schedule_teams import TeamsSchedulePoster
from bot.slack_client import SharedClient
from bot.surface import AppState
from bot.surface_settings import POSTING_SETTINGS, postable_surfaces
from bot.teams_auth import TeamsBot, build_bot
from core.config import Settings
from core.runner import ERROR_ID, WHY, TurnJob, lost_kind
from core.runner_modal import Spawn, as_spawned
from core.schedules import Clock, UnknownSchedule, iso, utc_now
from core.schedules_run import RunResult, SchedulePoster, run_occurrence, run_stopped
from core.schedules_store import ScheduleBook
from core.schedules_tick import JOB_SCHEDULE_RUN, DueRun, run_scheduler, tick
from core.sessions import open_store

SCHEDULER_TASK = "datathread-scheduler"

log = logging.getLogger("datathread.schedules")


class Schedules:
    """Scheduled runs in a serving process: the job kinds, the scheduler loop, and the posters of each
    surface over that surface's own client (Slack's Web API client, Teams' adapter)."""

    def __init__(self, state: AppState, *, slack: SharedClient, teams: TeamsBot):
        self.state = state
        self.slack = slack
        self.teams = teams
        self._loop: tuple[asyncio.Event, asyncio.Task] | None = None

    def poster(self, surface: str) -> SchedulePoster:
        """The poster of the schedule's surface."""
        if surface == "teams":
            return TeamsSchedulePoster(bot=self.teams, state=self.state)
        return SlackSchedulePoster(client=self.slack.get(), analyst=self.state.analyst)

    async def run_due(self, due: DueRun, *, manual: bool = False) -> RunResult | None:
        """Run one claimed occurrence with the poster of the schedule's surface (`manual`: run-now)."""
        book = self.state.threads.schedules()
        schedule = await book.get(due.schedule_id)
        return await run_occurrence(book, self.poster(schedule.surface), due, manual=manual)

    async def run_lost(self, job: TurnJob) -> None:
        """A run whose process ended before it did (killed, its worker dead): its channel hears so
        where the run was answering, and the run is recorded as failed (it was silence, the schedule
        untouched). A store that is down can record nothing: the runner's log line says so."""
        if job.payload.get(WHY):
            log.warning(
                "schedule %s: its run could not start: %s", job.payload.get("schedule_id"), job.payload[WHY]
            )
            return
        due = DueRun.from_payload(job.payload)
        book = self.state.threads.schedules()
        try:
            schedule = await book.get(due.schedule_id)
        except UnknownSchedule:  # removed meanwhile: nobody to tell
            return
        poster = self.poster(schedule.surface)
        await run_stopped(book, poster, schedule, due, error_id=str(job.payload.get(ERROR_ID, "")))

    def register_jobs(self) -> None:
        """Name the `schedule.run` handler on the runner (here, and on remote workers)."""

        async def handler(job: TurnJob) -> None:
            with contextlib.suppress(UnknownSchedule):  # removed between the claim and the run
                await self.run_due(DueRun.from_payload(job.payload))

        self.state.runner.register(JOB_SCHEDULE_RUN, handler)
        self.state.runner.register(lost_kind(JOB_SCHEDULE_RUN), self.run_lost)

        async def slash(job: TurnJob) -> None:
            await run_schedule_command(self.state, self.slack.get(), job.payload)

        self.state.runner.register(JOB_SCHEDULE_COMMAND, slash)

        async def from_answer(job: TurnJob) -> None:
            await run_schedule_answer(self.state, self.slack.get(), job.payload)

        self.state.runner.register(JOB_SCHEDULE_ANSWER, from_answer)

    def routes(self) -> list[Route]:
        return []

    async def start(self) -> None:
        """Register the jobs and start the scheduler loop here (unless a cron function ticks)."""
        self.register_jobs()
        settings = self.state.settings
        if not settings.scheduler_loop:
            return
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_scheduler(
                self.state.threads.schedules(),
                self.state.runner.submit,
                grace=timedelta(seconds=settings.schedule_grace_s),
                stop=stop,
                surfaces=postable_surfaces(settings),
                needs=POSTING_SETTINGS,
            ),
            name=SCHEDULER_TASK,
        )
        self._loop = (stop, task)

    async def stop(self) -> None:
        if self._loop is not None:
            (stop, task), self._loop = self._loop, None
            stop.set()
            # `wait`, not `wait_for`: the loop may already be cancelled (the event loop closing cancels
            # every task), and that cancellation is the loop's end, not this caller's.
            await asyncio.wait({task}, timeout=5)
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is not None:
                log.warning("the scheduler loop ended with an error: %s", task.exception())


async def tick_once(settings: Settings, spawn: Spawn, *, clock: Clock = utc_now) -> list[DueRun]:
    """One tick for the Modal cron function: claim what is due and spawn the turn function per run."""

    async def submit(job: TurnJob) -> None:
        await spawn(as_spawned(job))  # with an id: a run Modal gives again is not run twice

    store = await open_store(settings)
    try:
        book = ScheduleBook.from_settings(store, settings, clock=clock)
        grace = timedelta(seconds=settings.schedule_grace_s)
        return await tick(book, submit, grace=grace, surfaces=postable_surfaces(settings))
    finally:
        await store.close()


async def run_once(settings: Settings, schedule_id: str) -> RunResult:
    """`datathread schedule run-now ID`: one occurrence now, in this process, waited for."""
    from core.analyst import Analyst
    from core.config import require_model
    from core.runner import LocalRunner

    require_model(settings)
    analyst = await Analyst.create(settings)
    state = AppState(settings=settings, runner=LocalRunner(), analyst=analyst, ready=True)
    slack = SharedClient(settings)
    schedules = Schedules(state, slack=slack, teams=build_bot(settings))
    try:
        book = state.threads.schedules()
        await book.get(schedule_id)  # unknown id: one sentence before anything is posted
        result = await schedules.run_due(DueRun(schedule_id, iso(book.now())), manual=True)
    finally:
        await slack.close()
        await analyst.close()
    return result or RunResult(ok=False, error="the schedule was removed meanwhile")
