"""Schedules in Teams chats (group, meeting and personal chats), end to end: "Schedule…" under an
answer in a group chat, then scheduled runs through the real botframework-connector client to the fake
Bot Connector — which, as Teams does, refuses to create a group chat — with the scripted model."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
from datetime import timedelta

import pytest

from core.schedules import Schedule, new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from tests.bot import teams_harness
from tests.fakes.anthropic_api import text, tool
from tests.fakes.clock import Clock

GROUP = "19:9a8b7c6d5e4f@thread.v2"  # a group chat
MEETING = "19:meeting_NjQ4ZDNkYjYtOGE0Mi00@thread.v2"  # a meeting's chat


def in_group_chat(url: str, *, text_: str = "", value: dict | None = None, chat: str = GROUP) -> dict:
    """An activity from a group chat, as Teams sends it: no channel or team, the bot's mention once."""
    return teams_harness.activity(url, text_, conversation=chat, value=value, kind="groupChat")


def creates(connector) -> list[dict]:
    """`createConversation` calls (POST /v3/conversations), refused or not."""
    made = [c.body for c in connector.calls if c.method == "POST" and c.conversation_id == ""]
    return made + connector.refused_creates


def chat_schedule(teams, book: ScheduleBook, chat: str, question: str, **extra) -> Schedule:
    """A weekly schedule of Ada's in `chat` of tenant-1, through the served app's Bot Connector."""
    return new_schedule(
        cron="0 9 * * mon",
        tz="Europe/Berlin",
        surface="teams",
        channel=chat,
        question=question,
        owner="aad-ada",
        team_id="tenant-1",
        service_url=teams.connector.url,
        now=book.now(),
        **extra,
    )


async def run_due(teams, book: ScheduleBook, schedule_id: str) -> ScheduleBook:
    """Move a clock to the schedule's next run and let the scheduler tick once."""
    schedule = await book.get(schedule_id)
    clock = Clock(schedule.next_run(book.now()) - timedelta(seconds=30))
    book = ScheduleBook.from_settings(teams.state.analyst.store, teams.state.settings, clock=clock)
    clock.advance(minutes=1)
    await tick(book, teams.state.runner.submit, grace=timedelta(minutes=10))
    await teams.state.runner.drain(timeout=60)
    return book


@pytest.mark.parametrize(
    "chat", [GROUP, "8:orgid:group-chat-of-a-shape-not-known"], ids=["group", "new-shape"]
)
async def test_schedule_in_a_group_chat_posts_its_runs_into_the_chat(teams, fake_model, chat):
    """'Schedule…' → Create in a group chat said "Created", then every run asked the Bot Connector to
    create a group chat (createConversation, isGroup, the chat's id as channel), which Teams refuses:
    the schedule never posted. Now it records the chat's kind and each run is a message in the chat.
    The kind is the one Teams names with the click, not one read from the id's shape (an id of a shape
    the reader does not know was recorded as a personal chat, and its runs posted as one)."""
    url = teams.connector.url
    here = functools.partial(in_group_chat, chat=chat)

    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}), text("336,776 flights.")
    )
    await teams_harness.post(teams, here(url, text_="how many flights?"))
    card = next(
        a["content"]
        for m in teams.connector.sent()
        for a in m.get("attachments") or []
        if a["content"].get("actions")
    )
    show = next(a for a in card["actions"] if a["type"] == "Action.ShowCard")
    before = len(teams.connector.sent())
    pick = here(url, value={**show["card"]["actions"][0]["data"], "cadence": "0 9 * * 1-5"})
    assert (await teams.post(pick)).status_code == 202
    for _ in range(400):  # the job asks Create / Cancel, then waits for the click
        asked = [
            a["content"]
            for m in teams.connector.sent()[before:]
            for a in m.get("attachments") or []
            if "Create this schedule?" in json.dumps(a)
        ]
        if asked:
            break
        await asyncio.sleep(0.05)
    confirm = asked[0]
    assert "posting in this chat" in json.dumps(confirm)  # not "a new thread in 19:…@thread.v2"
    await teams_harness.post(teams, here(url, value=confirm["actions"][0]["data"]))
    assert any("Created schedule" in (m.get("text") or "") for m in teams.connector.sent()[before:])
    book = ScheduleBook.from_settings(teams.state.analyst.store, teams.state.settings)
    [schedule] = await book.list()
    assert (schedule.channel, schedule.conversation_type) == (chat, "groupChat")

    fake_model.enqueue(text("336,776 flights."))
    sent_before = len(teams.connector.sent(chat))
    book = await run_due(teams, book, schedule.id)
    assert creates(teams.connector) == []  # no conversation created: the run went into the chat
    run = teams.connector.sent(chat)[sent_before:]
    assert run[0]["text"].startswith("Scheduled report") and "336,776" in json.dumps(run[1:])
    assert {(m["conversation"]["conversationType"], m["conversation"]["isGroup"]) for m in run} == {
        ("groupChat", True)
    }
    done = await book.get(schedule.id)
    assert (done.runs, done.last_outcome, done.failures, done.paused) == (1, "ok", 0, False)


@pytest.mark.parametrize("chat", [MEETING, teams_harness.CHAT], ids=["meeting-chat", "personal-chat"])
async def test_a_schedule_made_before_the_kind_was_recorded_posts_into_its_chat(teams, fake_model, chat):
    """A schedule stored without `conversation_type` is read by its id: a chat's runs go into the chat."""
    book = ScheduleBook.from_settings(teams.state.analyst.store, teams.state.settings)
    made = chat_schedule(teams, book, chat, "how many flights?")
    await book.add(dataclasses.replace(made, conversation_type=""))  # as stored before
    fake_model.enqueue(text("336,776 flights."))
    book = await run_due(teams, book, made.id)
    run = teams.connector.sent(chat)
    assert creates(teams.connector) == [] and run[0]["text"].startswith("Scheduled report")
    assert "336,776" in json.dumps(run)
    assert (await book.get(made.id)).last_outcome == "ok"


async def test_a_run_in_a_chat_joins_the_chats_current_conversation(teams, fake_model):
    """A run in a chat took the chat's first session (generation 0) whatever happened since: after a
    `reset`, its request still held the question asked before it, and a person's follow-up ("why so
    many?") went to the new session, which had never seen the report. Now a run joins the chat's
    current conversation as a question there does, and the follow-up sees the report."""
    url = teams.connector.url
    book = ScheduleBook.from_settings(teams.state.analyst.store, teams.state.settings)
    made = chat_schedule(teams, book, GROUP, "how many carriers fly?", conversation_type="groupChat")
    await book.add(made)
    fake_model.enqueue(text("336,776 flights."), text("16 carriers fly."), text("Because of the hubs."))
    await teams_harness.post(teams, in_group_chat(url, text_="how many flights?"))
    await teams_harness.post(teams, in_group_chat(url, text_="reset"))
    assert any("Started a fresh conversation" in (m.get("text") or "") for m in teams.connector.sent())
    book = await run_due(teams, book, made.id)
    assert (await book.get(made.id)).last_outcome == "ok"
    await teams_harness.post(teams, in_group_chat(url, text_="why so many?"))
    run, follow_up = (json.dumps(r["messages"]) for r in fake_model.requests[1:])
    assert "how many flights?" not in run and "336,776" not in run  # forgotten by the reset
    assert "how many carriers fly?" in follow_up and "16 carriers fly." in follow_up


async def test_a_chat_reads_the_datasets_set_for_it_in_its_questions_and_runs(settings, fake_model):
    """DATATHREAD_CHANNEL_DATASETS keyed by a group chat's id: its questions and its scheduled runs read
    those tables only (the test activities gave every chat the general channel's id, so nothing
    showed whether a chat's own entry was met)."""
    narrowed = settings.model_copy(update={"channel_datasets": f"{GROUP}=main.airlines"})
    async with teams_harness.serve_teams(narrowed) as teams:
        url = teams.connector.url
        book = ScheduleBook.from_settings(teams.state.analyst.store, teams.state.settings)
        made = chat_schedule(teams, book, GROUP, "how many flights?")
        await book.add(made)

        def count(table: str) -> dict:
            return tool("query_warehouse", {"sql": f"SELECT count(*) AS n FROM {table}"})

        fake_model.enqueue(
            count("flights"), text("-"), count("airlines"), text("16."), count("flights"), text("-")
        )
        await teams_harness.post(teams, in_group_chat(url, text_="how many flights?"))
        await teams_harness.post(teams, in_group_chat(url, text_="how many airlines?"))
        await run_due(teams, book, made.id)
        asked, allowed, run = (json.dumps(r["messages"][-1]) for r in fake_model.requests[1::2])
        refused = "Table `main.flights` is not allowed. Allowed tables: main.airlines."
        assert refused in asked and refused in run
        assert "Saved 1 row" in allowed and "16" in allowed


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"isGroup": True, "channelData": {"channel": {"id": "19:general@thread.tacv2"}}}, 200),
        ({"isGroup": True, "channelData": {"channel": {"id": GROUP}}}, 400),
        ({"isGroup": True, "members": [{"id": "29:ada"}, {"id": "29:bob"}]}, 400),
        ({"isGroup": False, "members": [{"id": "29:ada"}]}, 200),
    ],
    ids=["channel-thread", "group-chat-as-channel", "group-chat-of-members", "personal-chat"],
)
def test_the_fake_bot_connector_creates_what_teams_creates(params, status):
    """A new channel thread or personal chat is created; a group chat is refused, as Teams refuses it."""
    import httpx

    from tests.fakes.bot_connector import FakeConnector

    connector = FakeConnector().start()
    try:
        response = httpx.post(f"{connector.url}/v3/conversations", json={"bot": {"id": "28:bot"}, **params})
    finally:
        connector.stop()
    assert response.status_code == status
    if status == 400:
        assert response.json()["error"]["code"] == "BadSyntax"
