"""A listening socket on a free loopback port with its accept loop on a thread: the common part of the
fakes that stand for something on the network which is not a service (a black hole, a tripwire).

A subclass says what happens to each accepted connection (`accepted`) and what to close besides the
listener when the test ends (`closing`).
"""

from __future__ import annotations

import socket
import threading


class LoopbackListener:
    def __init__(self, *, poll_s: float = 0.2) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(poll_s)  # how often the accept loop looks for `stop()`
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return self.server.getsockname()[1]

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=2)
        self.closing()
        self.server.close()

    def accepted(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def closing(self) -> None:
        """What to close besides the listener (held connections)."""

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted(conn)
