"""A scheduled run that stops before finishing: its process killed (SIGKILL of the worker running it)
or cancelled by a shutdown. It was lost in silence — the header and an answer stream left open in the
channel, nobody told, the schedule's record untouched. Real worker processes, the fake Slack Web API,
the scripted model."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from tests.bot.slack_harness import said, serve, until
from tests.fakes.anthropic_api import text
from tests.fakes.clock import Clock
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

MONDAY_0859_BERLIN = datetime(2031, 11, 24, 7, 59, tzinfo=UTC)  # far from the real clock's loop
STOPPED = "This scheduled run stopped before finishing"


async def setup(harness, clock: Clock) -> tuple[ScheduleBook, str]:
    book = ScheduleBook.from_settings(harness.state.analyst.store, harness.state.settings, clock=clock)
    s = new_schedule(
        cron="0 9 * * mon",
        tz="Europe/Berlin",
        surface="slack",
        channel="C0042",
        question="delays by carrier",
        owner="U0001",
        team_id=TEAM_ID,
        now=clock(),
    )
    await book.add(s)
    return book, s.id


def run_records(events: list[dict]) -> list[tuple[str, str]]:
    return [(r["event"], r["answer"]) for r in events if r.get("event") in ("ran", "failed")]


@pytest.mark.own_sandbox
async def test_a_scheduled_run_whose_worker_is_killed_is_told_and_recorded(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings.model_copy(update={"turn_workers": 1}), api) as harness:
            (victim,) = harness.state.runner.pids()
            book, sid = await setup(harness, clock)

            def kill_the_worker(body: dict) -> dict:
                with contextlib.suppress(ProcessLookupError):  # the answer's stream is open by now
                    os.kill(victim, signal.SIGKILL)
                time.sleep(0.5)
                return text("never delivered")

            fake_model.enqueue(kill_the_worker)
            clock.advance(minutes=1)
            await tick(book, harness.state.runner.submit, grace=timedelta(minutes=10))
            await until(lambda: said(api, STOPPED) >= 1, timeout=120)
            await asyncio.sleep(0.5)  # a second notice would show by now
            assert said(api, STOPPED) == 1
            [header] = [c.args for c in api.of("chat.postMessage") if c.args["channel"] == "C0042"]
            assert header["text"].startswith("Scheduled report")
            # where the run was answering: its stream, left open by the dead worker, ended with the notice
            [stream] = api.of("chat.startStream")
            [stop] = api.of("chat.stopStream")
            assert stream.args["thread_ts"] == api.posted["C0042"][0]["ts"]
            assert STOPPED in stop.args["markdown_text"] and "error id" in stop.args["markdown_text"]
            assert "next scheduled time" in stop.args["markdown_text"]
            s = await book.get(sid)
            assert s.last_outcome.startswith("failed: it stopped before finishing")
            assert (s.failures, s.paused, s.runs) == (0, False, 0)  # the process failed, not the schedule
            own = await harness.state.analyst.store.list_turns(session_id=f"schedule:{sid}")
            [(event, note)] = run_records(own)
            assert event == "failed" and "stopped before finishing" in note
    finally:
        api.stop()


async def test_a_scheduled_run_stopped_by_a_shutdown_is_recorded(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    asked, release = threading.Event(), threading.Event()

    def hold(body: dict) -> dict:
        asked.set()
        release.wait(30)
        return text("too late")

    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock)
            fake_model.enqueue(hold)
            clock.advance(minutes=1)
            await tick(book, harness.state.runner.submit, grace=timedelta(minutes=10))
            await until(asked.is_set)
            await harness.state.runner.stop(0)  # the shutdown's grace is over: the run is cancelled
            s = await book.get(sid)
            assert s.last_outcome.startswith("failed: it stopped before finishing")
            own = await harness.state.analyst.store.list_turns(session_id=f"schedule:{sid}")
            assert [e for e, _ in run_records(own)] == ["failed"]
            assert said(api, "too late") == 0
            # the channel heard it once: the turn's own "stopped" end of its stream, no second notice
            assert len(api.of("chat.stopStream")) == 1 and said(api, STOPPED) == 0
    finally:
        release.set()
        api.stop()
