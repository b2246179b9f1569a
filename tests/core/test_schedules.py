"""Schedules: cron and time zone validation, occurrences across daylight-saving changes in two zones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.schedules import (
    Schedule,
    ScheduleError,
    check_cron,
    check_tz,
    iso,
    new_schedule,
    next_occurrence,
    occurrences,
)

NOW = datetime(2026, 11, 23, 7, 0, tzinfo=UTC)  # a Monday, 08:00 in Berlin


@pytest.mark.parametrize(
    ("expr", "normalised"),
    [
        ("0 9 * * mon", "0 9 * * mon"),
        ("  30   7 * * 1-5 ", "30 7 * * 1-5"),
        ("*/15 * * * *", "*/15 * * * *"),
        ("@weekly", "@weekly"),
    ],
)
def test_valid_cron_expressions_are_normalised(expr, normalised):
    assert check_cron(expr) == normalised


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("61 * * * *", "Invalid cron expression '61 * * * *'"),
        ("0 9 * * mo", "Invalid cron expression"),
        ("every monday", "five fields"),
        ("0 9 * *", "five fields"),
        ("0 0 30 2 *", "Invalid cron expression"),  # February 30th never comes
        # croniter's own words spoke of "5, 6 or 7 columns", and @reboot has no time to run at
        (
            "@reboot",
            "'@reboot': a schedule runs at times of day, not when datathread starts; use five fields",
        ),
        (
            "@every5m",
            "'@every5m': use five fields, minute hour day month weekday (e.g. '0 9 * * mon'), or one of @hourly",
        ),
    ],
)
def test_invalid_cron_expressions_fail_in_one_sentence(expr, says):
    with pytest.raises(ScheduleError) as info:
        check_cron(expr)
    message = str(info.value)
    assert says in message and message.endswith(".") and "\n" not in message


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("61 9 * * *", "'61' is not a minute (the first field takes 0–59)."),
        ("0 25 * * *", "'25' is not an hour (the second field takes 0–23)."),
        ("0 9 32 * *", "'32' is not a day of the month (the third field takes 1–31)."),
        ("0 9 * 13 *", "'13' is not a month (the fourth field takes 1–12 or jan–dec)."),
        ("0 9 * * mo", "'mo' is not a weekday (the fifth field takes 0–7 or mon–sun)."),
        ("*/0 * * * *", "'*/0' is not a minute (the first field takes 0–59)."),
        ("0 9 31 2 *", "February has no day 31, so it would never run."),
        ("0 9 31 4,6 *", "April and June have no day 31, so it would never run."),
    ],
)
def test_cron_mistakes_name_the_field_and_what_it_takes(expr, says):
    """croniter's words were the message: "[61 9 * * *] is not acceptable, out of range." and, for a
    date that never comes, "failed to find next date."."""
    with pytest.raises(ScheduleError) as info:
        check_cron(expr)
    assert str(info.value) == f"Invalid cron expression {expr!r}: {says}"


def test_time_zones_are_iana_names():
    assert check_tz(" Europe/Berlin ") == "Europe/Berlin"
    for bad in ("Europe/Berln", "CEST+1", "", "../etc/passwd"):
        with pytest.raises(ScheduleError, match="Unknown time zone"):
            check_tz(bad)


@pytest.mark.parametrize(
    ("typed", "zone"),
    [("utc", "UTC"), ("europe/berlin", "Europe/Berlin"), (" AMERICA/NEW_YORK ", "America/New_York")],
)
def test_time_zones_as_people_type_them_are_the_databases_names(typed, zone):
    """`--tz utc` was refused (zoneinfo finds zones by file name, case-sensitive on Linux)."""
    assert check_tz(typed) == zone


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("Europe/Berln", "Unknown time zone 'Europe/Berln': did you mean Europe/Berlin?"),
        ("Mars/Olympus", "Unknown time zone 'Mars/Olympus': use an IANA name such as Europe/Berlin or UTC."),
    ],
)
def test_an_unknown_time_zone_names_the_closest_known_one(typed, says):
    with pytest.raises(ScheduleError) as info:
        check_tz(typed)
    assert str(info.value) == says


def test_new_schedule_validates_everything_and_starts_after_now():
    s = new_schedule(
        cron="0 9 * * mon", tz="Europe/Berlin", surface="slack", channel="C1", question="q", now=NOW
    )
    assert iso(s.next_run(NOW)) == "2026-11-23T09:00:00+01:00"  # later today
    assert Schedule.from_dict(s.to_dict()) == s
    for bad in (
        {"surface": "discord"},
        {"channel": " "},
        {"question": ""},
        {"cron": "nope"},
        {"tz": "Mars/Olympus"},
    ):
        kwargs = {"cron": "0 9 * * mon", "tz": "UTC", "surface": "slack", "channel": "C1", "question": "q"}
        with pytest.raises(ScheduleError):
            new_schedule(**{**kwargs, **bad}, now=NOW)


@pytest.mark.parametrize(
    ("surface", "channel", "thread", "says"),
    [
        ("slack", "#general", "", "Slack needs the channel's id, not '#general'"),
        ("slack", "c0123abcd", "", "it looks like C0123ABCD"),
        ("slack", "U0123ABCD", "", "Slack needs the channel's id"),  # a person, not a conversation
        ("teams", "C0001", "", "Teams needs the conversation id, not 'C0001'"),
        ("teams", "General", "", "a channel's looks like 19:…@thread.tacv2"),
        ("slack", "C0123ABCD", "notats", "Slack needs the thread's ts, not 'notats'"),
        ("slack", "C0123ABCD", "1712345678", "it looks like 1712345678.123456"),
        # a chat has no threads: every run would have posted a reply to a thread Teams does not have
        ("teams", "19:9a8b7c6d@thread.v2", "1700000000001", "a chat has no threads: leave out the thread"),
        ("teams", "a:1personal-chat-ada", "1700000000001", "each run is a message in the chat"),
    ],
)
def test_a_channel_or_thread_that_cannot_be_the_surfaces_id_is_refused_at_once(
    surface, channel, thread, says
):
    """`schedule add` took '#general' (a name) and 'notats': they failed only at the first run."""
    with pytest.raises(ScheduleError) as info:
        new_schedule(
            cron="0 9 * * *", tz="UTC", surface=surface, channel=channel, thread=thread, question="q", now=NOW
        )
    assert says in str(info.value) and str(info.value).endswith(".")


@pytest.mark.parametrize(
    ("surface", "channel", "thread"),
    [
        ("slack", "C0123ABCD", ""),
        ("slack", "G01ABC", "1712345678.123456"),
        ("slack", "D024BE91L", ""),
        ("teams", "19:general@thread.tacv2", "1700000000001"),
        ("teams", "19:meeting_abc@thread.v2", ""),
        ("teams", "a:1personal-chat-ada", ""),
        ("SLACK", "C1", ""),  # the surface in any case, like the time zone
        (" Teams ", "19:x@thread.skype", ""),
    ],
)
def test_real_ids_of_each_surface_are_taken(surface, channel, thread):
    s = new_schedule(
        cron="0 9 * * *", tz="UTC", surface=surface, channel=channel, thread=thread, question="q", now=NOW
    )
    assert (s.surface, s.channel, s.thread) == (surface.strip().lower(), channel, thread)


def test_paused_schedules_have_no_next_run():
    s = new_schedule(cron="0 9 * * *", tz="UTC", surface="teams", channel="19:x", question="q", now=NOW)
    s.paused = True
    assert s.next_run(NOW) is None


# --- daylight saving: Europe/Berlin (last Sundays of March/October) and America/New_York -----------


def _run(expr: str, tz: str, start: datetime, days: int) -> list[str]:
    return [iso(at) for at in occurrences(expr, tz, start, start + timedelta(days=days))]


def test_berlin_spring_forward_runs_a_missing_time_once_at_the_next_valid_minute():
    runs = _run("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 12, tzinfo=UTC), 3)
    assert runs == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]


def test_berlin_fall_back_runs_a_repeated_time_once():
    runs = _run("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, tzinfo=UTC), 3)
    assert runs == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]


def test_fall_back_repeat_is_skipped_even_when_the_cursor_sits_on_the_first_one():
    # The tick resumes from the occurrence it handled last: the second 02:30 must not run.
    first = datetime.fromisoformat("2026-10-25T02:30:00+02:00")
    assert iso(next_occurrence("30 2 * * *", "Europe/Berlin", first)) == "2026-10-26T02:30:00+01:00"


def test_hourly_jobs_run_every_real_hour_through_the_fall_back():
    runs = _run("0 * * * *", "Europe/Berlin", datetime(2026, 10, 24, 22, 30, tzinfo=UTC), 0.15)
    assert runs == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_new_york_weekly_report_keeps_9am_local_across_both_changes():
    spring = _run("0 9 * * mon", "America/New_York", datetime(2026, 3, 1, tzinfo=UTC), 14)
    assert spring == ["2026-03-02T09:00:00-05:00", "2026-03-09T09:00:00-04:00"]
    autumn = _run("0 9 * * mon", "America/New_York", datetime(2026, 10, 26, tzinfo=UTC), 14)
    assert autumn == ["2026-10-26T09:00:00-04:00", "2026-11-02T09:00:00-05:00"]
    # The same wall-clock time is a different UTC instant on each side of the change.
    utc = [datetime.fromisoformat(a).astimezone(UTC).hour for a in autumn]
    assert utc == [13, 14]


def test_new_york_spring_forward_and_fall_back_for_a_fixed_time():
    spring = _run("30 2 * * *", "America/New_York", datetime(2026, 3, 7, 12, tzinfo=UTC), 2)
    assert spring == ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    autumn = _run("30 1 * * *", "America/New_York", datetime(2026, 10, 31, 12, tzinfo=UTC), 2)
    assert autumn == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]


@pytest.mark.parametrize(
    ("expr", "night"),
    [
        # every half hour of 02:xx: the repeat came back after 02:30 as a 02:00 (four runs that night)
        ("*/30 2 * * *", ["02:00:00+02:00", "02:30:00+02:00"]),
        # several listed hours with several minutes: only the doubled hour's wall times are held back
        (
            "0,30 1-3 * * *",
            ["01:00:00+02:00", "01:30:00+02:00", "02:00:00+02:00", "02:30:00+02:00", "03:00:00+01:00", "03:30:00+01:00"],
        ),
        ("15,45 2,14 * * *", ["02:15:00+02:00", "02:45:00+02:00", "14:15:00+01:00", "14:45:00+01:00"]),
    ],
)  # fmt: skip
def test_berlin_fall_back_runs_each_fixed_wall_clock_time_once_for_multi_minute_jobs(expr, night):
    start = datetime(2027, 10, 30, 22, tzinfo=UTC)  # midnight in Berlin; the clocks go back at 03:00
    runs = _run(expr, "Europe/Berlin", start, 1)
    assert [r for r in runs if r.startswith("2027-10-31")] == [f"2027-10-31T{t}" for t in night]


def test_a_cursor_on_the_first_pass_does_not_bring_the_repeated_half_hours_back():
    """The tick resumes from the last occurrence it handled, 02:30 on the first pass."""
    cursor = datetime.fromisoformat("2027-10-31T02:30:00+02:00")
    assert iso(next_occurrence("*/30 2 * * *", "Europe/Berlin", cursor)) == "2027-11-01T02:00:00+01:00"


@pytest.mark.parametrize(
    ("expr", "night"),
    [
        # 02:00 and 02:30 do not exist that night: one run at the next valid minute, not two
        ("*/30 2 * * *", ["03:00:00+02:00"]),
        ("0,30 1-3 * * *", ["01:00:00+01:00", "01:30:00+01:00", "03:00:00+02:00", "03:30:00+02:00"]),
    ],
)
def test_berlin_spring_forward_runs_a_multi_minute_fixed_hour_job_once_in_the_missing_hour(expr, night):
    start = datetime(2027, 3, 27, 23, tzinfo=UTC)  # midnight in Berlin; the clocks jump 02:00 → 03:00
    runs = _run(expr, "Europe/Berlin", start, 1)
    assert [r for r in runs if r.startswith("2027-03-28")] == [f"2027-03-28T{t}" for t in night]


def test_wildcard_hour_jobs_still_run_every_real_half_hour_through_the_fall_back():
    runs = _run("*/30 * * * *", "Europe/Berlin", datetime(2027, 10, 30, 23, 45, tzinfo=UTC), 0.08)
    assert runs == [
        "2027-10-31T02:00:00+02:00",
        "2027-10-31T02:30:00+02:00",
        "2027-10-31T02:00:00+01:00",
        "2027-10-31T02:30:00+01:00",
    ]


@pytest.mark.parametrize(
    ("expr", "gap"),
    [
        ("* * * * *", "1 minute"),
        ("*/5 9 * * *", "5 minutes"),
        ("0,59 * * * *", "1 minute"),
        ("0,10 9 * * mon", "10 minutes"),
    ],
)
def test_a_schedule_more_often_than_every_15_minutes_is_refused(expr, gap):
    """`* * * * *` was taken: 1,440 answers a day (model calls and queries each), past any rate
    limit for an admin, and the owner's hourly limit spent by the schedule alone."""
    with pytest.raises(ScheduleError) as info:
        check_cron(expr)
    assert str(info.value) == (
        f"{expr!r} would run again {gap} after a run: a scheduled answer runs at most every 15 minutes "
        "(each run is a whole answer: model calls and queries)."
    )
    assert check_cron("*/15 * * * *") == "*/15 * * * *" and check_cron("0 9-17 * * *") == "0 9-17 * * *"


@pytest.mark.parametrize(
    ("conversation", "kind"),
    [
        ("19:general@thread.tacv2", "channel"),
        ("19:general@thread.tacv2;messageid=1700000000001", "channel"),
        ("19:old-channel@thread.skype", "channel"),
        ("19:9a8b7c6d5e4f@thread.v2", "groupChat"),
        ("19:meeting_NjQ4ZDNkYjYtOGE0Mi00@thread.v2", "groupChat"),
        ("a:1personal-chat-ada", "personal"),
    ],
)
def test_a_teams_schedule_records_its_conversations_kind(conversation, kind):
    """How a run is posted depends on it: a bot starts threads in a channel but cannot create a chat."""
    from core.schedules import teams_conversation_type

    assert teams_conversation_type(conversation) == kind
    made = new_schedule(
        cron="0 9 * * mon",
        tz="UTC",
        surface="teams",
        channel=conversation,
        question="q",
        now=datetime.now(UTC),
    )
    assert made.conversation_type == kind
    told = new_schedule(
        cron="0 9 * * mon",
        tz="UTC",
        surface="teams",
        channel=conversation,
        question="q",
        now=datetime.now(UTC),
        conversation_type="personal",
    )
    assert told.conversation_type == "personal"  # what Teams said, when the surface passes it
