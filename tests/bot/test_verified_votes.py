"""👍 and 👎 through the real Slack and Teams paths: a 👍 saves a verified query that the next close
question's first model request carries; a 👎 asks what was wrong and the reply is recorded."""

from __future__ import annotations

import json

import pytest

from bot import slack_blocks
from core.verified import ASK_WHAT_WAS_WRONG_TEAMS, SAVED
from tests.bot.slack_harness import mention, message, serve
from tests.bot.teams_harness import THREAD
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import FakeSlackAPI

JFK = "SELECT count(*) AS flights FROM flights WHERE origin = 'JFK'"


def first_request_of(model, question: str) -> dict:
    return next(
        r for r in model.requests if r["messages"][-1]["content"][0].get("text", "").endswith(question)
    )


@pytest.fixture
async def slack(settings):
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as harness:
            yield harness
    finally:
        api.stop()


async def test_slack_votes_feed_verified_queries_and_corrections(slack, fake_model):
    fake_model.enqueue(tool("query_warehouse", {"sql": JFK, "save_as": "jfk"}), text("111,279 flights."))
    await slack.event(mention("How many flights left JFK in 2013?", ts="300.1"))
    await slack.drain()
    (turn,) = await slack.state.analyst.store.list_turns()

    await slack.click(slack_blocks.ACTION_FEEDBACK_UP, turn["turn_id"], thread_ts="300.1", user="U0002")
    await slack.drain()
    thanks = slack.api.of("chat.postEphemeral")[-1].args
    assert thanks["user"] == "U0002" and "saved this as a verified query" in json.dumps(thanks)
    (verified,) = await slack.state.analyst.verified.queries()
    assert (verified.sql, verified.verified_by) == (JFK, "U0002")

    fake_model.enqueue(text("Same again."))
    await slack.event(mention("how many flights departed JFK in 2013", ts="301.1"))
    await slack.drain()
    blocks = first_request_of(fake_model, "how many flights departed JFK in 2013")["messages"][-1]["content"]
    assert JFK in blocks[1]["text"] and "verified by U0002" in blocks[1]["text"]

    second = (await slack.state.analyst.store.list_turns())[-1]
    await slack.click(slack_blocks.ACTION_FEEDBACK_DOWN, second["turn_id"], thread_ts="301.1", user="U0002")
    await slack.drain()
    assert "What was wrong?" in json.dumps(slack.api.of("chat.postEphemeral")[-1].args)
    fake_model.enqueue(text("Counting departed flights only: 109,079."))
    await slack.event(message("count only departed flights", ts="301.2", thread_ts="301.1", user="U0002"))
    await slack.drain()
    (correction,) = await slack.state.analyst.verified.corrections()
    assert (correction.text, correction.by, correction.turn_id) == (
        "count only departed flights",
        "U0002",
        second["turn_id"],
    )


async def test_teams_votes_feed_verified_queries_and_corrections(teams, fake_model):
    fake_model.enqueue(tool("query_warehouse", {"sql": JFK, "save_as": "jfk"}), text("111,279 flights."))
    sent = await teams.say("How many flights left JFK in 2013?")
    actions = {a["title"]: a.get("data") for a in sent[-1]["attachments"][0]["content"]["actions"]}
    answer_id = teams.connector.id_of(sent[-1])
    # the vote's sentence is on the answer's card, edited in place, not a message for the whole channel
    assert await teams.say("", value=actions["👍 Helpful"]) == []
    assert teams.connector.updates()[-1].activity_id == answer_id
    assert SAVED in json.dumps(teams.connector.updates()[-1].body, ensure_ascii=False)
    (verified,) = await teams.state.analyst.verified.queries()
    assert verified.sql == JFK

    fake_model.enqueue(text("Same again."))
    await teams.say("how many flights departed JFK in 2013", conversation=THREAD + "2")
    blocks = first_request_of(fake_model, "how many flights departed JFK in 2013")["messages"][-1]["content"]
    assert JFK in blocks[1]["text"]

    # Teams delivers replies in a channel only with an @-mention: it said "Reply in this thread"
    assert await teams.say("", value=actions["👎 Not helpful"]) == []
    assert ASK_WHAT_WAS_WRONG_TEAMS in json.dumps(teams.connector.updates()[-1].body, ensure_ascii=False)
    fake_model.enqueue(text("Noted; departed flights only."))
    await teams.say("it should count departed flights only")
    (correction,) = await teams.state.analyst.verified.corrections()
    assert correction.text == "it should count departed flights only" and correction.sql == JFK
