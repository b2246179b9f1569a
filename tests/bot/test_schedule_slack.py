"""Scheduled runs in Slack, end to end: `datathread serve` (its `schedule.run` job on the runner), the
scheduler tick on a controllable clock, the real slack_sdk against the fake Slack Web API, the scripted
model, real DuckDB and sandbox processes."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from datetime import UTC, datetime, timedelta

from bot import slack_blocks
from core.asked_when import MARK as ASKED
from core.schedules import ANSWER_CADENCES, new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from core.thread import CONFIRM_EXPIRED
from tests.bot.slack_harness import confirm_buttons, serve, until
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.clock import Clock
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

DELAYS = "SELECT carrier, avg(dep_delay) AS avg_delay FROM flights GROUP BY carrier ORDER BY avg_delay DESC"
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
"""
# Far from the real clock, so the loop `serve` runs on real time never finds these schedules due.
MONDAY_0859_BERLIN = datetime(2031, 11, 24, 7, 59, tzinfo=UTC)


async def setup(harness, clock: Clock, *, trusted: bool = False, **kw) -> tuple[ScheduleBook, str]:
    book = ScheduleBook.from_settings(harness.state.analyst.store, harness.state.settings, clock=clock)
    args = {"cron": "0 9 * * mon", "tz": "Europe/Berlin", "surface": "slack", "channel": "C0042"}
    s = new_schedule(
        **{**args, **kw},
        question="delays by carrier, chart and CSV",
        owner="U0001",
        team_id=TEAM_ID,
        now=clock(),
    )
    await book.add(s, trusted=trusted)  # trusted: added from the terminal, past the access rules
    return book, s.id


async def occur(harness, book: ScheduleBook, clock: Clock, **delta: float) -> None:
    """Move the clock past the next occurrence, tick, and wait for the job on the server's runner."""
    clock.advance(**delta)
    await tick(book, harness.state.runner.submit, grace=timedelta(minutes=10))
    await harness.drain()


async def test_a_scheduled_run_posts_chart_and_csv_in_a_new_thread_of_its_channel(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock)
            fake_model.enqueue(
                tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
                tool("run_python", {"code": CHART}),
                tool("attach_file", {"path": "delays.png"}, more=[("attach_file", {"path": "delays.csv"})]),
                text("**F9** had the highest average delay."),
            )
            await occur(harness, book, clock, minutes=1, seconds=3)
            question = [b["text"] for b in fake_model.requests[0]["messages"][-1]["content"]]
            assert any(t.startswith(ASKED) and " in Europe/Berlin (UTC+01:00)" in t for t in question)
            header = api.of("chat.postMessage")[0].args
            assert header["channel"] == "C0042" and "thread_ts" not in header
            assert header["text"].startswith("Scheduled report (0 9 * * mon, Europe/Berlin)")
            root = api.of("chat.startStream")[0].args
            assert (root["channel"], root["recipient_user_id"]) == ("C0042", "U0001")
            completes = api.of("files.completeUploadExternal")
            assert {(c.args["channel_id"], c.args["thread_ts"]) for c in completes} == {
                ("C0042", root["thread_ts"])
            }
            png, csv = api.uploads.values()
            assert png[:4] == b"\x89PNG" and csv.decode().splitlines()[0] == "carrier,avg_delay"
            assert "F9" in "".join(c.args.get("markdown_text", "") for c in api.of("chat.appendStream"))
            s = await book.get(sid)
            assert (s.runs, s.failures, s.last_outcome) == (1, 0, "ok")
            records = await harness.state.analyst.store.list_turns(user_id="U0001")
            assert [r.get("event") for r in records if r.get("kind") == "schedule"] == ["created"]
            [turn] = [r for r in records if r.get("kind") != "schedule"]
            assert turn["turn_id"].startswith(f"s{sid}-") and turn["channel_id"] == "C0042" and turn["ok"]
            own = await harness.state.analyst.store.list_turns(session_id=f"schedule:{sid}")
            assert [r["answer"] for r in own if r.get("event") == "ran"] == [f"run {turn['turn_id']}"]
            # the next week's run is due, not before
            api.clear()
            await occur(harness, book, clock, days=6)
            assert not api.of("chat.postMessage")
    finally:
        api.stop()


async def test_failures_retry_once_and_three_in_a_row_pause_and_tell_the_owner(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock, cron="0 9 * * *", thread="1700000000.000001")
            for day in range(3):
                fake_model.enqueue(*[error(400, "invalid_request_error", "scripted failure")] * 2)
                await occur(harness, book, clock, days=1 if day else 0, minutes=0 if day else 1)
                assert (await book.get(sid)).failures == day + 1
            posts = [c.args for c in api.of("chat.postMessage")]
            in_thread = [p["text"] for p in posts if p.get("thread_ts") == "1700000000.000001"]
            assert sum("Retrying once" in t for t in in_thread) == 3
            assert sum("The retry failed too" in t for t in in_thread) == 2
            assert any("I paused this schedule: 3 runs in a row failed" in t for t in in_thread)
            # the model's reason is a sentence with brackets of its own: after a colon, not in brackets
            why = "The Claude API rejected the request as invalid (scripted failure)"
            assert f"This scheduled run failed: {why}. Retrying once." in in_thread, in_thread
            assert f"The retry failed too: {why}. I'll try again at the next scheduled time." in in_thread
            assert f"I paused this schedule: 3 runs in a row failed; the last one: {why}." in in_thread
            assert not [t for t in in_thread if ".)" in t or "))" in t or ".." in t], in_thread
            dm = [p for p in posts if p["channel"] == "U0001"]
            assert len(dm) == 1 and f"Resume it with `/ask schedule resume {sid}`" in dm[0]["text"]
            assert "in <#C0042>" in dm[0]["text"]  # Slack shows the channel's name
            assert "datathread schedule" not in dm[0]["text"]  # a terminal they do not have
            s = await book.get(sid)
            assert s.paused and s.paused_reason.startswith("3 runs in a row failed")
            api.clear()
            await occur(harness, book, clock, days=1)  # paused: nothing runs
            assert not api.calls
    finally:
        api.stop()


async def test_a_run_stopped_at_its_own_limits_is_not_retried(settings, fake_model):
    """A run that spent its token budget was retried at once, and spent it again: twice the most a
    turn may cost, every occurrence. It is counted as a failure, and waits for the next occurrence."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings.model_copy(update={"turn_token_budget": 1}), api) as harness:
            book, sid = await setup(harness, clock, thread="1700000000.000001")
            fake_model.enqueue(*[tool("list_tables") for _ in range(4)])
            await occur(harness, book, clock, minutes=1)
            assert len(fake_model.requests) == 1  # no second turn
            assert (await book.get(sid)).failures == 1
            in_thread = [c.args["text"] for c in api.of("chat.postMessage") if c.args.get("thread_ts")]
            assert not [t for t in in_thread if "Retrying once" in t or "The retry failed too" in t]
            assert any(
                t.startswith("This scheduled run failed: This question used up its token budget")
                and t.endswith("I'll try again at the next scheduled time.")
                for t in in_thread
            ), in_thread
    finally:
        api.stop()


async def test_a_channel_that_is_gone_pauses_the_schedule_without_a_retry(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock)
            api.fail_methods["chat.postMessage"] = "channel_not_found"
            await occur(harness, book, clock, minutes=1)
            s = await book.get(sid)
            assert s.paused and "channel_not_found" in s.paused_reason
            assert not fake_model.requests  # no turn ran, nothing was retried
            events = [
                t["event"] for t in await harness.state.analyst.store.list_turns(session_id=f"schedule:{sid}")
            ]
            assert events == ["created", "failed", "paused"]  # the run that could not post is recorded
    finally:
        api.stop()


async def test_an_owner_the_access_rules_refuse_pauses_the_schedule_before_anything_is_posted(
    settings, fake_model
):
    """A run for an owner outside DATATHREAD_ALLOWED_USERS posted its header, then "You're not on the
    list…" (to nobody in particular), then did both again as a retry (a newcomer trial)."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings.model_copy(update={"allowed_users": "U0GOOD"}), api) as harness:
            book, sid = await setup(harness, clock, trusted=True)
            await occur(harness, book, clock, minutes=1)
            s = await book.get(sid)
            reason = "datathread's access settings do not let its owner (U0001) ask in this channel"
            assert s.paused and s.paused_reason == reason
            posted = [c.args["text"] for c in api.of("chat.postMessage") if c.args["channel"] == "C0042"]
            assert posted == [f"I paused this schedule: {reason}."]  # no header, no retry, no "you"
            assert not fake_model.requests
    finally:
        api.stop()


async def test_slash_schedule_asks_create_or_cancel_in_the_askers_time_zone(settings, fake_model):
    api = FakeSlackAPI().start()
    api.user_tz = "Asia/Tokyo"
    try:
        async with serve(settings, api) as harness:
            book = ScheduleBook(harness.state.analyst.store)
            ack = await harness.command("schedule weekly mon 09:00 delays by carrier", channel="C0042")
            assert ack.status_code == 200 and "Setting up your schedule" in ack.text
            create, cancel = await confirm_buttons(api)
            assert (create["text"]["text"], cancel["text"]["text"]) == ("Create", "Cancel")
            prompt = api.of("chat.postEphemeral")[0].args
            assert prompt["user"] == "U0001" and "`0 9 * * mon` (Asia/Tokyo)" in json.dumps(prompt["blocks"])
            assert await book.list() == []  # nothing exists before the click
            await harness.click(
                slack_blocks.ACTION_CONFIRM_RUN, create["value"], channel="C0042", user="U0001"
            )
            await harness.drain()
            [s] = await book.list()
            assert (s.cron, s.tz, s.channel, s.owner, s.question) == (
                "0 9 * * mon",
                "Asia/Tokyo",
                "C0042",
                "U0001",
                "delays by carrier",
            )
            assert f"Created schedule {s.id}" in api.of("chat.postEphemeral")[-1].args["text"]
            assert not fake_model.requests  # parsed without the model
            # a late click (a client still showing the buttons) is told, not met with silence (nor a second one)
            await harness.click(
                slack_blocks.ACTION_CONFIRM_RUN, create["value"], channel="C0042", user="U0001"
            )
            await harness.drain()
            late = [c.args for c in api.calls if c.method.startswith("/response/")]
            assert late and late[-1]["text"] == CONFIRM_EXPIRED and len(await book.list()) == 1

            api.clear()
            await harness.command("schedule whenever delays")
            await harness.drain()
            assert "schedule weekly mon 09:00 QUESTION" in api.of("chat.postEphemeral")[-1].args["text"]
    finally:
        api.stop()


async def test_schedule_under_an_answer_reposts_its_question_after_create(settings, fake_model):
    """ "Schedule…" in an answer's footer: the question and its warehouse SQL on the chosen cadence, in
    the picker's time zone, created only after Create (like `/ask schedule`)."""
    from tests.bot.slack_harness import mention

    api = FakeSlackAPI().start()
    api.user_tz = "America/New_York"
    try:
        async with serve(settings, api) as harness:
            fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("F9 was the most delayed."))
            await harness.event(mention("delays by carrier", ts="500.1"))
            await harness.drain()
            actions = api.of("chat.stopStream")[0].args["blocks"][-1]["elements"]
            menu = next(e for e in actions if e["action_id"] == slack_blocks.ACTION_SCHEDULE)
            labels = [o["text"]["text"] for o in menu["options"]]
            assert labels == [label for label, _ in ANSWER_CADENCES]
            monday = next(o["value"] for o in menu["options"] if o["text"]["text"] == "Every Monday at 9:00")

            book = ScheduleBook(harness.state.analyst.store)
            api.clear()
            await harness.select(slack_blocks.ACTION_SCHEDULE, monday, thread_ts="500.1", user="U0003")
            create, _ = await confirm_buttons(api)  # the job waits for the click: no drain before it
            asked = api.of("chat.postEphemeral")[0].args
            prompt = json.dumps(asked["blocks"])
            assert "`0 9 * * mon` (America/New_York)" in prompt and "delays by carrier" in prompt
            assert asked["thread_ts"] == "500.1"  # in the answer's thread (it landed in the channel)
            assert await book.list() == []  # nothing exists before Create
            await harness.click(
                slack_blocks.ACTION_CONFIRM_RUN,
                create["value"],
                thread_ts="500.1",
                user="U0003",
                ephemeral=True,
            )
            await harness.drain()
            # the question is replaced with its outcome through the click's response_url: no live buttons
            [replaced] = [c.args for c in api.calls if c.method.startswith("/response/")]
            assert replaced["replace_original"] is True and "blocks" not in replaced
            assert "delays by carrier" in replaced["text"] and "Creating it." in replaced["text"]
            [s] = await book.list()
            assert (s.cron, s.tz, s.channel, s.owner, s.question, s.sql) == (
                "0 9 * * mon",
                "America/New_York",
                "C0001",
                "U0003",
                "delays by carrier",
                DELAYS,
            )
            created = api.of("chat.postEphemeral")[-1].args
            assert f"Created schedule {s.id}" in created["text"] and created["thread_ts"] == "500.1"
    finally:
        api.stop()


async def test_a_scheduled_run_is_a_line_when_it_starts_and_one_with_its_outcome(
    settings, fake_model, caplog
):
    """Under `serve`, a scheduled run wrote nothing at INFO (only httpx's lines): nobody could tell from
    the log that it ran, or why it failed. Where it posts, never the question (a turn's lines keep
    questions out too)."""
    caplog.set_level(logging.INFO, logger="datathread.schedules")
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock, cron="0 9 * * *")
            monday = int(datetime(2031, 11, 24, 8, tzinfo=UTC).timestamp())
            fake_model.enqueue(text("F9 had the highest average delay."))
            await occur(harness, book, clock, minutes=1, seconds=3)
            assert _schedule_lines(caplog) == [
                ("INFO", f"schedule {sid}: run s{sid}-{monday} started in slack channel C0042"),
                ("INFO", f"schedule {sid}: run s{sid}-{monday} ok"),
            ]
            caplog.clear()
            for _ in range(3):
                fake_model.enqueue(*[error(400, "invalid_request_error", "scripted failure")] * 2)
                await occur(harness, book, clock, days=1)
            why = "The Claude API rejected the request as invalid (scripted failure)"
            tuesday, thursday = monday + 86400, monday + 3 * 86400
            lines = _schedule_lines(caplog)
            assert ("INFO", f"schedule {sid}: run s{sid}-{tuesday} started in slack channel C0042") in lines
            assert (
                "WARNING",
                f"schedule {sid}: run s{sid}-{tuesday}-retry failed: {why}; failure 1 of 3 before a pause",
            ) in lines
            assert (
                "WARNING",
                f"schedule {sid}: run s{sid}-{thursday}-retry failed: {why}; failure 3 of 3 before a pause; paused",
            ) in lines
            assert not [m for _, m in lines if "delays by carrier" in m]  # the question stays out
    finally:
        api.stop()


def _schedule_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "datathread.schedules"]


async def test_runs_refused_by_the_owners_limits_are_skipped_not_retried_nor_counted(settings, fake_model):
    """An owner over the hourly question limit: the run was retried at once (refused again, posted
    twice), the refusal said "You've reached…" to the channel, and three such runs paused the schedule.
    Now: skipped, said once as the owner's limit, no retry, not counted towards the pause."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings.model_copy(update={"user_turns_per_hour": 1}), api) as harness:
            book, sid = await setup(harness, clock, cron="0 9 * * *")
            store = harness.state.analyst.store
            for day in range(4):
                await store.hit_rates([("user:slack:U0001", 1)], window_s=3600)  # the owner's one question
                await occur(harness, book, clock, days=1 if day else 0, minutes=0 if day else 1)
            assert not fake_model.requests
            s = await book.get(sid)
            assert (s.failures, s.paused, s.runs) == (0, False, 0)
            assert s.last_outcome.startswith("skipped: the schedule's owner has reached the limit")
            shown = api.shown()
            assert sum("Scheduled report" in m for m in shown) == 4  # one header a run: no retry
            skipped = [m for m in shown if "Skipped this run" in m]
            assert len(skipped) == 4, shown
            assert "the schedule's owner has reached the limit of questions for now" in skipped[0]
            assert not [m for m in shown if "You've" in m or "Retrying once" in m or "failed" in m]
            own = await store.list_turns(session_id=f"schedule:{sid}")
            assert [r["event"] for r in own].count("skipped") == 4
    finally:
        api.stop()


async def test_a_run_refused_by_the_owners_daily_budget_is_said_as_theirs(settings, fake_model):
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        budget = {"user_daily_token_budget": 1000}
        async with serve(settings.model_copy(update=budget), api) as harness:
            book, sid = await setup(harness, clock)
            store = harness.state.analyst.store
            day = time.strftime("%Y%m%d", time.gmtime())
            await store.add_usage(f"model:day:{day}:user:slack:U0001", 10**6, ttl_s=86400)
            await occur(harness, book, clock, minutes=1)
            assert not fake_model.requests
            s = await book.get(sid)
            assert s.failures == 0 and s.last_outcome.startswith("skipped: the schedule's owner has used")
            [skipped] = [m for m in api.shown() if "Skipped this run" in m]
            assert "their daily model budget" in skipped and "your" not in skipped.lower()
            assert not [m for m in api.shown() if "failed" in m or "Retrying" in m]
    finally:
        api.stop()


async def test_a_failed_run_of_a_new_thread_schedule_stays_in_its_thread(settings, fake_model):
    """A failed run in a "new thread per run" schedule posted its header, "failed… Retrying once.", a
    second header and "the retry failed too" all at the channel's top level. Now the notices and the
    retry are in the run's thread; only a pause is said at the top level."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        async with serve(settings, api) as harness:
            book, sid = await setup(harness, clock, cron="0 9 * * *")
            for day in range(3):
                fake_model.enqueue(*[error(400, "invalid_request_error", "scripted failure")] * 2)
                await occur(harness, book, clock, days=1 if day else 0, minutes=0 if day else 1)
            posts = [c.args for c in api.of("chat.postMessage") if c.args["channel"] == "C0042"]
            top = [p["text"] for p in posts if not p.get("thread_ts")]
            assert len(top) == 4 and all(t.startswith("Scheduled report") for t in top[:3]), top
            assert top[3].startswith("I paused this schedule: 3 runs in a row failed")
            in_threads = [p for p in posts if p.get("thread_ts")]
            assert sum("Retrying once" in p["text"] for p in in_threads) == 3
            assert sum("The retry failed too" in p["text"] for p in in_threads) == 2
            # each run's two attempts stream in that run's own thread, where its notices are
            streams = [c.args["thread_ts"] for c in api.of("chat.startStream")]
            assert len(streams) == 6 and len(set(streams)) == 3
            assert {p["thread_ts"] for p in in_threads} == set(streams)
            assert (await book.get(sid)).paused
    finally:
        api.stop()


async def test_slash_schedule_in_a_channel_the_bot_is_not_in_says_so_once(settings, fake_model):
    """The Create / Cancel question could not be posted (`not_in_channel`), and the person was told
    "Not created: the person cancelled or did not answer." — they had cancelled nothing."""
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as harness:
            api.fail_methods["chat.postEphemeral"] = "not_in_channel"
            await harness.command("schedule daily 09:00 flights", channel="C0099")
            await harness.drain()
            replies = [c.args["text"] for c in api.calls if c.method.startswith("/response/")]
            assert replies == [
                "I'm not in this channel, so I can't post a schedule here — `/invite @datathread`, "
                "then try again."
            ]
            assert not [m for m in api.shown() if "cancelled" in m]
            assert await ScheduleBook(harness.state.analyst.store).list() == []
    finally:
        api.stop()


async def test_a_schedule_removed_while_its_run_runs_keeps_the_run_in_the_audit_trail(settings, fake_model):
    """Removed mid-run, the answer still posted but its `ran` record was lost (the record's update
    raised first); a run failing meanwhile was retried for a schedule that no longer existed."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    asked, release = threading.Event(), threading.Event()

    def hold(reply: dict):
        def answer(body: dict) -> dict:
            asked.set()
            release.wait(30)
            return reply

        return answer

    try:
        async with serve(settings, api) as harness:
            store = harness.state.analyst.store
            for reply, event in (
                (text("F9 had the highest average delay."), "ran"),
                (error(400, "invalid_request_error", "scripted failure"), "failed"),
            ):
                asked.clear(), release.clear(), api.clear()
                book, sid = await setup(harness, clock)
                fake_model.enqueue(hold(reply))
                clock.advance(days=7 if event == "failed" else 0, minutes=1)
                await tick(book, harness.state.runner.submit, grace=timedelta(minutes=10))
                await until(asked.is_set, timeout=60)
                await book.remove(sid, by="terminal")
                release.set()
                await harness.drain()
                events = [r["event"] for r in await store.list_turns(session_id=f"schedule:{sid}")]
                assert events[-1] == event and events.count(event) == 1, events
                assert not [m for m in api.shown() if "Retrying" in m or "try again" in m]
            assert len(fake_model.requests) == 2  # the failed run was not retried
    finally:
        release.set()
        api.stop()


async def test_people_manage_their_schedules_with_the_slash_command(settings, fake_model):
    """`/ask schedule list` and `/ask schedule remove ID` answered "I couldn't read that schedule":
    the person who made a schedule in Slack could not see or change it."""
    api = FakeSlackAPI().start()
    clock = Clock(MONDAY_0859_BERLIN)
    try:
        admin = {"admin_users": "U0ADM", "schedules_per_user": 1}
        async with serve(settings.model_copy(update=admin), api) as harness:
            book, sid = await setup(harness, clock)

            async def ask(text: str, user: str = "U0001") -> str:
                api.clear()
                ack = await harness.command(text, channel="C0042", user=user)
                assert ack.status_code == 200
                await harness.drain()
                [reply] = api.of("chat.postEphemeral")
                assert reply.args["user"] == user  # for the asker alone
                return reply.args["text"]

            listed = await ask("schedule list")
            assert f"`{sid}`" in listed and "in <#C0042>" in listed and "delays by carrier" in listed
            assert re.search(r"next run \w{3} \d{1,2} \w{3} 20\d\d, 09:00 \(Europe/Berlin\)", listed), listed
            assert "You have no schedules" in await ask("schedule list", user="U0002")
            assert "Only its owner or an admin" in await ask(f"schedule pause {sid}", user="U0002")
            assert not (await book.get(sid)).paused
            assert f"Paused schedule `{sid}`" in await ask(f"schedule pause {sid}")
            assert (await book.get(sid)).paused
            assert f"Resumed schedule `{sid}`; next run" in await ask(f"schedule resume {sid}")
            # at the cap, the refusal says how to free a place, in words they can act on
            over = await ask("schedule daily 07:00 flights")
            assert over == "You already have 1 active schedule; pause or remove one first. " + (
                "`/ask schedule list` shows yours."
            )
            assert f"`{sid}`" in await ask("schedule list", user="U0ADM")  # an admin sees the channel's
            assert f"Removed schedule `{sid}`" in await ask(f"schedule remove {sid}", user="U0ADM")
            assert await book.list() == []
            assert "No schedule has the id" in await ask(f"schedule remove {sid}")
            events = [
                r["event"] for r in await harness.state.analyst.store.list_turns(session_id=f"schedule:{sid}")
            ]
            assert events == ["created", "paused", "resumed", "removed"]
            assert not fake_model.requests
    finally:
        api.stop()


async def test_a_mention_is_dated_in_the_askers_slack_time_zone(settings, fake_model):
    """Slack's users.info gave the asker's zone, which only schedules used: "yesterday" was UTC's."""
    from tests.bot.slack_harness import mention

    api = FakeSlackAPI().start()
    api.user_tz = "Asia/Tokyo"
    try:
        async with serve(settings, api) as harness:
            fake_model.enqueue(text("842 flights."))
            assert (
                await harness.event(mention("how many flights yesterday?", ts="1.100"))
            ).status_code == 200
            await harness.drain()
            said = [b["text"] for b in fake_model.requests[0]["messages"][-1]["content"]]
            assert said[0] == "how many flights yesterday?"
            assert said[1].startswith(ASKED) and " in Asia/Tokyo (UTC+09:00)" in said[1]
    finally:
        api.stop()
