"""Scheduled runs in Teams, end to end: the app's `schedule.run` job, proactive messages through the real
botframework-connector client to the fake Bot Connector, the scripted model, real DuckDB and sandbox."""

from __future__ import annotations

import base64
import json
import urllib.parse
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from bot.schedule_teams import TeamsSchedulePoster
from bot.server import AppState, create_app
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from tests.bot.teams_harness import serve_teams
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.clock import Clock

CHANNEL = "19:general@thread.tacv2"
DELAYS = "SELECT carrier, avg(dep_delay) AS avg_delay FROM flights GROUP BY carrier ORDER BY avg_delay DESC"
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
"""
MONDAY_0859_BERLIN = datetime(2031, 11, 24, 7, 59, tzinfo=UTC)  # far from the real clock's loop


@pytest.fixture
async def teams(settings):
    connector = FakeConnector().start()
    app = create_app(settings.model_copy(update={"teams_service_url": connector.url + "/"}))
    state: AppState = app.state.datathread
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield state, connector, client
    connector.stop()


async def add_and_occur(state: AppState, clock: Clock, **kw) -> tuple[ScheduleBook, str]:
    book = ScheduleBook.from_settings(state.analyst.store, state.settings, clock=clock)
    s = new_schedule(
        cron="0 9 * * mon",
        tz="Europe/Berlin",
        surface="teams",
        channel=CHANNEL,
        question="delays by carrier, chart and CSV",
        owner="aad-ada",
        team_id="tenant-1",
        now=clock(),
        **kw,
    )
    await book.add(s)
    clock.advance(minutes=1, seconds=2)
    await tick(book, state.runner.submit, grace=timedelta(minutes=10))
    await state.runner.drain(timeout=60)
    return book, s.id


async def test_a_scheduled_run_starts_a_thread_in_the_channel_with_chart_and_csv(teams, fake_model):
    state, connector, client = teams
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool("attach_file", {"path": "delays.png"}, more=[("attach_file", {"path": "delays.csv"})]),
        text("**F9** had the highest average delay."),
    )
    book, sid = await add_and_occur(state, Clock(MONDAY_0859_BERLIN))
    # a new conversation (thread) in the channel, its first message the run's header
    [create] = [c for c in connector.calls if c.method == "POST" and c.conversation_id == ""]
    assert create.body["channelData"]["channel"]["id"] == CHANNEL and create.body["isGroup"] is True
    assert create.body["activity"]["text"].startswith("Scheduled report (0 9 * * mon, Europe/Berlin)")
    thread = connector.id_of(create.body)
    sent = connector.sent(thread)
    assert not [m for m in sent if (m.get("text") or "").startswith("Scheduled report")]  # posted once
    image = next(a for m in sent for a in m.get("attachments") or [] if a["contentType"] == "image/png")
    assert base64.b64decode(image["contentUrl"].split(",", 1)[1])[:4] == b"\x89PNG"
    link = next(m["text"] for m in sent if "delays.csv" in (m.get("text") or ""))
    url = link.split("(", 1)[1].split(")", 1)[0]
    parts = urllib.parse.urlsplit(url)
    csv = await client.get(f"{parts.path}?{parts.query}")  # the signed link serves the real file
    assert csv.status_code == 200 and csv.content.decode().splitlines()[0] == "carrier,avg_delay"
    # the answer, then the chart and the CSV it speaks of
    [answer] = [i for i, m in enumerate(sent) if "**F9**" in (m.get("text") or "")]
    files = [i for i, m in enumerate(sent) if image in (m.get("attachments") or []) or m.get("text") == link]
    assert len(files) == 2 and answer < min(files)
    s = await book.get(sid)
    assert (s.runs, s.last_outcome) == (1, "ok")


async def test_a_schedule_with_a_thread_posts_into_that_thread(teams, fake_model):
    state, connector, _ = teams
    fake_model.enqueue(text("336,776 flights."))
    await add_and_occur(state, Clock(MONDAY_0859_BERLIN), thread="1700000000001")
    conversation = f"{CHANNEL};messageid=1700000000001"
    sent = connector.sent(conversation)
    assert sent[0]["text"].startswith("Scheduled report") and "336,776" in json.dumps(sent[-1])
    assert all(c.conversation_id == conversation for c in connector.calls)  # nothing elsewhere


async def test_a_conversation_that_is_gone_pauses_the_schedule(teams, fake_model):
    state, connector, _ = teams
    connector.refuse_status = 403  # the bot was removed from the team
    book, sid = await add_and_occur(state, Clock(MONDAY_0859_BERLIN))
    s = await book.get(sid)
    assert s.paused and "HTTP 403" in s.paused_reason and s.failures == 0
    assert not fake_model.requests  # nothing ran and nothing was retried


async def test_a_failed_run_says_so_and_retries_in_its_own_conversation(teams, fake_model):
    """A new conversation per run: the failure notice and the retry went into two more new
    conversations of the channel; now both are in the run's own."""
    state, connector, _ = teams
    fake_model.enqueue(*[error(400, "invalid_request_error", "scripted failure")] * 2)
    book, sid = await add_and_occur(state, Clock(MONDAY_0859_BERLIN))
    [create] = [c for c in connector.calls if c.method == "POST" and c.conversation_id == ""]
    assert create.body["activity"]["text"].startswith("Scheduled report")
    said = json.dumps(connector.sent(connector.id_of(create.body)))
    assert "Retrying once" in said and "The retry failed too" in said
    assert (await book.get(sid)).failures == 1


async def test_people_list_pause_resume_and_remove_their_schedules_from_a_teams_conversation(
    settings, fake_model
):
    """`/ask schedule list|pause|resume|remove` had no Teams counterpart: whoever made a schedule in
    Teams could neither see nor change it, and its pause notice sent them to an admin's terminal."""
    async with serve_teams(settings) as teams:
        book = teams.state.threads.schedules()
        clock = Clock(MONDAY_0859_BERLIN)
        made = {
            owner: new_schedule(
                cron="0 9 * * mon",
                tz="Europe/Berlin",
                surface="teams",
                channel=CHANNEL,
                question=f"delays by carrier for {owner}",
                owner=owner,
                team_id="tenant-1",
                now=clock(),
            )
            for owner in ("aad-ada", "aad-bob")
        }
        for schedule in made.values():
            await book.add(schedule)
        mine, bobs = made["aad-ada"].id, made["aad-bob"].id

        async def said(words: str) -> str:
            [reply] = await teams.say(words)
            return reply["text"]

        listing = await said("schedule list")
        assert mine in listing and "delays by carrier for aad-ada" in listing and bobs not in listing
        assert "`@datathread schedule pause ID`" in listing
        assert "Only its owner or an admin" in await said(f"schedule pause {bobs}")
        assert not (await book.get(bobs)).paused
        assert (await said(f"schedule pause {mine}")).startswith(f"Paused schedule `{mine}`")
        assert (await book.get(mine)).paused
        assert "Resumed schedule" in await said(f"schedule resume {mine}")
        assert not (await book.get(mine)).paused
        assert await said(f"schedule remove {mine}") == f"Removed schedule `{mine}`."
        assert [s.id for s in await book.list()] == [bobs]
        assert not fake_model.requests  # answered without the model, as the Slack command is
        poster = TeamsSchedulePoster(bot=None, state=teams.state)  # the hint needs no Bot Connector
        hint = poster.resume_hint(made["aad-bob"])  # what a pause notice tells people here
        assert f"`@datathread schedule resume {bobs}`" in hint
