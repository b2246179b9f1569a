"""A loopback port that notes every connection made to it and what came first on each: for a test that
must show nothing was sent somewhere (a refused upload URL), whether the bot came directly or through
the environment's proxy (`HTTPS_PROXY` makes a client send `CONNECT host:443` here; `HTTP_PROXY` the
request itself, its absolute URL in the request line).

It answers every request with `502 Bad Gateway` once the request's head has arrived, so a client that
does come here gets a quick refusal rather than a hang; bytes that are not HTTP (a TLS hello) get the
connection closed after a moment.
"""

from __future__ import annotations

import socket
import threading

from tests.fakes.loopback_listener import LoopbackListener

ANSWER = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Tripwire(LoopbackListener):
    def __init__(self) -> None:
        super().__init__(poll_s=0.1)
        self.connections = 0  # counted as each is accepted
        self.arrived: list[bytes] = []  # per connection, once it ends: what came before the answer
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def accepted(self, conn: socket.socket) -> None:
        with self.lock:
            self.connections += 1
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        seen = b""
        conn.settimeout(1.0)
        with conn:
            try:
                while b"\r\n\r\n" not in seen and len(seen) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    seen += chunk
                if b"\r\n\r\n" in seen:
                    conn.sendall(ANSWER)
            except OSError:  # a TLS hello that waits for an answer, a client that went away
                pass
        with self.lock:
            self.arrived.append(seen)
