"""The scheduler tick with a controllable clock: exactly once across replicas (one real Redis, one SQLite
file), no pile-up after downtime, and the loop that `serve` runs."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from core.runner import TurnJob
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import JOB_SCHEDULE_RUN, DueRun, claim_due, run_scheduler, tick
from core.store_redis import RedisStore
from tests.fakes.clock import Clock
from tests.fakes.redis_server import RedisServer

# every test runs on SQLite and on a real redis-server (make_store: tests/core/conftest.py)

GRACE = timedelta(minutes=10)
MONDAY_0659 = datetime(2026, 11, 23, 5, 59, tzinfo=UTC)  # 06:59 in Berlin


async def add(book: ScheduleBook, cron: str, **kw) -> str:
    args = {"tz": "Europe/Berlin", "surface": "slack", "channel": "C1", "question": "q", **kw}
    s = new_schedule(cron=cron, now=book.now(), **args)
    await book.add(s, trusted=True)
    return s.id


async def test_two_replicas_claim_each_occurrence_exactly_once(make_store):
    clock = Clock(MONDAY_0659)
    a = ScheduleBook(make_store(), clock=clock)
    b = ScheduleBook(make_store(), clock=clock)
    # the most frequent schedules allowed (every 15 minutes), and every half hour
    ids = [await add(a, "*/15 * * * *") for _ in range(6)] + [await add(a, "*/30 * * * *") for _ in range(4)]
    won: list[DueRun] = []
    clock.advance(minutes=1)
    for _ in range(6):  # six quarter-hours of ticks (07:00 … 08:15), both replicas racing on every tick
        for result in await asyncio.gather(
            claim_due(a, grace=GRACE, replica="a"), claim_due(b, grace=GRACE, replica="b")
        ):
            won += result
        clock.advance(minutes=15)
    runs = [(d.schedule_id, d.occurrence) for d in won]
    assert len(runs) == len(set(runs))  # nobody ran an occurrence twice
    assert len(runs) == 6 * 6 + 4 * 3  # and every occurrence ran
    assert {d.schedule_id for d in won} == set(ids)
    assert all(d.skipped == 0 for d in won)


async def test_a_replica_that_ticks_late_does_not_run_it_again(make_store):
    clock = Clock(MONDAY_0659)
    a, b = ScheduleBook(make_store(), clock=clock), ScheduleBook(make_store(), clock=clock)
    await add(a, "0 7 * * *")
    clock.advance(minutes=1, seconds=5)
    assert len(await claim_due(a, grace=GRACE)) == 1
    clock.advance(seconds=40)  # b's tick of the same minute, and its next one
    assert await claim_due(b, grace=GRACE) == []
    clock.advance(minutes=1)
    assert await claim_due(b, grace=GRACE) == []


async def test_downtime_skips_missed_occurrences_and_runs_only_a_recent_one(make_store):
    clock = Clock(MONDAY_0659)
    book = ScheduleBook(make_store(), clock=clock)
    sid = await add(book, "0 9 * * *")  # daily at 09:00 Berlin = 08:00 UTC
    clock.set(datetime(2026, 11, 26, 8, 3, tzinfo=UTC))  # down Mon..Wed, back 3 min after Thursday's
    [due] = await claim_due(book, grace=GRACE)
    assert due.occurrence == "2026-11-26T09:00:00+01:00" and due.skipped == 3
    s = await book.get(sid)
    assert s.skipped == 3 and s.cursor == due.occurrence

    clock.set(datetime(2026, 11, 28, 13, 0, tzinfo=UTC))  # down again; back at 14:00, hours late
    assert await claim_due(book, grace=GRACE) == []  # too late to be useful: skipped, not posted
    assert (await book.get(sid)).skipped == 5
    clock.set(datetime(2026, 11, 29, 8, 0, 20, tzinfo=UTC))
    [due] = await claim_due(book, grace=GRACE)  # the next day runs as usual
    assert due.occurrence == "2026-11-29T09:00:00+01:00" and due.skipped == 0
    audit = await book.store.list_turns(session_id=f"schedule:{sid}")
    assert [t["event"] for t in audit] == ["created", "skipped", "skipped"]
    assert "skipped 3 occurrence(s) up to 2026-11-25T09:00:00+01:00" in audit[1]["answer"]


async def test_a_weekly_report_missed_by_a_short_outage_runs_late_rather_than_a_week_later(make_store):
    """A fixed 10-minute grace skipped a weekly report for a whole week when the bot was down for 11
    minutes at its hour: how late a run may be grows with its schedule's gap (half of it, up to 2 h)."""
    clock = Clock(MONDAY_0659)
    book = ScheduleBook(make_store(), clock=clock)
    weekly = await add(book, "0 9 * * mon")  # 09:00 Berlin = 08:00 UTC, Monday 23 Nov 2026
    quarterly = await add(book, "*/15 * * * *")  # its next run is 15 minutes away: 10 minutes late at most
    clock.set(datetime(2026, 11, 23, 8, 11, tzinfo=UTC))  # back 11 minutes after both were due
    [due] = await claim_due(book, grace=GRACE)
    assert (due.schedule_id, due.occurrence, due.skipped) == (weekly, "2026-11-23T09:00:00+01:00", 0)
    assert (
        await book.get(quarterly)
    ).skipped == 9  # 06:00..08:00 UTC, the last 11 minutes late: skipped as before
    clock.set(datetime(2026, 11, 30, 10, 30, tzinfo=UTC))  # the next Monday: back 2.5 hours after
    assert [d.schedule_id for d in await claim_due(book, grace=GRACE)] == [quarterly]  # 10:30's, on time
    assert (await book.get(weekly)).skipped == 1  # too late even for a weekly report: skipped


async def test_paused_schedules_are_not_claimed_and_resume_does_not_replay(make_store):
    clock = Clock(MONDAY_0659)
    book = ScheduleBook(make_store(), clock=clock)
    sid = await add(book, "*/15 * * * *")
    await book.pause(sid)
    clock.advance(hours=2)
    assert await claim_due(book, grace=GRACE) == []
    await book.resume(sid)
    assert await claim_due(book, grace=GRACE) == []  # nothing of the paused two hours
    clock.advance(minutes=5)
    assert len(await claim_due(book, grace=GRACE)) == 1


async def test_a_replica_that_cannot_post_to_a_surface_leaves_its_runs_to_one_that_can(make_store, caplog):
    """A `serve` without SLACK_BOT_TOKEN claimed every Slack run, failed to post it three times and
    paused the schedule for the replicas that could post it (a newcomer trial)."""
    clock = Clock(MONDAY_0659)
    store = make_store()
    teams_only, both = ScheduleBook(store, clock=clock), ScheduleBook(store, clock=clock)
    slack_id = await add(teams_only, "0 7 * * mon")
    teams_id = await add(teams_only, "0 7 * * mon", surface="teams", channel="19:abc@thread.tacv2")
    clock.advance(minutes=1)
    left: list[str] = []
    won = await claim_due(teams_only, grace=GRACE, surfaces={"teams"}, unpostable=lambda s: left.append(s.id))
    assert [d.schedule_id for d in won] == [teams_id] and left == [slack_id]
    [due] = await claim_due(both, grace=GRACE, surfaces={"slack", "teams"})
    assert due.schedule_id == slack_id and not (await both.get(slack_id)).paused
    # the loop says so once per schedule, naming what this process lacks, however often it ticks
    stop = asyncio.Event()

    async def never(job: TurnJob) -> None:
        raise AssertionError(job)

    clock.advance(days=7)
    with caplog.at_level(logging.WARNING, logger="datathread.schedules"):
        loop = asyncio.create_task(
            run_scheduler(
                teams_only,
                never,
                grace=GRACE,
                stop=stop,
                interval_s=0.01,
                surfaces=set(),
                needs={"slack": "SLACK_BOT_TOKEN"},
            )
        )
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(loop, 5)
    said = [r.getMessage() for r in caplog.records if "not configured in this process" in r.getMessage()]
    assert len(said) == 2 and any(slack_id in m and "SLACK_BOT_TOKEN" in m for m in said), said


async def test_tick_submits_runner_jobs_and_the_loop_stops_cleanly(make_store):
    clock = Clock(MONDAY_0659)
    book = ScheduleBook(make_store(), clock=clock)
    sid = await add(book, "0 7 * * mon")
    submitted: list[TurnJob] = []

    async def submit(job: TurnJob) -> None:
        submitted.append(job)

    assert await tick(book, submit, grace=GRACE) == []
    clock.advance(minutes=1)
    stop = asyncio.Event()

    async def submit_and_stop(job: TurnJob) -> None:
        submitted.append(job)
        stop.set()

    await asyncio.wait_for(run_scheduler(book, submit_and_stop, grace=GRACE, stop=stop, interval_s=60), 10)
    [job] = submitted
    assert job.kind == JOB_SCHEDULE_RUN
    assert DueRun.from_payload(job.payload) == DueRun(sid, "2026-11-23T07:00:00+01:00", 0)


@pytest.fixture
def redis_of_its_own():
    """Killed and started again by the test: not the process's shared one."""
    server = RedisServer().start()
    yield server
    server.stop()


async def test_a_store_outage_is_one_line_when_it_starts_and_one_when_it_ends(redis_of_its_own, caplog):
    """`serve` ticks every 30 s: an hour of Redis outage was 120 warnings (before that, 120
    tracebacks). A real redis-server, killed and started again on its port."""
    redis_server = redis_of_its_own
    book = ScheduleBook(RedisStore(redis_server.url))
    stop = asyncio.Event()
    loop = asyncio.create_task(run_scheduler(book, _never, grace=GRACE, stop=stop, interval_s=0.05))
    try:
        with caplog.at_level(logging.INFO, logger="datathread.schedules"):
            await asyncio.sleep(0.2)  # ticks that work
            redis_server.kill()
            await asyncio.sleep(1.0)  # many ticks into the outage
            redis_server.start()
            await _until(lambda: "reachable again" in caplog.text)
            await asyncio.sleep(0.2)  # ticks that work again
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        await book.store.close()
    lines = [r.getMessage() for r in caplog.records]
    assert sum("is not reachable" in line for line in lines) == 1, lines
    assert sum("reachable again" in line for line in lines) == 1, lines
    assert not [r for r in caplog.records if r.exc_info], lines  # sentences, no traceback


async def _never(job: TurnJob) -> None:
    raise AssertionError(f"nothing is due: {job}")


async def _until(condition, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_schedule_made_before_the_15_minute_limit_is_paused_not_run(make_store):
    """`* * * * *` schedules stored before the limit kept making 1,440 answers a day."""
    import dataclasses

    clock = Clock(MONDAY_0659)
    book = ScheduleBook(make_store(), clock=clock)
    sid = await add(book, "*/15 * * * *")
    stored = await book.get(sid)
    await book.store.put_record("schedule", sid, dataclasses.replace(stored, cron="* * * * *").to_dict())
    assert (await book.get(sid)).cron == "* * * * *"
    clock.advance(minutes=2)
    assert await claim_due(book, grace=GRACE) == []
    paused = await book.get(sid)
    assert paused.paused and "would run again 1 minute after a run" in paused.paused_reason
