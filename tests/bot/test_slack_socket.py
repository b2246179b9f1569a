"""`datathread slack --socket` as a newcomer runs it: both tokens are checked against the (fake) Slack
Web API first, a rejected one ends the command with its variable and Slack's reason (exit 2), an
unreachable Slack with one sentence (exit 1); connection states are one line each, never a traceback."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from bot.cli import app
from bot.slack_socket import ConnectionStates
from tests.fakes.slack_api import FakeSlackAPI


@pytest.fixture
def slack_api():
    api = FakeSlackAPI().start()
    yield api
    api.stop()


def socket_mode(tmp_path, api_url: str):
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "SLACK_BOT_TOKEN": "xoxb-socket",
        "SLACK_APP_TOKEN": "xapp-socket",
        "DATATHREAD_SLACK_API_URL": api_url,
        "DATATHREAD_HOME": str(tmp_path / "home"),
    }
    return CliRunner().invoke(app, ["slack", "--socket"], env=env)


@pytest.mark.parametrize(
    ("method", "variable"), [("auth.test", "SLACK_BOT_TOKEN"), ("apps.connections.open", "SLACK_APP_TOKEN")]
)
def test_a_rejected_token_ends_with_its_name_and_slacks_reason(
    method, variable, tmp_path, monkeypatch, slack_api
):
    monkeypatch.chdir(tmp_path)
    slack_api.fail_methods[method] = "invalid_auth"
    result = socket_mode(tmp_path, slack_api.url)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("Slack: checking") and "Traceback" not in result.output
    assert lines[-1] == f"error: Slack rejected {variable} (invalid_auth); it must be " + (
        "a bot token (xoxb-…) of this app."
        if variable == "SLACK_BOT_TOKEN"
        else "an app-level token (xapp-…) of this app."
    )
    assert "connected" not in result.output  # never claims a connection it does not have


def test_an_unreachable_slack_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = socket_mode(tmp_path, "http://127.0.0.1:9/api/")
    assert result.exit_code == 1 and "Could not reach Slack at http://127.0.0.1:9/api/" in result.output
    assert "Traceback" not in result.output


def test_connection_states_are_one_line_per_change():
    said: list[str] = []
    states = ConnectionStates(said.append, {"connected": "up", "retrying": "retrying", "lost": "lost"})
    log = logging.getLogger("test.socket.states")
    log.addHandler(states)
    log.setLevel(logging.INFO)
    try:
        for text in (
            "A new session (s1) has been established",
            "Failed to connect (error: boom); Retrying...",
            "Failed to connect (error: boom); Retrying...",
            "Failed to retrieve WSS URL: invalid_auth",
            "A new session (s2) has been established",
            "The current session (s2) is no longer active. Failed to send a message",
            "unrelated chatter",
            "A new session (s3) has been established",
            "Received CLOSE event from s3. Reconnecting...",  # Slack closed it
            "The session (s3) seems to be already closed. Reconnecting...",
            "A new session (s4) has been established",
            "The session (s4) seems to be stale. Reconnecting... reason: disconnected for 40+ seconds)",
            "The old session (s4) has been abandoned",  # a refresh Slack asked for: routine, no line
            "A new session (s5) has been established",
            # a reconnect that fails: the client says "Reconnecting..." before each new attempt
            "Received CLOSE event from s5. Reconnecting...",
            "Failed to retrieve WSS URL: Slack at 127.0.0.1 did not answer apps.connections.open within 10 s",
            "The session (s5) seems to be already closed. Reconnecting...",  # still retrying: no line
            "Failed to connect (error: ); Retrying...",
            "A new session (s6) has been established",
        ):
            log.info(text)
    finally:
        log.removeHandler(states)
    assert said == [
        "up",
        "retrying",
        "up",
        "lost",
        "up",
        "lost",
        "up",
        "lost",
        "up",
        "lost",
        "retrying",
        "up",
    ]
