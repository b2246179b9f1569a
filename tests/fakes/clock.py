"""A controllable clock for the scheduler tests: tests move time, nothing sleeps."""

from __future__ import annotations

from datetime import datetime, timedelta


class Clock:
    """Callable like `core.schedules.utc_now`; `advance(minutes=…)` or `set(at)` moves it."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, **delta: float) -> datetime:
        self.at += timedelta(**delta)
        return self.at

    def set(self, at: datetime) -> datetime:
        self.at = at
        return at
