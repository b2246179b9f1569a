"""`/ask schedule …`: a small fixed grammar for scheduling from a slash command, parsed without a model.

    schedule daily 09:00 QUESTION            → 0 9 * * *
    schedule weekdays 08:30 QUESTION         → 30 8 * * mon-fri
    schedule weekly mon 09:00 QUESTION       → 0 9 * * mon      (mon,thu for several days)
    schedule monthly 1 09:00 QUESTION        → 0 9 1 * *
    schedule hourly QUESTION                 → 0 * * * *
    schedule cron "0 9 * * mon" QUESTION     → as written

Times are the asker's local time; the time zone comes from the surface (Slack `users.info`, Teams'
`localTimezone`) or DATATHREAD_DEFAULT_TZ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.schedules import ScheduleError, check_cron

USAGE = (
    "Use: schedule daily 09:00 QUESTION · schedule weekdays 08:30 QUESTION · "
    "schedule weekly mon 09:00 QUESTION · schedule monthly 1 09:00 QUESTION · "
    'schedule hourly QUESTION · schedule cron "0 9 * * mon" QUESTION.'
)
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = r"(?P<h>[01]?\d|2[0-3])[:.h](?P<m>[0-5]\d)"


@dataclass(frozen=True)
class ScheduleCommand:
    """What `/ask schedule …` asked for."""

    cron: str
    question: str


def is_schedule_command(text: str) -> bool:
    return bool(re.match(r"(?i)schedule\b", text.strip()))


def _day_list(raw: str) -> str:
    days = [d.strip().lower()[:3] for d in raw.split(",") if d.strip()]
    if not days or any(d not in _DAYS for d in days):
        raise ScheduleError(f"Unknown weekday {raw!r}: use mon, tue, wed, thu, fri, sat or sun. {USAGE}")
    return ",".join(days)


def parse_schedule_command(text: str) -> ScheduleCommand:
    """The cron expression and question of `schedule …`; ScheduleError (one sentence + usage) otherwise."""
    body = re.sub(r"(?i)^\s*schedule\b", "", text).strip()
    patterns = (
        (rf"(?i)daily\s+{_TIME}\s+(?P<q>.+)", lambda m: f"{int(m['m'])} {int(m['h'])} * * *"),
        (rf"(?i)weekdays\s+{_TIME}\s+(?P<q>.+)", lambda m: f"{int(m['m'])} {int(m['h'])} * * mon-fri"),
        (
            rf"(?i)weekly\s+(?P<d>[a-z,]+)\s+{_TIME}\s+(?P<q>.+)",
            lambda m: f"{int(m['m'])} {int(m['h'])} * * {_day_list(m['d'])}",
        ),
        (
            rf"(?i)monthly\s+(?P<dom>[12]?\d|3[01])\s+{_TIME}\s+(?P<q>.+)",
            lambda m: f"{int(m['m'])} {int(m['h'])} {int(m['dom'])} * *",
        ),
        (r"(?i)hourly\s+(?P<q>.+)", lambda m: "0 * * * *"),
        (r"(?i)cron\s+[\"'“](?P<c>[^\"'”]+)[\"'”]\s+(?P<q>.+)", lambda m: check_cron(m["c"])),
    )
    for pattern, to_cron in patterns:
        match = re.fullmatch(pattern, body, flags=re.DOTALL)
        if match:
            question = match["q"].strip()
            return ScheduleCommand(cron=check_cron(to_cron(match)), question=question)
    raise ScheduleError(f"I couldn't read that schedule. {USAGE}")
