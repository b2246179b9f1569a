"""A loopback endpoint that accepts connections and never answers (a proxy or firewall black hole).

Connections are accepted and held open, reading whatever arrives, until `stop()`; nothing is ever sent.
"""

from __future__ import annotations

import socket
import threading
import time


class BlackHole:
    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.connections: list[socket.socket] = []
        self.accepted_at: list[float] = []  # time.monotonic() of each connection
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def start(self) -> BlackHole:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        for conn in self.connections:
            conn.close()
        self.server.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted_at.append(time.monotonic())
            self.connections.append(conn)
