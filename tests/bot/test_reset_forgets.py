"""`reset` in a direct chat deletes what it says it deletes: the old conversation's history and its
files (workspace, attachment copies). It said "earlier questions here are forgotten" and only moved on
to a new session, leaving the old history (with whatever was said in it) and files for 30 days. The
turn records stay: the operator's audit trail, with their own TTL, which the sentence names."""

from __future__ import annotations

import json

import pytest

from core.help import fresh_start
from tests.bot.slack_harness import message, serve
from tests.bot.teams_harness import CHAT, THREAD
from tests.fakes.anthropic_api import text, tool
from tests.fakes.redis_server import RedisServer
from tests.fakes.slack_api import FakeSlackAPI

EMAIL = "jane.doe@example.com"
GROUP_CHAT = "19:a1b2c3d4e5f6@thread.v2"  # a group chat's id, as Teams shapes it
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
            assert said == fresh_start(settings)
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
    assert said[-1]["text"] == fresh_start(teams.state.settings)
    assert await store.load_history(turn["session_id"]) == []
    assert len(await store.list_turns(session_id=turn["session_id"])) == 1


def test_the_sentence_says_how_long_the_audit_keeps_questions(settings):
    assert "for 7 days" in fresh_start(settings.model_copy(update={"audit_ttl_days": 7}))
    forever = settings.model_copy(update={"audit_ttl_days": 0})  # DATATHREAD_AUDIT_TTL_DAYS=0
    assert "until an admin deletes them" in fresh_start(forever)


@pytest.mark.parametrize("conversation", [THREAD, GROUP_CHAT])
async def test_a_shared_teams_conversation_starts_afresh_and_deletes_nothing(teams, fake_model, conversation):
    """A channel's thread or a group chat is everyone's in it, and any member may type `reset`: it
    deleted the shared history for all. Only a personal chat's reset deletes."""
    store = teams.state.analyst.store
    fake_model.enqueue(text(f"Noted, {EMAIL}."))
    await teams.say(f"remember {EMAIL}", conversation=conversation)
    [turn] = await store.list_turns()
    said = (await teams.say("reset", conversation=conversation))[-1]["text"]
    assert said == fresh_start(teams.state.settings, deleted=False)
    assert "Nothing was deleted" in said and "I've deleted" not in said
    assert EMAIL in json.dumps(await store.load_history(turn["session_id"]))  # kept, to its TTL
    fake_model.enqueue(text("Nothing from before."))  # yet it starts afresh
    await teams.say("what did I tell you?", conversation=conversation)
    assert EMAIL not in json.dumps(fake_model.requests[-1]["messages"])
