"""An outage of something a loop depends on (Redis under the turn workers): one log line when it
goes away, one when it is back, and a growing pause between tries meanwhile.

Why: a loop that logs every failed try (or dies and is restarted) fills the log and the terminal with
one traceback per second for as long as the outage lasts, and hammers the server it waits for. The
line that matters is the first; the pause doubles up to `max_s`, so recovery is noticed within that.
"""

from __future__ import annotations

import logging
import time


class Outage:
    """The state of one dependency as a loop sees it. Not shared: each loop has its own."""

    def __init__(self, log: logging.Logger, what: str, *, first_s: float = 0.5, max_s: float = 5.0):
        self.log = log
        self.what = what  # e.g. "Redis at 127.0.0.1:6379 (turn jobs)"
        self.first_s = first_s
        self.max_s = max_s
        self.since: float | None = None  # monotonic time of the first failure of this outage
        self.tries = 0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, reason: str) -> float:
        """Count a failed try; log once per outage. Returns the seconds to wait before the next try."""
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning(
                "%s is not reachable (%s); retrying every %g s at most until it is back",
                self.what,
                reason,
                self.max_s,
            )
        pause = min(self.first_s * 2**self.tries, self.max_s)
        self.tries += 1
        return pause

    def recovered(self) -> None:
        """A try worked: log the end of the outage (if there was one) and start over."""
        if self.since is not None:
            self.log.warning("%s is reachable again after %.0f s", self.what, time.monotonic() - self.since)
        self.since, self.tries = None, 0
