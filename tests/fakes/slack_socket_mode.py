"""A fake Slack Socket Mode server: a real WebSocket endpoint on loopback, for `datathread slack --socket`.

Socket Mode (https://docs.slack.dev/apis/events-api/using-socket-mode) is Slack calling the app over a
WebSocket the app opened: the app asks `apps.connections.open` (the fake Web API, `FakeSlackAPI`,
hands out this server's `ws://127.0.0.1:PORT/link/` once `attach`ed), connects, gets
`{"type": "hello"}`, and from then on receives envelopes — `events_api`, `slash_commands`,
`interactive` — each of which it must acknowledge with `{"envelope_id": …}` within 3 s, or Slack
sends it again. Slack also asks the app to reconnect (`{"type": "disconnect", "reason":
"refresh_requested"}`) and drops connections now and then; the switches here do both.

The real slack_sdk client (the aiohttp one Bolt's `AsyncSocketModeHandler` uses) talks to it; the
server runs on an event loop of its own thread, so a test drives it with plain calls.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from tests.fakes.slack_api import FakeSlackAPI

APP_ID = "A0001"


@dataclass
class Envelope:
    """One envelope pushed to the app: what was sent, when, and the ack that came back (if any)."""

    id: str
    body: dict
    connection: int
    sent_at: float = field(default_factory=time.monotonic)
    acked_at: float | None = None
    ack: dict | None = None

    @property
    def ack_s(self) -> float | None:
        """Seconds from sending the envelope to its ack; None until acked."""
        return None if self.acked_at is None else self.acked_at - self.sent_at


class FakeSocketMode:
    """Connections are numbered 1, 2, … in the order the app opens them; `send` and the helpers go to
    the newest one still open. `envelopes` keeps every envelope sent, with its ack."""

    def __init__(self) -> None:
        self.envelopes: dict[str, Envelope] = {}
        self.opened = 0  # connections the app opened so far
        self.stray: list[dict] = []  # anything the app sent that is no ack of a known envelope
        self._ids = itertools.count(1)
        self._sockets: dict[int, web.WebSocketResponse] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> FakeSocketMode:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def attach(self, api: FakeSlackAPI) -> FakeSocketMode:
        """Make the fake Web API's `apps.connections.open` hand out this server's URL."""
        api.connections_url = self.url
        return self

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link/"

    # --- what Slack sends --------------------------------------------------------------------------
    def send(self, body: dict) -> str:
        """Push one envelope (an `envelope_id` is added if missing) on the newest open connection."""
        envelope_id = body.get("envelope_id") or f"env-{next(self._ids):04d}"
        body = {**body, "envelope_id": envelope_id}
        connection = self._newest()
        with self._lock:
            self.envelopes[envelope_id] = Envelope(envelope_id, body, connection)
        self._call(self._send(connection, body))
        return envelope_id

    def event(self, callback: dict, *, retry_attempt: int = 0) -> str:
        """An Events API `event_callback` body (as `POST /slack/events` gets it) as an envelope."""
        return self.send(
            {
                "type": "events_api",
                "payload": callback,
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": "timeout" if retry_attempt else "",
            }
        )

    def command(self, fields: dict) -> str:
        """A slash command's fields (what Slack would form-encode over HTTP) as an envelope."""
        return self.send({"type": "slash_commands", "payload": fields, "accepts_response_payload": True})

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's request to reconnect, on the newest connection (which Slack closes soon after)."""
        self._call(self._send(self._newest(), {"type": "disconnect", "reason": reason, "debug_info": {}}))

    def drop(self) -> None:
        """Close the newest connection from the server's side, as Slack does when it recycles a host."""
        self._call(self._close(self._newest()))

    # --- what the app did --------------------------------------------------------------------------
    def open_connections(self) -> list[int]:
        with self._lock:
            return sorted(self._sockets)

    def _newest(self, timeout: float = 10) -> int:
        """The newest open connection, waited for: the app may say it is connected a moment before this
        server's side has taken the connection in (its own thread, on a loaded host)."""
        _until(self.open_connections, timeout, "an open connection")
        return self.open_connections()[-1]

    def wait_connections(self, opened: int, timeout: float = 10) -> None:
        """Until the app has opened `opened` connections in all and one of them is open."""
        _until(lambda: self.opened >= opened and self.open_connections(), timeout, f"{opened} connection(s)")

    def wait_ack(self, envelope_id: str, timeout: float = 10) -> Envelope:
        envelope = self.envelopes[envelope_id]
        _until(lambda: envelope.acked_at is not None, timeout, f"an ack of {envelope_id}")
        return envelope

    # --- the server --------------------------------------------------------------------------------
    def _call(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._connection)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        listener = socket.create_server(("127.0.0.1", 0))
        self.port = listener.getsockname()[1]
        await web.SockSite(self._runner, listener).start()

    async def _stop(self) -> None:
        for connection in list(self._sockets):
            await self._close(connection)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, connection: int, body: dict) -> None:
        ws = self._sockets.get(connection)
        if ws is None:
            raise AssertionError("no Socket Mode connection is open")
        await ws.send_str(json.dumps(body))

    async def _close(self, connection: int) -> None:
        ws = self._sockets.get(connection)
        if ws is not None:
            await ws.close()

    async def _connection(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()  # answers the client's pings itself, as Slack does
        await ws.prepare(request)
        hello = {"type": "hello", "num_connections": 1, "connection_info": {"app_id": APP_ID}}
        hello["debug_info"] = {"host": "fake-socket-mode", "approximate_connection_time": 3600}
        await ws.send_str(json.dumps(hello))  # first, before any envelope: taken in only now
        with self._lock:
            self.opened += 1
            number = self.opened
            self._sockets[number] = ws
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._received(json.loads(message.data))
        finally:
            with self._lock:
                self._sockets.pop(number, None)
        return ws

    def _received(self, body: dict) -> None:
        envelope = self.envelopes.get(body.get("envelope_id", ""))
        if envelope is None or envelope.ack is not None:
            self.stray.append(body)
            return
        envelope.ack, envelope.acked_at = body, time.monotonic()


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
