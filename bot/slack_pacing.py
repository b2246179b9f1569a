"""How often a turn's stream may append, so a workspace's turns share Slack's limit instead of
running into it together.

`chat.appendStream` is Tier 4 (https://docs.slack.dev/apis/web-api/rate-limits): about 100 calls a
minute per workspace, shared by every turn answering there at once. Each turn appended at most twice
a second on its own, and the first append Slack refused (`ratelimited`, HTTP 429) ended its stream:
measured against a shared bucket of that size, 4 people asking at once left 2 of their 4 answers cut
off mid-stream ("Slack stopped taking this message"), a "Working on it…" and the whole answer again
below it; 20 at once, 17 of 20. So:

- the streams of one workspace open in this process stretch each other's interval: one stream
  appends every `TEXT_MIN_INTERVAL_S`, n of them every n × `APPEND_SHARE_S` (their sum stays near the
  tier), and
- a 429 holds every stream of the workspace for its Retry-After (at most `HOLD_MAX_S`): their text is
  kept, not dropped, and goes in one append once the hold ends (or with the stream's end).

Other processes (replicas) append into the same workspace's limit; only the hold helps there. A
stream counts as open while it appended within `ACTIVE_S`: one whose turn died uncounted drops out on
its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

TEXT_MIN_INTERVAL_S = 0.5  # between two appends of one stream's text, alone in its workspace
APPEND_SHARE_S = 0.6  # Tier 4's 100 a minute: each of n streams appends every n × this
ACTIVE_S = 15.0  # a stream that appended within this long counts as open
HOLD_MAX_S = 30.0  # a Retry-After longer than this holds the workspace's streams this long


class WorkspacePacer:
    """This process's open streams per workspace, and the hold a 429 put on each workspace's.
    One per process (it lives on the process's Slack client: `bot/slack_client.py`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._active: dict[str, dict[str, float]] = {}  # workspace → stream ts → its last append
        self._held_until: dict[str, float] = {}

    def touch(self, team: str, stream: str) -> None:
        """`stream` appended (or started) now."""
        self._active.setdefault(team, {})[stream] = self.clock()

    def forget(self, team: str, stream: str) -> None:
        """`stream` has ended: it no longer shares the workspace's appends."""
        self._active.get(team, {}).pop(stream, None)

    def open_streams(self, team: str) -> int:
        streams, now = self._active.get(team, {}), self.clock()
        for ts in [ts for ts, at in streams.items() if now - at > ACTIVE_S]:
            del streams[ts]
        return len(streams)

    def interval_s(self, team: str) -> float:
        """Between two text appends of one of the workspace's streams."""
        n = self.open_streams(team)
        return TEXT_MIN_INTERVAL_S if n <= 1 else n * APPEND_SHARE_S

    def hold(self, team: str, seconds: float) -> None:
        """Slack said to wait `seconds` (a 429's Retry-After): no stream of the workspace appends
        text until then."""
        until = self.clock() + min(max(seconds, 0.0), HOLD_MAX_S)
        self._held_until[team] = max(until, self._held_until.get(team, 0.0))

    def held_s(self, team: str) -> float:
        """Seconds the workspace's streams still wait (0 when they may append)."""
        return max(0.0, self._held_until.get(team, 0.0) - self.clock())


class TextPace:
    """One stream's text appends: at most one per its workspace's interval, none while it is held."""

    def __init__(self, pacer: WorkspacePacer, team: str):
        self.pacer, self.team = pacer, team
        self.stream = ""  # the stream's ts, once it started
        self._last = float("-inf")

    def started(self, stream: str) -> None:
        self.stream = stream
        self.pacer.touch(self.team, stream)

    def ended(self) -> None:
        if self.stream:
            self.pacer.forget(self.team, self.stream)

    def wait_s(self) -> float:
        """Seconds until this stream may append text (0: now)."""
        gap = self._last + self.pacer.interval_s(self.team) - self.pacer.clock()
        return max(0.0, gap, self.pacer.held_s(self.team))

    def held_s(self) -> float:
        return self.pacer.held_s(self.team)

    def mark(self) -> None:
        """An append (or a look at the text that found nothing to send) happened now."""
        self._last = self.pacer.clock()
        if self.stream:
            self.pacer.touch(self.team, self.stream)

    def refused(self, retry_after_s: float) -> None:
        """Slack answered 429: the workspace waits `retry_after_s`."""
        self.pacer.hold(self.team, retry_after_s)
