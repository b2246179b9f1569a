"""Releasing a session lock, or giving up a lock try, without keeping the turn waiting on a store that
stopped answering.

A turn leaves its lock as it ends. Against a Redis that froze (a long fork, a failover, `kill -STOP`),
the release took redis-py's three tries of the 5 s read timeout, 15 s, before the turn could say
anything. The lock does not need the turn to wait: it expires by itself (`DATATHREAD_LOCK_TTL`), and a
holder that died on this host is taken over at once (core/lock_owner.py). So the turn waits for the
release only until `HeldLock.release_wait()` — the end of its own deadline (core/turn_end.py) — and the
release goes on in the background, tried again until it succeeds or the lock has expired anyway.

A lock try that failed is given up the same way, in the background, but only when it may have left
something in the store (core/lock_queue.py, `left_behind`): a try a frozen Redis took and never answered
(it may hold the lock when Redis thaws), or a place in the queue an earlier try took. A try refused
outright left nothing: giving it up anyway started a loop of connection attempts per turn for the lock's
TTL while Redis was down (100 messages: ~400 connections a second, and a burst as it came back).
Used by both session stores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.background import Background

log = logging.getLogger("datathread.store")
RETRY_EVERY_S = 0.25


@dataclass(frozen=True)
class _Words:
    """How the log says one kind of background work on a lock (one line per lock, not one per try)."""

    what: str  # "could not {what} <lock> (why)"
    retrying: str  # what happens next while the store does not answer
    done: str | None = None  # said once it succeeds after a failure ("%s": the lock)


_RELEASE = _Words("release lock", "retrying until it expires")
_GIVE_UP = _Words(
    "give up a lock try on",
    "leaving its queue, and freeing the lock if the try took it, once the store answers (until that "
    "lapses by itself)",
    done="gave up a lock try on %s: left its queue (and freed the lock, had the try taken it)",
)


class Releases:
    """The lock releases and given-up tries of one store that may outlive the turn that asked for them."""

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
        task = self._tasks.start(_until_done(attempt, name, ttl_s, errors, reason, _RELEASE))
        await asyncio.wait({task}, timeout=wait_s)

    def give_up(
        self,
        attempt: Callable[[], Awaitable[None]],
        *,
        name: str,
        until_s: float,
        errors: tuple[type[BaseException], ...],
        reason: Callable[[BaseException], str] = str,
    ) -> None:
        """In the background, run `attempt()` (leave the lock's queue, free the lock if a failed try took
        it) until it succeeds or `until_s` has passed (what the try may have left has lapsed by then)."""
        self._tasks.start(_until_done(attempt, name, until_s, errors, reason, _GIVE_UP))

    def pending(self) -> int:
        return len(self._tasks)

    def cancel(self) -> None:
        """The store closes: the locks left expire (a dead holder's at once, on this host)."""
        self._tasks.cancel()


async def _until_done(
    attempt: Callable[[], Awaitable[None]],
    name: str,
    ttl_s: float,
    errors: tuple[type[BaseException], ...],
    reason: Callable[[BaseException], str],
    words: _Words,
) -> None:
    deadline = time.monotonic() + ttl_s
    warned = False
    while True:
        try:
            await attempt()
            if warned and words.done:
                log.info(words.done, name)
            return
        except errors as exc:
            if not warned:  # one line per lock, not one per try
                log.warning("could not %s %s (%s); %s", words.what, name, reason(exc), words.retrying)
                warned = True
        except Exception as exc:  # not the store being away: trying again would not help
            log.warning(
                "could not %s %s (%s: %s); it lapses by itself", words.what, name, type(exc).__name__, exc
            )
            return
        if time.monotonic() + RETRY_EVERY_S >= deadline:
            return  # expired by now: nothing left to free
        await asyncio.sleep(RETRY_EVERY_S)
