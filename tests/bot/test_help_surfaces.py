"""`help` on every surface is routed to the core's local answer (core/help.py): the tables the
conversation sees and example questions, with no model request — `/ask help` and an empty mention in
Slack, `help` in Teams."""

from __future__ import annotations

import json

from tests.bot.slack_harness import mention, message, serve
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import BOT_USER_ID, FakeSlackAPI


async def test_slack_ask_help_and_an_empty_mention_answer_locally(settings, fake_model):
    """Help is for the person: `/ask help` posted "<@U…> asked: help" in the channel first. Help has no
    receipt and no buttons (they could only say "I no longer have the details of that answer"). And the
    thread a mention's help opened is one datathread answered: a reply there without a mention went
    unanswered, in silence — the most natural first contact (mention it, read help, ask in the thread)."""
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as slack:
            resp = await slack.command("help")
            assert resp.status_code == 200
            await slack.drain()
            assert not [c for c in api.of("chat.postMessage") if "asked: help" in json.dumps(c.args)]
            await slack.event(mention("", ts="500.1"))
            await slack.drain()
            helped = api.of("chat.stopStream")[-1].args
            assert not helped.get("blocks"), helped  # no receipt line, no buttons
            fake_model.enqueue(text("EWR had 120,835."))
            follow_up = message("and EWR?", ts="500.2", thread_ts="500.1")
            await slack.event(follow_up)
            await slack.drain()
    finally:
        api.stop()
    posted = json.dumps([c.args for c in api.calls])
    privately = [c for c in api.calls if c.method.startswith("/response/")]  # the command's response_url
    assert len(privately) == 1 and "Tables I can see" in json.dumps(privately[0].args)
    assert "Tables I can see" in "".join(api.shown())  # the mention's, streamed in its thread
    assert "`flights`" in posted and "Which carriers" in posted
    assert f"<@{BOT_USER_ID}>" not in posted
    assert len(fake_model.requests) == 1 and "EWR had 120,835." in "".join(api.shown())  # the follow-up


async def test_teams_help_answers_locally(teams, fake_model):
    sent = await teams.say("help")
    shown = json.dumps(sent, ensure_ascii=False)
    assert "Tables I can see" in shown and "`weather`" in shown and "in a chat, `new` starts over" in shown
    assert fake_model.requests == []
    assert not [a for m in sent for a in m.get("attachments") or []]  # no answer card: no actions to offer
