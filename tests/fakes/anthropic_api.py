"""A scripted fake of the Anthropic Messages API, served over real HTTP on loopback.

Tests `enqueue()` responses (or callables that build one from the request); the real `anthropic`
SDK talks to it through `ANTHROPIC_BASE_URL`. Every request body is kept in `requests` so tests can
check what the model was sent (history validity, cache breakpoints, tool results).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


def error(status: int, kind: str = "api_error", message: str = "scripted error") -> dict:
    """An HTTP error response (the SDK retries 429/5xx/529 by itself)."""
    return {"__status__": status, "type": "error", "error": {"type": kind, "message": message}}


class FakeAnthropic:
    """Scripted Messages API. `enqueue` replies in order; an empty queue answers 'done'."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def stop(self) -> None:
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

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.headers.append(dict(self.headers))
                reply = dict(fake._next(body))
                status = reply.pop("__status__", 200)
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
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status == 429:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _usage(body: dict) -> dict:
    """Token counts that behave like the real API's: cached prefix up to the last breakpoint."""
    size = len(json.dumps(body)) // 4
    return {
        "input_tokens": max(1, size // 10),
        "output_tokens": 50,
        "cache_read_input_tokens": size - size // 10,
        "cache_creation_input_tokens": 0,
    }
