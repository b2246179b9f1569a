"""`help` on every surface is routed to the core's local answer (core/help.py): the tables the
conversation sees and example questions, with no model request — `/ask help` and an empty mention in
Slack, `help` in Teams."""

from __future__ import annotations

import json

from tests.bot.slack_harness import mention, serve
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackAPI


async def test_slack_ask_help_and_an_empty_mention_answer_locally(settings, fake_model):
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as slack:
            resp = await slack.command("help")
            assert resp.status_code == 200
            await slack.drain()
            await slack.event(mention("", ts="500.1"))
            await slack.drain()
    finally:
        api.stop()
    posted = json.dumps([c.args for c in api.calls])
    assert posted.count("Tables I can see") == 2 and "`flights`" in posted and "Which carriers" in posted
    assert f"<@{BOT_USER_ID}>" not in posted
    assert fake_model.requests == []


async def test_teams_help_answers_locally(teams, fake_model):
    sent = await teams.say("help")
    shown = json.dumps(sent, ensure_ascii=False)
    assert "Tables I can see" in shown and "`weather`" in shown and "in a chat, `new` starts over" in shown
    assert fake_model.requests == []
