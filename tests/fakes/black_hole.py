"""A loopback endpoint that accepts connections and never answers (a proxy or firewall black hole).

Connections are accepted and held open, reading whatever arrives, until `stop()`; nothing is ever sent.
"""

from __future__ import annotations

import socket
import time

from tests.fakes.loopback_listener import LoopbackListener


class BlackHole(LoopbackListener):
    def __init__(self) -> None:
        super().__init__()
        self.connections: list[socket.socket] = []
        self.accepted_at: list[float] = []  # time.monotonic() of each connection

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def accepted(self, conn: socket.socket) -> None:
        self.accepted_at.append(time.monotonic())
        self.connections.append(conn)

    def closing(self) -> None:
        for conn in self.connections:
            conn.close()
