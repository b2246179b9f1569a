"""An uninstall (Slack) or a removal of the bot (Teams) deletes nothing by itself — a mistaken one must
not lose everything — but its log line names the command that does: `datathread forget --team …`.
Teams' removal was not handled at all (an event nobody looked at)."""

from __future__ import annotations

import json
import logging

from bot.slack_revoked import on_revoked
from tests.bot.teams_harness import BOT, CHAT, activity
from tests.fakes.anthropic_api import text


def test_slacks_uninstall_names_the_forget_command(caplog):
    with caplog.at_level(logging.ERROR, logger="datathread.slack"):
        on_revoked({"team_id": "T0001"}, {"type": "app_uninstalled"})
    [line] = caplog.messages
    assert "`datathread forget --team T0001` removes its data" in line


async def test_teams_removal_names_the_forget_command(teams, fake_model, caplog):
    store = teams.state.analyst.store
    fake_model.enqueue(text("Noted."))
    await teams.say("remember 42", conversation=CHAT)  # something that a deletion would take
    [turn] = await store.list_turns()
    body = activity(teams.connector.url, conversation=CHAT)
    body.update(type="conversationUpdate", membersRemoved=[BOT])
    body.pop("text", None)
    with caplog.at_level(logging.WARNING, logger="datathread.teams"):
        assert (await teams.post(body)).status_code == 200
    [line] = [m for m in caplog.messages if "removed" in m]
    assert f"`datathread forget --channel {CHAT}`" in line and "`datathread forget --team tenant-1`" in line
    assert await store.list_turns() == [turn]  # nothing was deleted: the history and the record stay
    assert "remember 42" in json.dumps(await store.load_history(turn["session_id"]))


async def test_teams_uninstall_names_the_forget_command(teams, caplog):
    body = activity(teams.connector.url, conversation=CHAT)
    body.update(type="installationUpdate", action="remove")
    with caplog.at_level(logging.WARNING, logger="datathread.teams"):
        assert (await teams.post(body)).status_code == 200
    assert any("`datathread forget --team tenant-1`" in m for m in caplog.messages)
