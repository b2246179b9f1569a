"""The bot is removed from the channel (or the channel archived) while it answers: from then on Slack
refuses every message into the channel. Signed events into `datathread serve`, the real slack_sdk
against the fake Slack Web API refusing as Slack does, the scripted Messages API counting calls."""

from __future__ import annotations

import json
import logging

import pytest

from tests.bot.slack_harness import fresh_fakes, mention, served_once
from tests.fakes.anthropic_api import text, tool

pytestmark = pytest.mark.asyncio(loop_scope="module")


slack = served_once("slack-removed")


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    fresh_fakes(slack_api, model)
    yield
    fresh_fakes(slack_api, model)


def dms(slack) -> list[dict]:
    return [c.args for c in slack.api.of("chat.postMessage") if c.args.get("channel") == "U0001"]


@pytest.mark.parametrize(
    "code, streaming, said",
    [
        ("not_in_channel", True, "I was removed from <#C0R1> before I could answer what you asked there"),
        ("is_archived", True, "<#C0R1> was archived before I could answer what you asked there"),
        ("not_in_channel", False, "I was removed from <#C0R1> before I could answer what you asked there"),
    ],
    ids=["removed-streaming", "archived-streaming", "removed-fallback"],
)
async def test_an_answer_the_channel_no_longer_takes_comes_to_the_asker_as_a_dm(
    slack, model, code, streaming, said
):
    """Removed mid-turn: every later post was refused, the stream never closed, and the answer was lost
    after the model had run. Now the asker gets a DM saying why, and the answer follows there."""
    slack.api.refuse_streaming = not streaming

    def removed_now(body: dict) -> dict:
        slack.api.refused_in["C0R1"] = code
        return text("UA flew the most; EWR was busiest.")

    model.enqueue(tool("list_tables"), removed_now)
    ts = f"70{len(code)}.{int(streaming)}"
    await slack.event(mention("which carrier and which airport?", ts=ts, channel="C0R1"))
    await slack.drain()
    [why, answer] = dms(slack)
    assert why["text"] == f"{said}, so the answer comes here."
    assert "UA flew the most; EWR was busiest." in json.dumps(answer)
    assert "actions" not in [b["type"] for b in answer.get("blocks", [])]  # no buttons in a DM
    assert "model calls" in json.dumps(answer)  # its receipt stays
    assert not [s for s in slack.api.shown() if "Please ask again" in s]


async def test_where_the_dm_is_refused_too_the_turn_stops_at_its_next_model_call(slack, model, caplog):
    """Nobody can be told: the turn stops before it pays for more, as when that is found at its start."""
    asked = len(model.requests)

    def removed_now(body: dict) -> dict:
        slack.api.refused_in.update({"C0R2": "not_in_channel", "U0001": "cannot_dm_bot"})
        return tool("describe_table", {"table": "airlines"})

    model.enqueue(tool("list_tables"), removed_now, text("Nobody will see this."))
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        await slack.event(mention("how many airlines?", ts="710.1", channel="C0R2"))
        await slack.drain()
    assert len(model.requests) == asked + 2  # not the third
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert (
        "slack: U0001 in C0R2 gets no answer: Slack refuses my messages there (not_in_channel) and my DM "
        "(cannot_dm_bot); stopping the turn" in said
    ), said
