"""Replies reach the person where they asked or clicked: a click on a private answer in a channel the
bot is not in, a refusal said in the channel's own words, `reset` in the DM's thread, files the bot
cannot read. Signed requests into `datathread serve`, the fake Slack Web API, the scripted model."""

from __future__ import annotations

import json
import logging

import pytest
import pytest_asyncio

from bot import slack_render as render
from tests.bot.slack_harness import module_settings, serve
from tests.conftest import DEMO_DB_CACHE
from tests.fakes.anthropic_api import text, tool

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    """One `datathread serve` for the module: building the core (sandbox fork server) is the slow part."""
    from core.warehouse import build_demo_database

    home = tmp_path_factory.mktemp("slack") / "home"
    (home / "warehouse").mkdir(parents=True)
    cached = build_demo_database(DEMO_DB_CACHE / "nycflights13.duckdb")
    (home / "warehouse" / "nycflights13.duckdb").write_bytes(cached.read_bytes())
    async with serve(module_settings(home, model.url), slack_api) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    """Each test starts with an empty call log, Slack taking everything and an empty model script."""
    slack_api.clear()
    slack_api.fail_methods.clear()
    with model.lock:
        model.replies.clear()
    yield


def responses(api) -> list[dict]:
    """What went through response_urls (a slash command's or a click's), in order."""
    return [c.args for c in api.calls if c.method.startswith("/response/")]


async def test_buttons_on_a_private_answer_where_the_bot_is_no_member_answer_the_clicker(
    slack, model, caplog
):
    """chat.postEphemeral needs the bot in the channel: a click on a `/ask private` answer there was
    refused (`not_in_channel`), a traceback in the log, and the person saw nothing at all."""
    api = slack.api
    api.fail_methods.update({"chat.postMessage": "not_in_channel", "chat.postEphemeral": "not_in_channel"})
    model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights", "save_as": "n"}),
        text("336,776 flights."),
    )
    await slack.command("private how many flights?", channel="C0042")
    await slack.drain()
    buttons = [e for b in responses(api)[-1]["blocks"] if b["type"] == "actions" for e in b["elements"]]
    turn = next(e["value"] for e in buttons if e["action_id"] == render.ACTION_SHOW_SQL)

    caplog.set_level(logging.WARNING)
    api.clear()
    await slack.click(render.ACTION_SHOW_SQL, turn, channel="C0042", user="U0001")
    await slack.drain()
    [shown] = responses(api)
    assert shown["response_type"] == "ephemeral" and shown["replace_original"] is False
    assert "SELECT count(*) AS n FROM flights" in json.dumps(shown)

    api.clear()
    await slack.click(render.ACTION_FEEDBACK_UP, turn, channel="C0042", user="U0001")
    await slack.drain()
    [thanks] = responses(api)
    assert thanks["response_type"] == "ephemeral" and thanks["text"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
