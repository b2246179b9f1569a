"""`reset` in a direct chat deletes what it says it deletes: the old conversation's history and its
files (workspace, attachment copies). It said "earlier questions here are forgotten" and only moved on
to a new session, leaving the old history (with whatever was said in it) and files for 30 days. The
turn records stay: the operator's audit trail, with their own TTL, which the sentence names."""

from __future__ import annotations

import json

import pytest

from core.help import fresh_start
from tests.bot.slack_harness import message, serve
from tests.bot.teams_harness import CHAT
from tests.fakes.anthropic_api import text, tool
from tests.fakes.redis_server import RedisServer
from tests.fakes.slack_api import FakeSlackAPI

EMAIL = "jane.doe@example.com"
CODE = f"open('private.csv', 'w').write('who,salary\\n{EMAIL},99000\\n'); print('ok')"


@pytest.fixture(params=["sqlite", "redis"])
def on_store(request, settings):
    if request.param == "sqlite":
        yield settings
        return
    server = RedisServer().start()
    try:
        yield settings.model_copy(update={"redis_url": server.url})
    finally:
        server.stop()


async def test_slack_dm_reset_deletes_the_old_history_and_files(on_store, fake_model):
    settings = on_store
    api = FakeSlackAPI().start()
    dm = {"channel": "D0001", "channel_type": "im"}
    try:
        async with serve(settings, api) as h:
            store = h.state.analyst.store
            fake_model.enqueue(tool("run_python", {"code": CODE}), text(f"Saved: {EMAIL} earns 99000."))
            await h.event(message(f"note my salary: 99000, {EMAIL}", ts="100.1", **dm))
            await h.drain()
            [turn] = await store.list_turns()
            old = turn["session_id"]
            workspace = settings.workspaces_dir / old
            assert (workspace / "private.csv").exists() and EMAIL in json.dumps(await store.load_history(old))
            attachments = settings.home.resolve() / "attachments" / old  # as the terminal keeps its copies
            attachments.mkdir(parents=True)
            (attachments / "chart.png").write_bytes(b"png")

            await h.event(message("reset", ts="100.2", **dm))
            await h.drain()
            said = api.of("chat.postMessage")[-1].args["text"]
            assert said == fresh_start(settings.audit_ttl_days)
            assert "deleted this conversation's history and files" in said and "90 days" in said
            assert await store.load_history(old) == [] and await store.get_meta(old) is None
            assert not workspace.exists() and not attachments.exists()
            assert [t["turn_id"] for t in await store.list_turns(session_id=old)] == [turn["turn_id"]]

            fake_model.enqueue(text("Nothing from before."))  # the next message: a new conversation
            await h.event(message("what did I tell you?", ts="100.3", **dm))
            await h.drain()
            assert EMAIL not in json.dumps(fake_model.requests[-1]["messages"])
    finally:
        api.stop()


async def test_teams_chat_reset_deletes_the_old_history(teams, fake_model):
    store = teams.state.analyst.store
    fake_model.enqueue(text(f"Noted, {EMAIL}."))
    await teams.say(f"remember {EMAIL}", conversation=CHAT)
    [turn] = await store.list_turns()
    assert EMAIL in json.dumps(await store.load_history(turn["session_id"]))
    said = await teams.say("reset", conversation=CHAT)
    assert said[-1]["text"] == fresh_start(teams.state.settings.audit_ttl_days)
    assert await store.load_history(turn["session_id"]) == []
    assert len(await store.list_turns(session_id=turn["session_id"])) == 1


def test_the_sentence_says_how_long_the_audit_keeps_questions():
    assert "for 7 days" in fresh_start(7)
    assert "until an admin deletes them" in fresh_start(0)  # DATATHREAD_AUDIT_TTL_DAYS=0: for ever
