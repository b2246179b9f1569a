"""Releasing a session lock without keeping the turn waiting on a store that stopped answering.

A turn leaves its lock as it ends. Against a Redis that froze (a long fork, a failover, `kill -STOP`),
the release took redis-py's three tries of the 5 s read timeout, 15 s, before the turn could say
anything. The lock does not need the turn to wait: it expires by itself (`DATATHREAD_LOCK_TTL`), and a
holder that died on this host is taken over at once (core/lock_owner.py). So the turn waits for the
release only until `HeldLock.release_wait()` — the end of its own deadline (core/turn_end.py) — and the
release goes on in the background, tried again until it succeeds or the lock has expired anyway.
Used by both session stores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from core.background import Background

log = logging.getLogger("datathread.store")
RETRY_EVERY_S = 0.25


class Releases:
    """The lock releases of one store that may outlive the turn that asked for them."""

    def __init__(self) -> None:
        self._tasks = Background()

    async def release(
        self,
        attempt: Callable[[], Awaitable[None]],
        *,
        name: str,
        ttl_s: float,
        wait_s: float,
        errors: tuple[type[BaseException], ...],
        reason: Callable[[BaseException], str] = str,
    ) -> None:
        """Run `attempt()` (which returns once the lock is freed, or is no longer ours) until it
        succeeds or `ttl_s` has passed, waiting for it at most `wait_s`; errors of `errors` are retried.
        Cancelling the caller leaves the release running."""
        task = self._tasks.start(_until_released(attempt, name, ttl_s, errors, reason))
        await asyncio.wait({task}, timeout=wait_s)

    def pending(self) -> int:
        return len(self._tasks)

    def cancel(self) -> None:
        """The store closes: the locks left expire (a dead holder's at once, on this host)."""
        self._tasks.cancel()


async def _until_released(
    attempt: Callable[[], Awaitable[None]],
    name: str,
    ttl_s: float,
    errors: tuple[type[BaseException], ...],
    reason: Callable[[BaseException], str],
) -> None:
    deadline = time.monotonic() + ttl_s
    warned = False
    while True:
        try:
            await attempt()
            return
        except errors as exc:
            if not warned:  # one line per lock, not one per try
                log.warning("could not release lock %s (%s); retrying until it expires", name, reason(exc))
                warned = True
        except Exception as exc:  # not the store being away: trying again would not help
            log.warning(
                "could not release lock %s (%s: %s); it expires by itself", name, type(exc).__name__, exc
            )
            return
        if time.monotonic() + RETRY_EVERY_S >= deadline:
            return  # expired by now: nothing left to free
        await asyncio.sleep(RETRY_EVERY_S)
