"""A session store that stops answering on cue, the two ways it happens in production.

Redis: a real redis-server stopped with SIGSTOP (as a long fork, a failover pause or `kill -STOP` stop
it; `DEBUG SLEEP` is often disabled). The kernel still takes its connections and the bytes sent to it,
so a client waits for answers, and what it sent is applied when the server is continued. SQLite: the
real state file held locked by another connection's write transaction, as another process does.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

from tests.fakes.redis_server import RedisServer


class StalledStore:
    """`freeze()` and `thaw()` the store a core built with `settings_update` (or `env`) uses."""

    def __init__(self, kind: str, home: Path):
        self.kind = kind
        self.server = RedisServer().start() if kind == "redis" else None
        self.database = home / "state.sqlite3"
        self._locker: sqlite3.Connection | None = None

    @property
    def settings_update(self) -> dict:
        return {"redis_url": self.server.url} if self.server else {}

    @property
    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.server.url} if self.server else {}

    def freeze(self) -> None:
        """Stop answering (callable from any thread, e.g. a scripted model reply)."""
        if self.server is not None:
            os.kill(self.server.proc.pid, signal.SIGSTOP)
            return
        self._locker = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False)
        self._locker.execute("BEGIN IMMEDIATE")

    def thaw(self) -> None:
        if self.server is not None:
            os.kill(self.server.proc.pid, signal.SIGCONT)
        elif self._locker is not None:
            self._locker.execute("ROLLBACK")
            self._locker.close()
            self._locker = None

    def stop(self) -> None:
        self.thaw()
        if self.server is not None:
            self.server.stop()
