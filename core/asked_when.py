"""When and where a question was asked, told to the model with the question.

"Yesterday", "this week" and "last quarter" are dates on the asker's calendar. The model was told
neither the date nor the asker's time zone, and its only "now" came from SQL or Python, which run in
UTC (core/isolation.py: steps, notebooks and hosts in any zone agree on one): a Tokyo user asking for
yesterday's flights at 08:30 on 1 January got 30 December, a Los Angeles user asking for "this quarter"
at 17:00 on 31 March got the quarter that had not begun, and every weekday report scheduled in a zone
ahead of UTC read the day before yesterday.

So each question carries one line: the asker's local date, weekday and time with their IANA zone and
UTC offset, and the UTC instant when the two calendars differ. It is a text block of the question's
user message, not part of the system prompt, whose bytes never change (prompt caching); kept in the
history, it also dates the earlier questions of a thread resumed days later. The zone is the one the
surface knows (Slack's users.info, Teams' `localTimezone`, a schedule's own, the terminal's host); else
`DATATHREAD_DEFAULT_TZ`, and the line says the asker's own zone is not known. Where the surface knows
the asker's locale (Teams' `locale`, "de-DE"), the line names it: a German reader's week starts on
Monday, an American's on Sunday. A client's value that is not a BCP 47 tag is left out (it is the
client's to send, and goes into the model's input).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

MARK = "(Asked "  # how the line begins: readers of a stored question can tell it from the question
# The whole line as `asked_line` writes it, and nothing a person would type into a question.
_LINE = re.compile(
    r"\(Asked [A-Z][a-z]+day \d{4}-\d\d-\d\d \d\d:\d\d in [\w/+-]+ \(UTC[+-]\d\d:\d\d\)"
    r"(?:, the bot's default: the asker's own time zone is not known)?"
    r"(?:; in UTC it is [A-Z][a-z]+day \d{4}-\d\d-\d\d \d\d:\d\d)?"
    r"(?:; the asker's locale is [A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8}){0,3})?\. Steps run in UTC: [^()\n]+\)"
)
_LOCALE = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8}){0,3}")  # a BCP 47 tag: "de-DE", "zh-Hant-TW"


def asked_block(user_tz: str, default_tz: str, now: datetime | None = None, *, locale: str = "") -> dict:
    """The text block that dates a question asked at `now` (aware; default: this instant)."""
    return {"type": "text", "text": asked_line(user_tz, default_tz, now, locale=locale)}


def asked_line(user_tz: str, default_tz: str, now: datetime | None = None, *, locale: str = "") -> str:
    now = (now or datetime.now(UTC)).astimezone(UTC)
    zone, known = _zone(user_tz), True
    if zone is None:
        zone, known = _zone(default_tz) or ZoneInfo("UTC"), False
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    where = f"{zone.key} (UTC{offset[:3]}:{offset[3:]})"
    if not known:
        where += ", the bot's default: the asker's own time zone is not known"
    utc = "" if local.date() == now.date() else f"; in UTC it is {now:%A %Y-%m-%d %H:%M}"
    known = f"; the asker's locale is {locale}" if _LOCALE.fullmatch(locale or "") else ""
    return (
        f"{MARK}{local:%A %Y-%m-%d %H:%M} in {where}{utc}{known}. Steps run in UTC: take today, yesterday, "
        "this week, this month or this quarter on the asker's calendar, and say which dates you used.)"
    )


def is_asked_line(text: str) -> bool:
    """Whether `text` is a line `asked_line` wrote: the receipt's numbers check reads questions as
    evidence, and the date and time there (23 for 14:23) let a made-up 23 stand."""
    return _LINE.fullmatch(text) is not None


def _zone(name: str) -> ZoneInfo | None:
    """The zone named `name`, or None for a surface's odd value ("", "Local", a path, a client's
    thousands of characters: zoneinfo recursed on a long enough one)."""
    if not name or len(name) > 64:
        return None
    try:
        return ZoneInfo(name)
    except Exception:
        return None


def host_zone() -> str:
    """The IANA zone of the machine the terminal runs on: `TZ` when set (nothing when it is no IANA
    name), else where /etc/localtime points (…/zoneinfo/Asia/Kolkata), else /etc/timezone; "" when
    none says."""
    import os

    if "TZ" in os.environ:  # a POSIX rule ("JST-9") is no IANA name: not known, not /etc/localtime's
        named = os.environ["TZ"].removeprefix(":")
        return named if _zone(named) is not None else ""
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in target:
        name = target.split("/zoneinfo/", 1)[1]
        if _zone(name) is not None:
            return name
    try:
        with open("/etc/timezone", encoding="utf-8") as f:
            name = f.read().strip()
    except OSError:
        return ""
    return name if _zone(name) is not None else ""
