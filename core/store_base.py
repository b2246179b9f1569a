"""What every session store implementation shares: the history format version, the lock handle and
the errors. Kept apart from core/sessions.py (which opens a store by settings) so the stores never
import the module that imports them."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

HISTORY_VERSION = 1


class StoreUnavailable(RuntimeError):
    """The session store cannot be reached; the message is one sentence for a person."""


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

    def renewed(self, ok: bool) -> None:
        """Record a renewal attempt: False = someone else owns it now (errors go to `renewal_failed`)."""
        if ok:
            self.last_renewed = time.monotonic()
        else:
            self.lost = True

    def renewal_failed(self) -> None:
        """The store could not be reached; past the TTL the lock is as good as lost."""
        if time.monotonic() - self.last_renewed > self.ttl_s:
            self.lost = True
