"""Scheduled answers: what a schedule is, and when it runs.

A schedule is a standing question ("every Monday 09:00 Europe/Berlin, post last week's delays by
carrier in #analytics"). This module owns its shape, the validation of what people type (cron
expression, time zone) and the occurrence arithmetic. Date arithmetic is croniter's, over zoneinfo
time zones; the one rule added here is cron's own for the autumn change: a job at a fixed time of day
runs once when that wall-clock time happens twice (a job with a wildcard hour runs every real hour).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from core.config_types import close_time_zone, time_zone_named
from core.policy import check_sql

Surface = Literal["slack", "teams"]
SURFACES: tuple[str, ...] = ("slack", "teams")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The production clock; tests pass their own."""
    return datetime.now(UTC)


class ScheduleError(ValueError):
    """Something a person typed is not a valid schedule; the message is one sentence for them."""


class OverCap(ScheduleError):
    """A new schedule would pass a cap on active schedules (per channel, per owner)."""


class UnknownSchedule(LookupError):
    """No schedule has that id; the message is one sentence for a person."""


@dataclass
class Schedule:
    """One standing question. Timestamps are ISO 8601 strings with an offset (UTC) so the record is
    plain JSON in either store."""

    id: str
    cron: str
    tz: str
    surface: Surface
    channel: str
    question: str
    owner: str = ""  # the creator: runs are turns under this identity
    team_id: str = ""  # Slack team / Teams tenant
    # Slack: the owner's Enterprise Grid organization (E…) when it was made, "" elsewhere: the access
    # rules may list the organization alone (DATATHREAD_ALLOWED_TEAMS=E…), which a workspace id never
    # matches, so a schedule that kept only its workspace was refused to the organization's own people
    enterprise_id: str = ""
    thread: str = ""  # post every run in this thread; empty = a new thread per run
    service_url: str = ""  # Teams: where the Bot Connector of this conversation lives
    # Teams: the conversation's kind (channel, groupChat, personal), which decides how a run is posted;
    # "" in schedules made before it was recorded (`teams_conversation_type` reads the id then)
    conversation_type: str = ""
    sql: str = ""  # the verified SQL of the answer it came from, if any (a hint for the model)
    paused: bool = False
    paused_reason: str = ""
    created_at: str = ""
    cursor: str = ""  # the last occurrence handled (run or skipped); runs are due after it
    failures: int = 0  # runs failed in a row (after their retry)
    runs: int = 0
    skipped: int = 0  # occurrences missed while no scheduler ran (noted, never replayed)
    last_run: str = ""
    last_outcome: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Schedule:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def cursor_time(self) -> datetime:
        return datetime.fromisoformat(self.cursor or self.created_at)

    def next_run(self, now: datetime) -> datetime | None:
        """The first occurrence after max(cursor, now) in the schedule's zone; None while paused."""
        if self.paused:
            return None
        return next_occurrence(self.cron, self.tz, max(self.cursor_time(), now))

    @property
    def channel_ref(self) -> str:
        """Its channel as the surface shows it: Slack renders `<#C123>` as the channel's name."""
        return f"<#{self.channel}>" if self.surface == "slack" else self.channel

    def describe(self) -> str:
        """'`0 9 * * 1` (Europe/Berlin) in <#C123>' — for the owner's notes (Slack shows the name)."""
        where = self.channel_ref + (f", thread {self.thread}" if self.thread else "")
        return f"`{self.cron}` ({self.tz}) in {where}"


MAX_QUESTION = 2000

# What "Schedule…" under an answer offers on every surface (in the person's own time zone); any
# other cadence: `/ask schedule`, "@datathread every …", or `datathread schedule add`.
ANSWER_CADENCES = (
    ("Every weekday at 9:00", "0 9 * * mon-fri"),
    ("Every Monday at 9:00", "0 9 * * mon"),
    ("The 1st of each month at 9:00", "0 9 1 * *"),
)


def new_schedule(
    *,
    cron: str,
    tz: str,
    surface: str,
    channel: str,
    question: str,
    now: datetime,
    owner: str = "",
    team_id: str = "",
    enterprise_id: str = "",
    thread: str = "",
    service_url: str = "",
    conversation_type: str = "",
    sql: str = "",
) -> Schedule:
    """A validated schedule whose first run is the first occurrence after `now`. A Teams schedule
    records its conversation's kind: `conversation_type` as Teams said it, else read from the id."""
    cron, tz = check_cron(cron), check_tz(tz)
    typed, surface = surface, surface.strip().lower()  # like --tz: `SLACK` is slack
    if surface not in SURFACES:
        raise ScheduleError(f"Unknown surface {typed!r}: use slack or teams.")
    check_where(surface, channel.strip(), thread.strip())
    if not question.strip():
        raise ScheduleError("A schedule needs a question to ask.")
    if len(question.strip()) > MAX_QUESTION:  # asked, posted and recorded on every run
        raise ScheduleError(
            f"A schedule's question can be at most {MAX_QUESTION:,} characters (this one has "
            f"{len(question.strip()):,}): shorten it."
        )
    kind = (conversation_type or teams_conversation_type(channel)) if surface == "teams" else ""
    if kind not in ("", "channel") and thread.strip():  # its runs went to a thread Teams does not have
        raise ScheduleError(
            f"{channel.strip()} is a Teams chat, and a chat has no threads: leave out the thread (each "
            "run is a message in the chat)."
        )
    stamp = now.astimezone(UTC).isoformat()
    return Schedule(
        id=uuid.uuid4().hex[:10],
        cron=cron,
        tz=tz,
        surface=surface,  # type: ignore[arg-type]
        channel=channel.strip(),
        question=question.strip(),
        owner=owner,
        team_id=team_id,
        enterprise_id=enterprise_id.strip(),
        thread=thread.strip(),
        service_url=service_url,
        conversation_type=kind,
        sql=sql,
        created_at=stamp,
        cursor=stamp,
    )


# What the ids a schedule posts with look like: a name or an id of the other surface could only fail
# at the first run, days later and in nobody's sight. Slack: https://docs.slack.dev/reference/objects/conversation-object
# (C…/G…/D…), a message's `ts` is seconds.microseconds. Teams conversation ids are `<kind>:<…>`
# (19:…@thread.tacv2 for a channel, a:… or 29:… elsewhere): only a shape that cannot be one is refused.
SLACK_CHANNEL = re.compile(r"[CGD][A-Z0-9]+")
SLACK_TS = re.compile(r"\d+\.\d+")
TEAMS_CONVERSATION = re.compile(r"[0-9A-Za-z]+:\S+")


TEAMS_CHANNEL_IDS = ("@thread.tacv2", "@thread.skype")  # a team's channel; older channels: .skype


def teams_conversation_type(conversation_id: str) -> str:
    """Teams' `conversationType` of a conversation, read from the shape of its id (for a schedule
    nobody told): a channel is 19:…@thread.tacv2 (@thread.skype before 2020), a group or meeting
    chat 19:…@thread.v2 (19:meeting_…), a personal chat with the bot a:… (or 29:…). It matters
    because a bot can start a new thread in a channel but cannot create a group chat: a run for a
    chat goes into the chat itself.
    https://learn.microsoft.com/microsoftteams/platform/bots/how-to/conversations/send-proactive-messages"""
    base = conversation_id.strip().partition(";messageid=")[0].lower()
    if base.endswith(TEAMS_CHANNEL_IDS):
        return "channel"
    return "groupChat" if base.startswith("19:") else "personal"


def check_where(surface: str, channel: str, thread: str) -> None:
    """ScheduleError in one sentence when the channel or thread cannot be one of the surface's ids."""
    if not channel:
        raise ScheduleError("A schedule needs a channel to post in.")
    if surface == "slack" and not SLACK_CHANNEL.fullmatch(channel):
        raise ScheduleError(
            f"Slack needs the channel's id, not {channel!r}: it looks like C0123ABCD and is at the "
            "bottom of the channel's details (click the channel's name)."
        )
    if surface == "teams" and not TEAMS_CONVERSATION.fullmatch(channel):
        raise ScheduleError(
            f"Teams needs the conversation id, not {channel!r}: a channel's looks like "
            "19:…@thread.tacv2 and is in the link that 'Get link to channel' gives."
        )
    if surface == "slack" and thread and not SLACK_TS.fullmatch(thread):
        raise ScheduleError(
            f"Slack needs the thread's ts, not {thread!r}: it looks like 1712345678.123456 (the ts of "
            "the thread's first message)."
        )


def check_verified_sql(sql: str, *, dialect: str) -> str:
    """The SQL a schedule's runs start from, if the read-only policy lets it run; ScheduleError
    otherwise. Runs hand it to the model, whose query is checked then — too late for the person who
    typed `--sql "DROP TABLE flights"` and was told nothing. No allowlist here: the owner's applies
    when a run queries."""
    sql = sql.strip()
    if sql and not (verdict := check_sql(sql, dialect=dialect)).allowed:
        raise ScheduleError(f"The verified SQL would be refused when the schedule runs: {verdict.reason}")
    return sql


NICKNAMES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")


def check_cron(expr: str) -> str:
    """The expression, normalised; ScheduleError in one sentence when croniter cannot read it."""
    expr = " ".join(expr.split())
    expr = expr.lower() if expr.startswith("@") else expr
    if expr.startswith("@") and expr not in NICKNAMES:  # croniter spoke of "6 or 7 columns"
        why = (
            "a schedule runs at times of day, not when datathread starts; "
            if expr.lower() == "@reboot"
            else ""
        )
        raise ScheduleError(
            f"Invalid cron expression {expr!r}: {why}use five fields, minute hour day month weekday "
            f"(e.g. '0 9 * * mon'), or one of {', '.join(NICKNAMES)}."
        )
    if len(expr.split()) != 5 and not expr.startswith("@"):
        raise ScheduleError(
            f"Invalid cron expression {expr!r}: use five fields, minute hour day month weekday "
            "(e.g. '0 9 * * mon')."
        )
    if not expr.startswith("@"):
        _check_fields(expr)
    try:
        croniter(expr, datetime(2026, 1, 1, tzinfo=UTC)).get_next(datetime)  # one that never fires fails
    except CroniterBadDateError:
        raise ScheduleError(f"Invalid cron expression {expr!r}: {_never_why(expr)}.") from None
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ScheduleError(f"Invalid cron expression {expr!r}: {str(exc).rstrip('.')}.") from None
    if problem := too_often(expr):
        raise ScheduleError(problem)
    return expr


def too_often(expr: str) -> str:
    """Why `expr` runs more often than a schedule may (checked when one is made, and when one made
    before the limit comes due), or ""."""
    if (gap := _shortest_gap_min(expr)) >= MIN_GAP_MIN:
        return ""
    return (
        f"{expr!r} would run again {gap} minute{'s' if gap != 1 else ''} after a run: a scheduled answer "
        f"runs at most every {MIN_GAP_MIN} minutes (each run is a whole answer: model calls and queries)."
    )


MIN_GAP_MIN = 15  # `* * * * *` was taken: 1,440 answers a day, past any rate limit for an admin


@functools.lru_cache(maxsize=256)  # every tick asks of every schedule
def _shortest_gap_min(expr: str) -> int:
    """The shortest time between two runs, in minutes, over its first 200 runs (enough to meet every
    gap of an hour's and a day's pattern)."""
    it = croniter(expr, datetime(2026, 1, 5, tzinfo=UTC))
    runs = [it.get_next(datetime) for _ in range(200)]
    return min(int((b - a).total_seconds() // 60) for a, b in zip(runs, runs[1:], strict=False))


# What each of the five fields takes, in the words a person checks their expression against.
FIELDS = (
    ("a minute", "first", "0–59"),
    ("an hour", "second", "0–23"),
    ("a day of the month", "third", "1–31"),
    ("a month", "fourth", "1–12 or jan–dec"),
    ("a weekday", "fifth", "0–7 or mon–sun"),
)
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def _check_fields(expr: str) -> None:
    """ScheduleError naming the first field croniter cannot read and what it takes: croniter's own
    words ("[61 9 * * *] is not acceptable, out of range.") named neither. Each field is read alone,
    the others '*', so the one at fault is the one named."""
    parts = expr.split()
    for i, (what, which, takes) in enumerate(FIELDS):
        alone = " ".join(part if j == i else "*" for j, part in enumerate(parts))
        try:
            croniter(alone)
        except (CroniterBadCronError, ValueError, KeyError):
            raise ScheduleError(
                f"Invalid cron expression {expr!r}: {parts[i]!r} is not {what} (the {which} field takes "
                f"{takes})."
            ) from None


def _never_why(expr: str) -> str:
    """Why an expression of valid fields never fires: "February has no day 31", or in general words."""
    _, _, days, months, weekdays = croniter(expr).expanded
    if weekdays == ["*"] and days != ["*"] and months != ["*"] and all(isinstance(d, int) for d in days):
        names = [MONTHS[m - 1] for m in months]
        have = "has" if len(names) == 1 else "have"
        listed = " or ".join(str(d) for d in days)
        return f"{' and '.join(names)} {have} no day {listed}, so it would never run"
    return "it never matches a real date, so it would never run"


def said_date(moment: datetime | None) -> str:
    """A run's time as people read it, in the schedule's own zone: 'Mon 30 Nov 2026, 09:00'."""
    return moment.strftime("%a %-d %b %Y, %H:%M") if moment else "—"


def check_tz(name: str) -> str:
    """The IANA time zone `name` names, as the database spells it (`europe/berlin` → Europe/Berlin);
    ScheduleError, with the closest known name if there is one, for anything else."""
    if (zone := time_zone_named(name)) is not None:
        return zone
    close = close_time_zone(name)
    hint = f"did you mean {close}?" if close else "use an IANA name such as Europe/Berlin or UTC."
    raise ScheduleError(f"Unknown time zone {name!r}: {hint}")


def _fixed_hour(expr: str) -> bool:
    """True when the hour field names hours (not '*'): such a job runs once on a repeated hour."""
    hours = croniter(expr).expanded[1]
    return hours != ["*"] and len(hours) < 24


def _repeat_of_earlier(at: datetime) -> bool:
    """True when `at` is the second time its wall-clock time happens that night (the clocks went back
    and 02:30 comes round again). Not just the run before it: `*/30 2 * * *` goes 02:00, 02:30 and
    then 02:00 again, so the repeat must be known from the zone, not from the previous occurrence."""
    zone = at.tzinfo
    wall = at.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    is_real = first.astimezone(zone).replace(tzinfo=None) == wall  # not a time the spring change skips
    return is_real and first < at.astimezone(UTC)


def occurrences(expr: str, tz: str, after: datetime, until: datetime, *, limit: int = 100_000):
    """Occurrences in (after, until], aware datetimes in the zone, oldest first (at most `limit`).

    A job with fixed hours runs each wall-clock time once: in the hour the autumn change repeats, the
    second pass is left out (`*/30 2 * * *` runs at 02:00 and 02:30 once each, not four times). A
    wildcard-hour job runs in real time through both passes, as docs/SCHEDULES.md promises."""
    zone = ZoneInfo(tz)
    it = croniter(expr, after.astimezone(zone))
    fixed = _fixed_hour(expr)
    for _ in range(limit):
        at: datetime = it.get_next(datetime)
        if at > until:
            return
        if fixed and _repeat_of_earlier(at):
            continue
        yield at


def next_occurrence(expr: str, tz: str, after: datetime) -> datetime:
    """The first occurrence strictly after `after`, in the schedule's zone."""
    return next(occurrences(expr, tz, after, after + timedelta(days=366 * 5)))


def iso(at: datetime) -> str:
    """ISO 8601 with the offset: what `schedule list --json` prints and what records keep."""
    return at.isoformat(timespec="seconds")
