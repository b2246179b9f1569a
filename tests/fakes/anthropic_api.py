"""A scripted fake of the Anthropic Messages API, served over real HTTP on loopback.

Tests `enqueue()` responses (or callables that build one from the request); the real `anthropic`
SDK talks to it through `ANTHROPIC_BASE_URL`. Every request body is kept in `requests` so tests can
check what the model was sent (history validity, cache breakpoints, tool results).

A request with `"stream": true` is answered with the Messages API's server-sent events (text in word
tokens, tool inputs in JSON fragments), `token_delay_s` apart; `cut(reply, after=N)` closes the
connection abruptly after N events, as a dropped network connection would; `stall(reply, after=N)`
sends only keep-alive pings after N events, as a gateway holding a reply that died does.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import LoopbackServer

POLL_S = 0.02  # serve_forever's shutdown check: stop() returns within this, not 0.5 s

Reply = dict | Callable[[dict], dict]


def text(answer: str, *, stop_reason: str = "end_turn") -> dict:
    """A final answer."""
    return {"content": [{"type": "text", "text": answer}], "stop_reason": stop_reason}


def tool(
    name: str,
    input: dict | None = None,
    *,
    say: str = "",
    more: list[tuple[str, dict]] | None = None,
    stop_reason: str = "tool_use",
) -> dict:
    """One (or, with `more`, several parallel) tool calls."""
    calls = [(name, input or {}), *(more or [])]
    content: list[dict] = [{"type": "text", "text": say}] if say else []
    content += [
        {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:16]}", "name": n, "input": i} for n, i in calls
    ]
    return {"content": content, "stop_reason": stop_reason}


def thinking(reply: dict, *, thought: str = "", signature: str | None = None) -> dict:
    """`reply` opened by a thinking block, as adaptive-thinking models (Sonnet 5 and later, on by
    default) send it: with display omitted the text is empty and only the signature carries it."""
    block = {"type": "thinking", "thinking": thought, "signature": signature or f"sig_{uuid.uuid4().hex}"}
    return {**reply, "content": [block, *reply["content"]]}


def error(
    status: int, kind: str = "api_error", message: str = "scripted error", *, retry_after: str | None = None
) -> dict:
    """An HTTP error response (the SDK retries 429/5xx/529 by itself); a 429 says `retry-after: 0`
    unless `retry_after` is given (any status may carry one)."""
    reply = {"__status__": status, "type": "error", "error": {"type": kind, "message": message}}
    return reply if retry_after is None else {**reply, "__retry_after__": retry_after}


def cut(reply: dict, *, after: int) -> dict:
    """`reply`, streamed, but the connection drops after `after` events (no message_stop)."""
    return {**reply, "__cut_after__": after}


def stall(reply: dict, *, after: int, ping_s: float = 0.05) -> dict:
    """`reply`, streamed, but after `after` events only a `ping` every `ping_s` seconds, until the
    client goes away (or the fake stops)."""
    return {**reply, "__stall_after__": (after, ping_s)}


def sse_events(message: dict) -> list[tuple[str, dict]]:
    """A whole Message as the stream of events the real API sends for it."""
    head = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[tuple[str, dict]] = [("message_start", {"message": head}), ("ping", {})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            start, deltas = {**block, "input": {}}, _json_deltas(block.get("input") or {})
        elif block["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t} for t in _words(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            start, deltas = {"type": "text", "text": ""}, _text_deltas(block.get("text", ""))
        events.append(("content_block_start", {"index": index, "content_block": start}))
        events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"index": index}))
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events += [("message_delta", {"delta": delta, "usage": usage}), ("message_stop", {})]
    return [(name, {"type": name, **data}) for name, data in events]


def _words(text_: str) -> list[str]:
    return re.findall(r"\s*\S+\s*|\s+", text_)


def _text_deltas(text_: str) -> list[dict]:
    return [{"type": "text_delta", "text": t} for t in _words(text_)]


def _json_deltas(input_: dict) -> list[dict]:
    raw = json.dumps(input_)
    return [{"type": "input_json_delta", "partial_json": raw[i : i + 16]} for i in range(0, len(raw), 16)]


class FakeAnthropic:
    """Scripted Messages API. `enqueue` replies in order; an empty queue answers 'done'."""

    def __init__(self, *, token_delay_s: float = 0.0) -> None:
        self.token_delay_s = token_delay_s  # pause before each streamed event after message_start
        self.replies: list[Reply] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.models = {"claude-test", "claude-sonnet-5-5"}  # what GET /v1/models/{id} knows
        self.api_keys: set[str] | None = None  # None: any key is accepted
        self.content_type = "text/event-stream"  # of a streamed reply ("": none sent)
        # Per streamed reply, when (time.monotonic) its first text delta and its last event were sent.
        self.stream_times: list[dict[str, float | None]] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()  # ends the pings of a stalled reply
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def enqueue(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def last_tool_results(self, index: int = -1) -> list[dict]:
        """The tool_result blocks of the newest user message of request `index`."""
        messages = self.requests[index]["messages"]
        blocks = messages[-1]["content"]
        return [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]

    def _next(self, body: dict) -> dict:
        with self.lock:
            self.requests.append(body)
            reply = self.replies.pop(0) if self.replies else text("done")
        return reply(body) if callable(reply) else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:  # GET /v1/models/{id}: a model lookup (datathread doctor)
                model = self.path.split("?")[0].removeprefix("/v1/models/")
                bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                key = self.headers.get("x-api-key") or bearer
                if fake.api_keys is not None and key not in fake.api_keys:
                    status, body = 401, error(401, "authentication_error", "invalid x-api-key")
                elif model in fake.models:
                    status, body = (
                        200,
                        {
                            "type": "model",
                            "id": model,
                            "display_name": model,
                            "created_at": "2025-01-01T00:00:00Z",
                        },
                    )
                else:
                    status, body = 404, error(404, "not_found_error", f"model: {model}")
                body.pop("__status__", None)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.headers.append(dict(self.headers))
                refused = _blank_text(body)
                if refused:  # as the real API does, before any reply is used
                    with fake.lock:
                        fake.requests.append(body)
                    reply = error(400, "invalid_request_error", refused)
                else:
                    reply = dict(fake._next(body))
                status = reply.pop("__status__", 200)
                cut_after = reply.pop("__cut_after__", None)
                stall_after = reply.pop("__stall_after__", None)
                retry_after = reply.pop("__retry_after__", None)
                if status == 200:
                    reply = {
                        "id": f"msg_{uuid.uuid4().hex[:12]}",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "fake"),
                        "stop_sequence": None,
                        "usage": reply.pop("usage", None) or _usage(body),
                        **reply,
                    }
                if status == 200 and body.get("stream"):
                    return self._stream(sse_events(reply), cut_after, stall_after)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if retry_after is not None or status == 429:
                    self.send_header("retry-after", retry_after or "0")
                self.end_headers()
                self.wfile.write(data)

            def _stream(
                self,
                events: list[tuple[str, dict]],
                cut_after: int | None,
                stall_after: tuple[int, float] | None = None,
            ) -> None:
                # Chunked HTTP/1.1, so a connection closed early is a broken body, not a short one.
                self.protocol_version = "HTTP/1.1"
                self.close_connection = True
                self.send_response(200)
                if fake.content_type:  # a gateway may write it otherwise, or leave it out
                    self.send_header("content-type", fake.content_type)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                times: dict[str, float | None] = {"first_text": None, "done": None}
                fake.stream_times.append(times)
                for n, (name, data) in enumerate(events):
                    if cut_after is not None and n >= cut_after:
                        return  # no terminating chunk: the client sees the connection drop
                    if stall_after is not None and n >= stall_after[0]:
                        return self._ping(stall_after[1])
                    if n and fake.token_delay_s:
                        time.sleep(fake.token_delay_s)
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                    if times["first_text"] is None and data.get("delta", {}).get("type") == "text_delta":
                        times["first_text"] = time.monotonic()
                times["done"] = time.monotonic()
                self.wfile.write(b"0\r\n\r\n")

            def _ping(self, every_s: float) -> None:
                chunk = b'event: ping\ndata: {"type": "ping"}\n\n'
                while not fake.stopped.wait(every_s):
                    try:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up on the reply

        return Handler


def _blank_text(body: dict) -> str:
    """The real API's refusal of a request holding an empty or whitespace-only text block ("" when it
    holds none): a history with one is refused on every later turn, so the thread is stuck."""
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "text":
                if not block.get("text"):
                    return "messages: text content blocks must be non-empty"
                if not str(block["text"]).strip():
                    return "messages: text content blocks must contain non-whitespace text"
    return ""


def _usage(body: dict) -> dict:
    """Token counts that behave like the real API's: cached prefix up to the last breakpoint."""
    size = len(json.dumps(body)) // 4
    return {
        "input_tokens": max(1, size // 10),
        "output_tokens": 50,
        "cache_read_input_tokens": size - size // 10,
        "cache_creation_input_tokens": 0,
    }
