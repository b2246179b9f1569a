"""Slack takes none of the bot's messages: its token revoked, the app uninstalled, or installed without
a scope the answer needs. Signed events into `datathread serve`, the real slack_sdk against the fake
Slack Web API refusing as Slack does; the scripted Messages API counts what the turns paid for."""

from __future__ import annotations

import logging

import pytest

from tests.bot.slack_harness import fresh_fakes, mention, message, serve, served_once
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import BOT_ID, BOT_USER_ID, MANIFEST_SCOPES, TEAM_ID

pytestmark = pytest.mark.asyncio(loop_scope="module")


slack = served_once("slack-locked")


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    fresh_fakes(slack_api, model)
    yield
    fresh_fakes(slack_api, model)


def said(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "datathread.slack" and r.levelno == level]


@pytest.mark.parametrize("code", ["token_revoked", "invalid_auth", "account_inactive"])
async def test_a_token_slack_refuses_stops_each_turn_before_the_model_with_one_error(
    slack, model, caplog, code
):
    """Every call refused `token_revoked` (the app uninstalled, or its token rotated): three questions
    made six model calls and ran their queries, every answer lost, one WARNING each. Now no model call,
    and one ERROR per question that says to reinstall the app."""
    slack.api.refuse = lambda method, args: code
    n = ["token_revoked", "invalid_auth", "account_inactive"].index(code)
    asked = len(model.requests)
    model.enqueue(*[r for _ in range(2) for r in (tool("list_tables"), text("16 airlines."))])
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        await slack.event(mention("how many airlines?", ts=f"50{n}.1", channel="C0L1"))
        await slack.event(mention("and airports?", ts=f"50{n}.2", channel="C0L1"))
        await slack.drain()
    assert len(model.requests) == asked  # nothing paid for
    errors = said(caplog, logging.ERROR)
    assert len(errors) == 2 and all(f"Slack refuses the bot token ({code})" in e for e in errors), errors
    assert all("Reinstall the app and set SLACK_BOT_TOKEN" in e for e in errors)
    assert errors[0].startswith("slack: U0001 in C0L1 gets no answer, stopping the turn: ")
    assert not said(caplog, logging.WARNING), said(caplog, logging.WARNING)  # the ERROR is the one line


@pytest.mark.parametrize(
    ("update", "team"),
    [({"allow_guests": False}, TEAM_ID), ({}, "T0GLOBEX")],
    ids=["guests-refused", "placed-elsewhere"],
)
async def test_a_refused_token_is_not_an_unconfirmed_person_when_users_info_is_asked(
    settings, fake_model, slack_api, caplog, update, team
):
    """`users.info` is asked of everyone when guests are refused, and of someone the event places in
    another workspace. Refused `token_revoked` there, the person was "unconfirmed": a WARNING per
    turn, and an "I couldn't confirm" refusal that Slack would not take either — never the ERROR that
    says to reinstall. Now the turn goes on to its first post, which stops it with that ERROR."""
    slack_api.refuse = lambda method, args: "token_revoked"
    identity = {"team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID}  # checked at start
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        async with serve(settings.model_copy(update=update), slack_api, identity=identity) as slack:
            event = {**mention("how many airlines?", ts="530.1", channel="C0L3"), "team": team}
            await slack.event({**event, "user_team": team})
            await slack.drain()
    assert not fake_model.requests
    [error] = said(caplog, logging.ERROR)
    assert "Slack refuses the bot token (token_revoked)" in error and "Reinstall the app" in error, error
    assert not said(caplog, logging.WARNING), said(caplog, logging.WARNING)
    assert not [c for c in slack_api.calls if "couldn't confirm" in str(c.args)]


async def test_an_app_without_chat_write_stops_each_turn_and_names_the_scope(slack, model, caplog):
    """Reinstalled after a manifest change without `chat:write`: the turn ran, its answer was refused
    `missing_scope`, and no log line named the scope Slack said it needed. Now the turn stops before the
    model, and the ERROR names the scope to add; once it is back, the thread is answered."""
    slack.api.scopes = "app_mentions:read,channels:history,commands,files:read,groups:history,users:read"
    asked = len(model.requests)
    model.enqueue(text("336,776 flights."))
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        await slack.event(mention("how many flights?", ts="510.1", channel="C0L2"))
        await slack.drain()
    assert len(model.requests) == asked
    [error] = said(caplog, logging.ERROR)
    assert "Slack refuses chat.postMessage: the app lacks the `chat:write` scope" in error, error
    assert "reinstall" in error
    slack.api.scopes = MANIFEST_SCOPES
    await slack.event(message("how many flights?", ts="510.2", thread_ts="510.1", channel="C0L2"))
    await slack.drain()
    assert "336,776 flights." in "".join(slack.api.shown())


@pytest.mark.parametrize(
    "event",
    [
        {"type": "app_uninstalled"},
        {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT"]}},
    ],
    ids=["app_uninstalled", "tokens_revoked"],
)
async def test_slacks_word_that_the_app_was_uninstalled_is_an_error_in_the_log(slack, caplog, event):
    """Slack says so before the calls start failing; the log said "an event of type 'app_uninstalled'
    no listener handles, ignored" at INFO."""
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        resp = await slack.event({**event, "event_ts": "520.1"})
        await slack.drain()
    assert resp.status_code == 200
    [error] = said(caplog, logging.ERROR)
    assert "in workspace T0001" in error and "until the app is reinstalled" in error, error
    assert not [m for m in said(caplog, logging.INFO) if "no listener handles" in m]
