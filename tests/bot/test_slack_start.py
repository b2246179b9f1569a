"""Slack at `datathread serve`'s start, as someone setting it up the first time meets it: a bot token
Slack rejects stops `serve` in one sentence before anything starts; an unreachable Slack is one
warning line and `serve` starts anyway; and no ack ever waits on Slack's Web API (Bolt asked
`auth.test` inside the first request, so a slow Slack held that first 200 for up to 30 s).
Real `serve` subprocesses and the real app under uvicorn, against the fake Slack Web API on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot import slack_identity
from tests.bot.serve_harness import Replica
from tests.bot.slack_harness import mention, serve
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import free_port

DATATHREAD = str(Path(sys.executable).parent / "datathread")
TOKEN = SecretStr("xoxb-any")
CHECKING = "Slack: checking SLACK_BOT_TOKEN…"  # said first: a silent Slack keeps the check 10 s


def serve_env(home: Path, slack_url: str, model_url: str = "http://127.0.0.1:9") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DATATHREAD_", "AWS_"))}
    env.update(
        ANTHROPIC_API_KEY="sk-ant-test-key-000000",
        ANTHROPIC_BASE_URL=model_url,
        DATATHREAD_HOME=str(home),
        DATATHREAD_TURN_WORKERS="0",  # the check is the web process's; no worker needed
        DATATHREAD_SLACK_API_URL=slack_url,
        SLACK_BOT_TOKEN="xoxb-wrong-token",
        SLACK_SIGNING_SECRET="test-signing-secret",
    )
    return env


@pytest.mark.parametrize("reason", ["invalid_auth", "not_authed"])
def test_serve_stops_at_start_on_a_bot_token_slack_rejects(reason, api, tmp_path):
    api.fail_methods["auth.test"] = reason
    port = str(free_port())
    result = subprocess.run(
        [DATATHREAD, "serve", "--port", port, "--log-level", "WARNING"],
        env=serve_env(tmp_path / "home", api.url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,  # it used to start and serve on
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        CHECKING,
        f"error: Slack rejected SLACK_BOT_TOKEN ({reason}); it must be a bot token (xoxb-…) of this app.",
    ]
    assert api.methods() == ["auth.test"]


def test_serve_starts_when_slack_is_unreachable_and_says_so_in_one_line(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}/api/"  # nothing listens: refused at once
    replica = Replica(serve_env(tmp_path / "home", closed), tmp_path)
    try:
        replica.wait_ready(timeout=120)
        lines = replica.log.read_text().splitlines()
    finally:
        replica.stop()
    said = [line for line in lines if "SLACK_BOT_TOKEN" in line]
    assert said == [
        CHECKING,
        f"warning: SLACK_BOT_TOKEN not checked: Could not reach Slack at {closed} (ClientConnectorError); "
        "check the network or DATATHREAD_SLACK_API_URL. Serving anyway.",
    ], lines
    assert not any("Traceback" in line for line in lines), lines


async def test_the_token_check_gives_up_on_a_slack_that_never_answers(settings, monkeypatch):
    monkeypatch.setattr(slack_identity, "TOKEN_CHECK_TIMEOUT_S", 0.5)
    hole = BlackHole().start()
    try:
        checked = settings.model_copy(update={"slack_api_url": hole.url + "/api/", "slack_bot_token": TOKEN})
        warned: list[str] = []
        started = time.monotonic()
        assert await slack_identity.bot_token_problem(checked, warned.append) is None
        assert time.monotonic() - started < 3
    finally:
        hole.stop()
    assert len(warned) == 2 and warned[0] == CHECKING, warned
    assert "TimeoutError" in warned[1] and warned[1].endswith("Serving anyway."), warned


@pytest.mark.parametrize("reason", ["ratelimited", "internal_error"])
async def test_slacks_own_trouble_at_start_is_not_a_rejected_token(reason, settings, api):
    api.fail_methods["auth.test"] = reason
    checked = settings.model_copy(update={"slack_api_url": api.url, "slack_bot_token": TOKEN})
    warned: list[str] = []
    assert await slack_identity.bot_token_problem(checked, warned.append) is None
    assert len(warned) == 2 and warned[0] == CHECKING and f"(it answered {reason})" in warned[1], warned


async def test_the_first_ack_does_not_wait_for_a_slow_slack(settings, api, fake_model):
    """auth.test takes 5 s; the first mention is acked at once, and answered: the bot's own mention is
    stripped with the bot user the signed event names, so `@datathread help` is answered without the
    model. No ack asked Slack who the bot is; the turn, after the ack, asks once whose installation this
    is (bot/slack_access.py: nothing checked it at start here, as on Modal), and waits for the answer."""
    api.latency_s["auth.test"] = 5
    async with serve(settings, api) as slack:
        started = time.monotonic()
        resp = await slack.event(mention("help", ts="1700000001.000100"))
        acked = time.monotonic() - started
        assert resp.status_code == 200
        await slack.drain()
    assert acked < 3.0, f"the ack took {acked:.1f} s"  # Slack's own limit; auth.test alone takes 5 s
    assert len(api.of("auth.test")) == 1  # from the job, after the ack
    assert not fake_model.requests  # `help` was recognised: the mention was stripped
    assert any("I answer questions about your data" in shown for shown in api.shown()), api.shown()


async def test_a_web_page_at_slacks_address_is_not_a_rejected_token(settings):
    """A proxy's login page (200, HTML) at DATATHREAD_SLACK_API_URL was "Slack rejected SLACK_BOT_TOKEN
    (rejected)": people replaced a good token; `slack --socket` and doctor stopped on it (exit 2)."""
    from tests.fakes.web_page import WebPage

    page = WebPage().start()
    try:
        checked = settings.model_copy(update={"slack_api_url": page.url + "/api/", "slack_bot_token": TOKEN})
        warned: list[str] = []
        assert await slack_identity.bot_token_problem(checked, warned.append) is None  # serves anyway
    finally:
        page.stop()
    assert "not a Slack reply" in warned[1] and "DATATHREAD_SLACK_API_URL" in warned[1], warned
    assert "rejected" not in warned[1]
