"""What `POST /slack/events` (and `POST /api/messages`) does with requests that are not Slack's (or
Teams'): strangers' garbage, bad timestamps, signed bodies of the wrong shape, and bodies far too big.
Each is refused with its own status and one log line at most, never a traceback, before Bolt parses
anything; an oversized body is refused while it is still arriving. The real app under uvicorn on
loopback, signed requests as Slack signs them."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from urllib.parse import quote

import pytest
import pytest_asyncio

from bot.http_body import BODY_LIMIT
from tests.bot.slack_harness import SECRET, module_settings, serve, sign

pytestmark = pytest.mark.asyncio(loop_scope="module")

FORM = "application/x-www-form-urlencoded"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    home = tmp_path_factory.mktemp("requests") / "home"
    home.mkdir(parents=True)
    async with serve(module_settings(home, model.url), slack_api) as harness:
        harness.port = int(str(harness.http.base_url).rsplit(":", 1)[1].strip("/"))
        yield harness


def signed(body: bytes) -> dict:
    """Slack's signature over raw bytes, made now (`sign` takes text; these bodies need not be UTF-8)."""
    stamp = str(int(time.time()))
    digest = hmac.new(SECRET.encode(), b"v0:%s:%s" % (stamp.encode(), body), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def unsigned(body: bytes) -> dict:
    return {}


def stamp_not_a_number(body: bytes) -> dict:
    return {**signed(body), "X-Slack-Request-Timestamp": "abc"}


def signature_not_ascii(body: bytes) -> dict:
    return {**signed(body), "X-Slack-Signature": b"v0=\xe9"}


JSON = "application/json"

# (case, body, content type, headers for the body, status): what a newcomer's curl and a confused
# client send. The signed ones are signed when the test runs: a signature made at import goes stale.
CASES = [
    ("unsigned garbage, as curl -d posts it", b"{garbage", FORM, unsigned, 401),
    ("unsigned bytes that are not UTF-8", b"\xff" * 64, FORM, unsigned, 401),
    ("unsigned JSON list", b"[1,2]", JSON, unsigned, 401),
    ("timestamp not a number", b"token=x", FORM, stamp_not_a_number, 401),
    ("signature not ASCII", b"token=x", FORM, signature_not_ascii, 401),
    ("signed JSON list", b"[1,2]", JSON, signed, 400),
    ("signed JSON string", b'"hi"', JSON, signed, 400),
    ("signed form, payload not JSON", b"payload=notjson", FORM, signed, 400),
    ("signed form, payload a JSON list", b"payload=%5B1%5D", FORM, signed, 400),
    ("signed bytes that are not UTF-8", b"\xff\xfe", FORM, signed, 400),
    # Signed and parsed, but not shaped as Slack sends it: Bolt's middleware or a listener raised (500).
    ("signed JSON object without a type", b"{}", JSON, signed, 400),
    ("signed form without payload or command", b"a=b", FORM, signed, 400),
    ("signed event_callback without an event", b'{"type":"event_callback"}', JSON, signed, 400),
    ("signed event that is a string", b'{"type":"event_callback","event":"x"}', JSON, signed, 400),
    ("signed event that is a list", b'{"type":"event_callback","event":[]}', JSON, signed, 400),
    (
        "signed mention without a channel",
        b'{"type":"event_callback","event":{"type":"app_mention","user":"U1","ts":"1.2","text":"hi"}}',
        JSON,
        signed,
        400,
    ),
    (
        "signed message whose subtype is a list",
        b'{"type":"event_callback","event":{"type":"message","subtype":[],"user":"U1"}}',
        JSON,
        signed,
        400,
    ),
    (
        "signed home opened without a user",
        b'{"type":"event_callback","event":{"type":"app_home_opened"}}',
        JSON,
        signed,
        400,
    ),
    (
        "signed assistant thread that is a string",
        b'{"type":"event_callback","event":{"type":"assistant_thread_started","assistant_thread":"x"}}',
        JSON,
        signed,
        400,
    ),
    ("signed slash command without team and channel", b"command=%2Fask&text=hi", FORM, signed, 400),
    (
        "signed button click without a user",
        b"payload=" + quote(json.dumps({"type": "block_actions", "actions": [{"action_id": "x"}]})).encode(),
        FORM,
        signed,
        400,
    ),
    (
        "signed button click whose actions are not a list",
        b"payload="
        + quote(json.dumps({"type": "block_actions", "user": {"id": "U1"}, "actions": "x"})).encode(),
        FORM,
        signed,
        400,
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "content_type", "headers", "status"), CASES, ids=[c[0] for c in CASES]
)
async def test_requests_slack_never_sends_are_refused_in_one_log_line(
    slack, caplog, case, body, content_type, headers, status
):
    caplog.set_level(logging.INFO)
    resp = await slack.http.post(
        "/slack/events", content=body, headers={"content-type": content_type, **headers(body)}
    )
    assert resp.status_code == status, resp.text
    records = [r for r in caplog.records if r.levelno >= logging.INFO and not r.name.startswith("httpx")]
    assert len(records) <= 1, [r.getMessage() for r in records]
    assert not any(r.exc_info for r in caplog.records), "a traceback in the log"
    await slack.drain()
    assert not slack.api.calls  # nothing started


# Payloads Slack does send, for which no listener of ours is registered: Slack wants a 200 (it retries
# an event that gets anything else, https://docs.slack.dev/apis/events-api/#failure-conditions).
IGNORED = [
    (
        "an event type the app does not handle",
        {"type": "event_callback", "event": {"type": "reaction_added"}},
    ),
    (
        "another app's slash command",
        {"command": "/other", "text": "hi", "team_id": "T1", "channel_id": "C1", "user_id": "U1"},
    ),
    ("an interaction type the app does not handle", {"payload": json.dumps({"type": "view_closed"})}),
]


@pytest.mark.parametrize(("case", "body"), IGNORED, ids=[c[0] for c in IGNORED])
async def test_a_slack_payload_no_listener_takes_is_acknowledged_in_one_log_line(slack, caplog, case, body):
    caplog.set_level(logging.INFO)
    if "event" in body:
        resp = await slack.http.post(
            "/slack/events",
            content=json.dumps(body),
            headers={"content-type": JSON, **sign(json.dumps(body))},
        )
    else:
        resp = await slack.form(body)
    assert resp.status_code == 200, resp.text
    records = [r for r in caplog.records if r.levelno >= logging.INFO and not r.name.startswith("httpx")]
    assert len(records) == 1 and "\n" not in records[0].getMessage(), [r.getMessage() for r in records]
    assert not any(r.exc_info for r in caplog.records), "a traceback in the log"


async def test_a_signed_url_verification_still_gets_its_challenge(slack):
    body = json.dumps({"token": "t", "challenge": "ch-123", "type": "url_verification"})
    resp = await slack.http.post(
        "/slack/events", content=body, headers={"content-type": "application/json", **sign(body)}
    )
    assert resp.status_code == 200 and resp.json() == {"challenge": "ch-123"}


async def _answer(port: int, request: bytes) -> tuple[bytes, bytes]:
    """Send `request` (headers and only the start of a body) and read the answer until the server
    closes: the rest of the body is never sent, so an answer means the server did not wait for it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), timeout=5)
        rest = await asyncio.wait_for(reader.read(), timeout=5)  # EOF: the connection is closed
        return status, rest
    finally:
        writer.close()


async def _chunked(body: bytes):
    """An async body: httpx sends it chunked, without a Content-Length."""
    yield body


def _head(path: str, *fields: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize("path", ["/slack/events", "/api/messages"])
async def test_a_body_declared_too_big_is_refused_before_any_of_it_is_read(slack, caplog, path):
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    status, rest = await _answer(slack.port, _head(path, f"Content-Length: {200 * 1024 * 1024}"))
    assert status.startswith(b"HTTP/1.1 413") and b"too large" in rest
    assert time.monotonic() - started < 2
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("path", ["/slack/events", "/api/messages"])
async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_cap(slack, caplog, path):
    """A chunked body declares no length: counted while it arrives. Sent: the cap and one byte of a
    body meant to go on for 200 MB; the 413 comes at once, and the connection is closed. A body of
    exactly the cap is still read whole and judged (unsigned: 401, not a JSON activity: 400)."""
    caplog.set_level(logging.INFO)
    at_cap = await slack.http.post(path, content=_chunked(b"{" * BODY_LIMIT), headers={"content-type": FORM})
    assert at_cap.status_code == (401 if path == "/slack/events" else 400)
    piece = 64 * 1024
    chunks = b"".join(b"%x\r\n%s\r\n" % (piece, b"x" * piece) for _ in range(BODY_LIMIT // piece))
    request = _head(path, "Transfer-Encoding: chunked") + chunks + b"1\r\nx\r\n"
    started = time.monotonic()
    status, rest = await _answer(slack.port, request)
    assert status.startswith(b"HTTP/1.1 413") and b"too large" in rest
    assert time.monotonic() - started < 2
    assert not any(r.exc_info for r in caplog.records)
