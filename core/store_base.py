"""What every session store implementation shares: the history format version, the lock handle and
the errors. Kept apart from core/sessions.py (which opens a store by settings) so the stores never
import the module that imports them."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from core.text_repair import readable_data

HISTORY_VERSION = 1
# How long a turn waits for its lock's release when it set no deadline of its own (`HeldLock.release_by`);
# the rest of the release goes on in the background, and the lock expires anyway.
RELEASE_WAIT_S = 2.0
# How long any one call of the Redis session store waits for Redis to answer: a Redis that took the
# command and never replied (a long fork, a failover pause, `kill -STOP`). It was redis-py's three
# tries of a 5 s read (15 s) per call before the first word of a turn; a turn makes several calls
# before it starts. A call past it fails with StoreUnavailable, which a turn says in one sentence
# (core/turn_lock.py). Not SQLite's: a file another process holds locked is waited for
# core/sqlite_calls.BUSY_S (10 s; it was 30 s), since the processes sharing it hold it for real work.
# Once the answer is ready, both stores share core/turn_end.SETTLE_S instead.
ANSWER_S = 3.0


def loaded(raw: str | bytes) -> Any:
    """A stored turn record or document, as both stores read them: its text as UTF-8 can encode it. A
    record saved before questions were repaired on the way in may hold lone surrogates, and the notebook
    export, the audit CSV and the Slack and Teams views of it failed to encode them (core/text_repair.py)."""
    return readable_data(json.loads(raw))


class StoreUnavailable(RuntimeError):
    """The session store cannot be reached; the message is one sentence for a person.

    `may_have_written`: a write was sent and no answer came (a Redis that froze, a deadline that
    passed), so the store may still apply it; False when it was refused outright (connection refused,
    a full disk, a lock held past the busy wait), which changed nothing. "This answer was not saved"
    is only true of the second: after a frozen Redis thawed, the history held the answer."""

    def __init__(self, message: str = "", *, may_have_written: bool = False):
        super().__init__(message)
        self.may_have_written = may_have_written


class LockTimeout(RuntimeError):
    """Another turn of the same session held the lock for too long."""


class LockLost(RuntimeError):
    """The session lock expired or was taken over while a turn held it; its results must not be saved."""


@dataclass
class HeldLock:
    """What `SessionStore.lock` yields: `lost` turns True when renewal finds the lock gone or cannot
    renew it before it expires (then another turn may be running in the same session)."""

    ttl_s: float
    lost: bool = False
    last_renewed: float = field(default_factory=time.monotonic)
    waited: asyncio.Task | None = None  # the `on_wait` it started while it waited (core/lock_queue.py)
    # When (time.monotonic) the holder stops waiting for the release as it leaves: the end of its turn's
    # deadline (core/turn_end.py). None: RELEASE_WAIT_S from then.
    release_by: float | None = None

    def renewed(self, ok: bool) -> None:
        """Record a renewal attempt: False = someone else owns it now (errors go to `renewal_failed`)."""
        if ok:
            self.last_renewed = time.monotonic()
        else:
            self.lost = True

    def release_wait(self) -> float:
        """Seconds the holder waits for the lock's release; the rest goes on in the background."""
        if self.release_by is None:
            return RELEASE_WAIT_S
        return max(0.0, self.release_by - time.monotonic())

    def renewal_failed(self) -> None:
        """The store could not be reached; past the TTL the lock is as good as lost."""
        if time.monotonic() - self.last_renewed > self.ttl_s:
            self.lost = True
