"""The model client the settings select, the sentences people see when the API fails, and which of
those failures are the set-up's (a `ModelFault`) rather than one call's."""

from __future__ import annotations

import time

import anthropic
import httpx2
import pytest

from core.config import load_settings
from core.events import ModelFault
from core.model import ModelDeadline, StreamInterrupted, build_model, describe_model_error, model_fault
from tests.fakes.black_hole import BlackHole


@pytest.mark.parametrize(
    ("overrides", "client_type"),
    [
        ({"anthropic_api_key": "sk-ant-123456"}, anthropic.AsyncAnthropic),
        ({"model_provider": "bedrock", "aws_region": "us-east-1"}, anthropic.AsyncAnthropicBedrock),
        (
            {"model_provider": "vertex", "vertex_project": "p", "vertex_region": "us-east5"},
            anthropic.AsyncAnthropicVertex,
        ),
    ],
)
def test_provider_selects_the_sdk_client(overrides, client_type, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKEFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    model = build_model(load_settings(_env_file=None, model_retries=3, **overrides))
    assert isinstance(model.client, client_type)
    assert model.client.max_retries == 3


def _status_error(cls, status: int):
    request = httpx2.Request("POST", "http://x/v1/messages")
    return cls("boom", response=httpx2.Response(status, request=request), body=None)


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (_status_error(anthropic.AuthenticationError, 401), "key was rejected"),
        (_status_error(anthropic.RateLimitError, 429), "rate-limited"),
        (_status_error(anthropic.NotFoundError, 404), "DATATHREAD_MODEL"),
        (_status_error(anthropic.InternalServerError, 529), "overloaded"),
        (anthropic.APIConnectionError(request=httpx2.Request("POST", "http://x")), "could not reach"),
        # an error with no HTTP status is not the API's internal error (a status of None matched it)
        (anthropic.AnthropicError("no credentials found"), "Something went wrong while talking to Claude"),
    ],
)
def test_model_errors_become_one_human_sentence(exc, words):
    sentence = describe_model_error(exc)
    assert words in sentence and "\n" not in sentence


@pytest.mark.parametrize(
    ("surface", "key", "too_long"),
    [
        ("slack", "An admin needs to check ANTHROPIC_API_KEY.", "Start a new thread."),
        ("teams", "An admin needs to check ANTHROPIC_API_KEY.", "Start a new thread."),
        ("terminal", "Check ANTHROPIC_API_KEY.", "Start a new session: datathread chat, without --session."),
    ],
)
def test_the_terminal_is_told_what_to_check_and_to_start_a_session(surface, key, too_long):
    """In the terminal whoever reads the sentence runs the bot and has sessions: "An admin needs to
    check ANTHROPIC_API_KEY" and "Start a new thread" spoke to someone else, of something it lacks."""
    rejected = describe_model_error(_status_error(anthropic.AuthenticationError, 401), surface)
    assert rejected == f"The Claude API key was rejected. {key}"
    long_ = describe_model_error(_status_error(anthropic.ContentTooLargeError, 413), surface)
    assert long_ == f"This conversation is too long for Claude. {too_long}"


def _api_error(cls, status: int, kind: str, message: str):
    request = httpx2.Request("POST", "http://x/v1/messages")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return cls(message, response=httpx2.Response(status, request=request), body=body)


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (_api_error(anthropic.PermissionDeniedError, 403, "permission_error", "no"), "may not use"),
        (_api_error(anthropic.NotFoundError, 404, "not_found_error", "model: x"), "model was not found"),
        (_api_error(anthropic.OverloadedError, 529, "overloaded_error", "Overloaded"), "overloaded"),
        (_api_error(anthropic.InternalServerError, 500, "api_error", "oops"), "internal error"),
        (_api_error(anthropic.RateLimitError, 429, "rate_limit_error", "slow down"), "rate-limited"),
        (_api_error(anthropic.ContentTooLargeError, 413, "request_too_large", "big"), "too long"),
        (
            _api_error(
                anthropic.BadRequestError, 400, "invalid_request_error", "prompt is too long: 210000 > 200000"
            ),
            "too long",
        ),
        (
            _api_error(
                anthropic.BadRequestError,
                400,
                "invalid_request_error",
                "messages: text content blocks must be non-empty",
            ),
            "rejected the request as invalid (messages: text content blocks must be non-empty)",
        ),
        (
            _api_error(
                anthropic.BadRequestError, 400, "invalid_request_error", "Your credit balance is too low"
            ),
            "out of credit",
        ),
        (ModelDeadline(7), "within 7 s"),
    ],
)
def test_each_api_error_class_has_its_own_sentence(exc, words):
    sentence = describe_model_error(exc)
    assert words in sentence and "\n" not in sentence
    if words != "too long":
        assert "too long" not in sentence  # a plain 400 is not blamed on the conversation's length


async def test_a_black_holed_endpoint_fails_within_the_deadline_retries_included():
    hole = BlackHole().start()
    try:
        settings = load_settings(
            _env_file=None,
            anthropic_api_key="sk-ant-test-000000",
            anthropic_base_url=hole.url,
            model_timeout=1.5,
            model_retries=5,
        )
        model = build_model(settings)
        started = time.monotonic()
        with pytest.raises(ModelDeadline):
            await model.stream(
                _ignore, model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        elapsed = time.monotonic() - started
        await model.close()
    finally:
        hole.stop()
    assert 1.4 < elapsed < 4, elapsed  # one deadline, not timeout × (retries + 1) = 9 s


def test_defaults_fail_a_black_hole_well_under_a_minute():
    settings = load_settings(_env_file=None, anthropic_api_key="sk-ant-test-000000")
    assert settings.model_timeout <= 30 and build_model(settings).deadline_s == settings.model_timeout


async def _ignore(text: str) -> None:
    return None


def _bad_request(message: str):
    return _api_error(anthropic.BadRequestError, 400, "invalid_request_error", message)


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (anthropic.APIConnectionError(request=httpx2.Request("POST", "http://x")), ModelFault.UNREACHABLE),
        (anthropic.APITimeoutError(request=httpx2.Request("POST", "http://x")), ModelFault.NO_REPLY),
        (ModelDeadline(7), ModelFault.NO_REPLY),
        (_status_error(anthropic.AuthenticationError, 401), ModelFault.KEY_REJECTED),
        (_api_error(anthropic.PermissionDeniedError, 403, "permission_error", "no"), ModelFault.MODEL_DENIED),
        (_status_error(anthropic.NotFoundError, 404), ModelFault.MODEL_NOT_FOUND),
        (_bad_request("Your credit balance is too low"), ModelFault.NO_CREDIT),
        # The next call may well succeed, or only this conversation is at fault: no set-up fault.
        (_bad_request("messages: text content blocks must be non-empty"), None),
        (_bad_request("prompt is too long: 210000 > 200000"), None),
        (_status_error(anthropic.RateLimitError, 429), None),
        (_status_error(anthropic.InternalServerError, 529), None),
        (_api_error(anthropic.InternalServerError, 500, "api_error", "oops"), None),
        (StreamInterrupted("the reply stream broke"), None),
    ],
)
def test_only_set_up_failures_are_model_faults(exc, fault):
    assert model_fault(exc) == fault


async def test_an_unreachable_api_is_said_with_the_networks_reason():
    """The real SDK against a port nothing listens on: the sentence said only "could not reach", and
    the reason (a DNS failure, a refusal) was in no log line below DEBUG."""
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(anthropic.APIConnectionError) as failed:
        await client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    await client.close()
    assert describe_model_error(failed.value) == (
        "I could not reach the Claude API (connection refused). Please try again shortly."
    )


def _model_at(server):
    """The real SDK client at a loopback server of the test's, without retries."""
    settings = load_settings(
        _env_file=None,
        anthropic_api_key="sk-ant-test-000000",
        anthropic_base_url=f"http://127.0.0.1:{server.server_address[1]}",
        model_retries=0,
    )
    return build_model(settings)


async def test_an_endpoint_answering_a_web_page_is_no_dropped_connection_but_a_set_up_fault():
    """ANTHROPIC_BASE_URL at a proxy's or web server's page (200, HTML): said as "the reply broke off
    mid-way (the connection dropped). Please ask again." — which asking again never fixes — with no
    word on the setting and no fault, so `eval` asked every question and chat pointed nowhere."""
    import threading
    from http.server import BaseHTTPRequestHandler

    from tests.fakes.loopback import LoopbackServer

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            page = b"<html><body>Welcome to nginx!</body></html>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    server = LoopbackServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    model = _model_at(server)
    try:
        with pytest.raises(StreamInterrupted) as failed:
            await model.stream(
                _ignore, model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
    finally:
        await model.close()
        server.shutdown()
    assert model_fault(failed.value) is ModelFault.NOT_CLAUDE
    assert describe_model_error(failed.value).startswith(
        "The Claude API's address answered with something that is not a Claude reply"
    )
    assert "ANTHROPIC_BASE_URL" in describe_model_error(failed.value)


@pytest.mark.parametrize("kind", ["Text/Event-Stream; charset=utf-8", ""])
async def test_a_stream_in_any_case_or_without_a_content_type_is_read_as_a_stream(kind, fake_model):
    """A gateway that writes the type in capitals, or sends none: the stream is read as before (the
    check for a web page must not turn working set-ups into set-up faults)."""
    from tests.fakes.anthropic_api import text

    fake_model.content_type = kind
    fake_model.enqueue(text("Fine."))
    settings = load_settings(
        _env_file=None, anthropic_api_key="sk-ant-test-000000", anthropic_base_url=fake_model.url
    )
    model = build_model(settings)
    said: list[str] = []

    async def collect(piece: str) -> None:
        said.append(piece)

    try:
        message = await model.stream(
            collect, model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        await model.close()
    assert "".join(said) == "Fine." and message.stop_reason == "end_turn"


def _endless_stream(every: bytes):
    """A loopback Messages API whose reply starts, then sends `every` every 0.05 s and never ends."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler

    from tests.fakes.loopback import LoopbackServer

    start = {"type": "message_start", "message": {"id": "m1", "type": "message", "role": "assistant",
             "model": "m", "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 1, "output_tokens": 1}}}  # fmt: skip
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

    class Endless(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            try:
                for event in (start, block):
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                while True:
                    self.wfile.write(every)
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass

    server = LoopbackServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


PING = b'event: ping\ndata: {"type": "ping"}\n\n'
WORD = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "on "}}\n\n'


@pytest.mark.parametrize(("every", "why"), [(PING, "stopped for 0.5 s"), (WORD, "went on past 1.5 s")])
async def test_a_reply_that_never_finishes_ends_the_call(every, why):
    """A gateway's keep-alive pings, or a reply that streams on and on: the read timeout never fires
    (bytes keep coming), and `ask` ran until `timeout` killed it at 300 s."""
    from core.model import ReplyStalled

    server = _endless_stream(every)
    model = _model_at(server)
    model.quiet_s, model.max_reply_s = 0.5, 1.5
    heard: list[str] = []

    async def hear(text: str) -> None:
        heard.append(text)

    started = time.monotonic()
    try:
        with pytest.raises(ReplyStalled) as stalled:
            await model.stream(hear, model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    finally:
        await model.close()
        server.shutdown()
    assert time.monotonic() - started < 5 and stalled.value.why == why
    assert describe_model_error(stalled.value) == (
        f"Claude's reply {why} without finishing, so I stopped waiting. Please ask again."
    )
    assert (every is WORD) == bool(heard)  # the words that came were passed on as they came


@pytest.mark.parametrize("kind", [anthropic.ServiceUnavailableError, anthropic.InternalServerError])
def test_a_503_is_overloaded_or_unavailable_not_an_internal_error(kind):
    """A 503 was "The Claude API had an internal error": it is Claude (or a gateway before it) turning
    calls away for now, which the next try may not meet. By class, or by status alone."""
    request = httpx2.Request("POST", "http://x/v1/messages")
    own = httpx2.Response(503, request=request, headers={"content-type": "application/json"})
    said = describe_model_error(kind("busy", response=own, body=None))
    assert said == "Claude is overloaded or unavailable right now. Please try again in a minute."
    assert model_fault(kind("busy", response=own, body=None)) is None


def test_a_web_page_answering_with_an_error_status_is_not_blamed_on_claude():
    """A proxy's HTML 503 was "The Claude API had an internal error." with no hint at the address."""
    request = httpx2.Request("POST", "http://x/v1/messages")
    page = httpx2.Response(
        503, request=request, headers={"content-type": "text/html"}, text="<html>down</html>"
    )
    sentence = describe_model_error(anthropic.InternalServerError("down", response=page, body=None))
    assert sentence.startswith(
        "The Claude API's address answered HTTP 503 with a web page, not a Claude reply"
    )
    assert "datathread doctor" in sentence and "internal error" not in sentence
    own = httpx2.Response(500, request=request, headers={"content-type": "application/json"})
    assert "internal error" in describe_model_error(
        anthropic.InternalServerError("x", response=own, body=None)
    )


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (Exception("Protocol Error: b'HTTP/1.1 200 OK'"), "does not speak Redis (a web server, perhaps)"),
    ],
)
def test_something_else_at_redis_address_is_said_so(exc, words):
    from core.redis_words import redis_failure

    assert words in redis_failure("redis://127.0.0.1:7003/0", exc) and "b'HTTP" not in redis_failure(
        "redis://127.0.0.1:7003/0", exc
    )
