"""Keeps a held session lock alive from its own thread, whatever the event loop is doing.

A session lock expires `ttl_s` after its last renewal so that a dead replica cannot hold a thread
forever. Renewing it from the event loop ties its life to the loop's: one long stall (a slow CPU-bound
call, a blocking library) and the lock expires while the turn is still running, the thread's next
message starts on another replica, and the first answer is dropped. A keeper renews from a daemon
thread instead, through its own connection, so only the death (or total freeze) of the process — or a
store that stays unreachable for a whole TTL — loses the lock. Used by both session stores.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from core.store_base import HeldLock

log = logging.getLogger("datathread.store")


class LockKeeper:
    """Calls ``renew()`` every ``ttl_s / 3`` from a daemon thread and reports to ``held``.

    ``renew`` returns False when the lock is no longer ours (then the keeper stops: a lost lock is not
    taken back) and raises one of ``errors`` when the store cannot be reached (retried; past the TTL
    the lock counts as lost). ``close`` runs in the thread as it exits (its own connection).
    """

    def __init__(
        self,
        name: str,
        renew: Callable[[], bool],
        held: HeldLock,
        *,
        errors: tuple[type[BaseException], ...],
        close: Callable[[], None] | None = None,
    ):
        self.name = name
        self.held = held
        self._renew = renew
        self._errors = errors
        self._close = close
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"datathread-lock-keeper:{name}", daemon=True)

    def start(self) -> LockKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (never blocks the caller; the thread exits at once or after its current call)."""
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        interval = max(self.held.ttl_s / 3, 0.01)
        try:
            while not self._stop.wait(interval):
                try:
                    ok = self._renew()
                except self._errors as exc:
                    log.warning("could not renew lock %s: %s", self.name, type(exc).__name__)
                    self.held.renewal_failed()
                    continue
                if self._stop.is_set():
                    return  # released meanwhile: what the store says now is not news about this turn
                self.held.renewed(ok)
                if not ok:
                    log.warning("lock %s was lost (expired or taken over) while held", self.name)
                    return
        finally:
            if self._close is not None:
                self._close()
