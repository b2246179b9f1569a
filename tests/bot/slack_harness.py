"""Test harness for the Slack surface: the real ASGI app under uvicorn on loopback, signed requests,
and a fake Slack Web API recording what the bot sends."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest_asyncio
import uvicorn
from pydantic import SecretStr

from bot.server import create_app
from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID, FakeSlackAPI

SECRET = "test-signing-secret-123456"
_ids = itertools.count(1)


def sign(body: str, *, ts: int | None = None, secret: str = SECRET) -> dict:
    """Slack's v0 request signature (https://docs.slack.dev/authentication/verifying-requests-from-slack)."""
    stamp = str(ts if ts is not None else int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def event_body(event: dict, *, event_id: str | None = None) -> dict:
    return {
        "token": "legacy",
        "team_id": TEAM_ID,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_ids):05d}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
        "event": event,
    }


def mention(text: str, *, ts: str, channel: str = "C0001", thread_ts: str | None = None) -> dict:
    event = {"type": "app_mention", "user": "U0001", "text": f"<@{BOT_USER_ID}> {text}", "ts": ts}
    event.update({"channel": channel, "event_ts": ts, "team": TEAM_ID})
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message(text: str, *, ts: str, channel: str = "C0001", thread_ts: str | None = None, **extra) -> dict:
    event = {"type": "message", "user": "U0001", "text": text, "ts": ts, "channel": channel}
    event.update({"event_ts": ts, "channel_type": "channel", "team": TEAM_ID, **extra})
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


@dataclass
class Harness:
    http: httpx.AsyncClient
    state: object
    api: FakeSlackAPI

    async def event(self, event: dict, *, event_id: str | None = None, headers: dict | None = None):
        body = json.dumps(event_body(event, event_id=event_id))
        h = {"content-type": "application/json", **sign(body), **(headers or {})}
        return await self.http.post("/slack/events", content=body, headers=h)

    async def form(self, fields: dict, *, headers: dict | None = None):
        body = urlencode(fields)
        h = {"content-type": "application/x-www-form-urlencoded", **sign(body), **(headers or {})}
        return await self.http.post("/slack/events", content=body, headers=h)

    async def command(self, text: str, *, channel: str = "C0001", user: str = "U0001"):
        fields = {"command": "/ask", "text": text, "team_id": TEAM_ID, "channel_id": channel}
        response_url = self.api.url.removesuffix("api/") + f"response/{next(_ids)}"  # on the fake, recorded
        fields.update({"user_id": user, "response_url": response_url, "trigger_id": "t.1"})
        return await self.form(fields)

    async def click(
        self,
        action_id: str,
        value: str,
        *,
        channel: str = "C0001",
        thread_ts: str = "",
        user: str = "U0002",
        ephemeral: bool = False,
    ):
        """Click a button; `ephemeral`: on a message only the clicker sees (Slack then sends no
        `message`, and the container says `is_ephemeral`)."""
        action = {"action_id": action_id, "value": value, "type": "button", "block_id": "b"}
        return await self._act(action, channel=channel, thread_ts=thread_ts, user=user, ephemeral=ephemeral)

    async def select(
        self, action_id: str, value: str, *, channel: str = "C0001", thread_ts: str = "", user: str = "U0002"
    ):
        """Pick the option with `value` in a static_select menu (Slack sends `selected_option`)."""
        option = {"text": {"type": "plain_text", "text": value}, "value": value}
        action = {"action_id": action_id, "type": "static_select", "block_id": "b", "selected_option": option}
        return await self._act(action, channel=channel, thread_ts=thread_ts, user=user)

    async def _act(self, action: dict, *, channel: str, thread_ts: str, user: str, ephemeral: bool = False):
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM_ID},
            "user": {"id": user},
            "response_url": self.api.url.removesuffix("api/") + f"response/{next(_ids)}",
            "api_app_id": "A0001",
            "trigger_id": "t.2",
            "container": {
                "type": "message",
                "channel_id": channel,
                "message_ts": "9.9",
                "thread_ts": thread_ts,
            },
            "channel": {"id": channel},
            "message": {"ts": "9.9", "thread_ts": thread_ts},
            "actions": [action],
        }
        if ephemeral:
            payload["container"]["is_ephemeral"] = True
            del payload["message"]
        return await self.form({"payload": json.dumps(payload)})

    async def drain(self) -> None:
        """Wait for every job the events started. A job still running after the timeout is a failure,
        not a silent wait: a job that waits on the test (a confirmation nobody clicked yet) would
        otherwise cost the whole timeout."""
        await self.state.runner.drain(timeout=60)
        assert not self.state.runner.tasks, f"jobs still running after 60 s: {self.state.runner.tasks}"


def demo_home(tmp_path_factory) -> Path:
    """A module's DATATHREAD_HOME holding the demo warehouse, copied from the session's cached build."""
    from core.warehouse import build_demo_database
    from tests.conftest import DEMO_DB_CACHE

    home = tmp_path_factory.mktemp("slack") / "home"
    (home / "warehouse").mkdir(parents=True)
    cached = build_demo_database(DEMO_DB_CACHE / "nycflights13.duckdb")
    (home / "warehouse" / "nycflights13.duckdb").write_bytes(cached.read_bytes())
    return home


def module_settings(home, model_url: str, **extra):
    """Settings for a module's own `serve`: the scripted model, a real sandbox, turns in process."""
    from core.config import load_settings

    return load_settings(
        _env_file=None,
        anthropic_api_key="sk-ant-test-key-000000",
        anthropic_base_url=model_url,
        home=home,
        step_timeout=20,
        model="claude-test",
        turn_workers=0,  # in-process turns, like the shared settings fixture
        **extra,
    )


def served_once(name: str):
    """A module's one served app (module scope, under its own home `name`), which its tests share with
    the module's `model` and `slack_api`; each test starts from `fresh_fakes`."""

    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def slack(tmp_path_factory, model, slack_api):
        settings = module_settings(tmp_path_factory.mktemp(name) / "home", model.url, model_retries=0)
        async with serve(settings, slack_api) as harness:
            yield harness

    return slack


def fresh_fakes(slack_api: FakeSlackAPI, model) -> None:
    """Before (and after) each test of a module sharing one served app: the fakes as new."""
    slack_api.reset()
    with model.lock:
        model.replies.clear()
    model.token_delay_s = 0.0


@contextlib.asynccontextmanager
async def serve(
    settings, api: FakeSlackAPI, identity: dict | None = None, token: str = "xoxb-test-token-000000"
):
    """`datathread serve` in this event loop on a free loopback port, configured for the fake Slack;
    `identity`: what `serve`'s start-up `auth.test` said (None: as when Slack could not be reached);
    `token`: SLACK_BOT_TOKEN."""
    settings = settings.model_copy(
        update={
            "slack_bot_token": SecretStr(token),
            "slack_signing_secret": SecretStr(SECRET),
            "slack_api_url": api.url,
        }
    )
    app = create_app(settings, slack_identity=identity)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        # A connection per request: a kept-alive one that uvicorn closed after its 5 s idle limit, as a
        # new request went out on it, failed that request with ReadError on a loaded machine.
        fresh = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=fresh) as http:
            yield Harness(http=http, state=app.state.datathread, api=api)
    finally:
        server.should_exit = True
        await task


def said(api: FakeSlackAPI, needle: str) -> int:
    """How many messages people see carry `needle` in their text or blocks (a stream counts once, joined)."""
    return sum(needle in shown for shown in api.shown())


async def until(predicate, timeout: float = 300) -> None:
    """Generous: a killed worker's replacement builds its core and fork server on a loaded 2-core host."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def confirm_buttons(api: FakeSlackAPI) -> list[dict]:
    """The Create/Cancel buttons once the job has posted them (it runs after the ack)."""
    for _ in range(400):
        for call in api.of("chat.postEphemeral"):
            for block in call.args.get("blocks") or []:
                if block.get("type") == "actions":
                    return block["elements"]
        await asyncio.sleep(0.05)
    raise AssertionError("no confirmation was posted")
