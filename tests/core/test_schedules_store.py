"""The schedule book on both stores (SQLite file and a real redis-server): records, caps, access and
the audit trail."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.access import AccessPolicy
from core.schedules import ScheduleError, UnknownSchedule, iso, new_schedule
from core.schedules_store import ScheduleBook, ScheduleLimits, to_listing
from tests.fakes.clock import Clock

# Every test here runs on SQLite and on a real Redis (make_store: tests/core/conftest.py).


def schedule(clock: Clock, **kw):
    args = {
        "cron": "0 9 * * mon",
        "tz": "Europe/Berlin",
        "surface": "slack",
        "channel": "C1",
        "question": "q",
    }
    return new_schedule(**{**args, **kw}, now=clock())


async def test_records_round_trip_merge_list_and_delete(make_store):
    a, b = make_store(), make_store()
    await a.put_record("schedule", "s1", {"id": "s1", "n": 1, "nested": {"x": [1, 2]}})
    await a.put_record("schedule", "s2", {"id": "s2"})
    await a.put_record("other", "s1", {"id": "other"})
    assert await b.get_record("schedule", "s1") == {"id": "s1", "n": 1, "nested": {"x": [1, 2]}}
    assert await b.update_record("schedule", "s1", {"n": 2, "new": True}) == {
        "id": "s1",
        "n": 2,
        "nested": {"x": [1, 2]},
        "new": True,
    }
    assert [r["id"] for r in await b.list_records("schedule")] == ["s1", "s2"]
    assert await b.delete_record("schedule", "s1") is True
    assert await a.delete_record("schedule", "s1") is False
    assert await a.update_record("schedule", "s1", {"n": 3}) is None  # a deleted record stays deleted
    assert await a.get_record("schedule", "s1") is None
    assert [r["id"] for r in await a.list_records("schedule")] == ["s2"]
    assert await a.get_record("other", "s1") == {"id": "other"}


async def test_book_crud_pause_resume_and_listing(make_store):
    clock = Clock(datetime(2026, 11, 23, 7, 0, tzinfo=UTC))
    book = ScheduleBook(make_store(), clock=clock)
    s = await book.add(schedule(clock, owner="U1"))
    other = ScheduleBook(make_store(), clock=clock)  # another replica sees it at once
    assert (await other.get(s.id)).question == "q"
    listing = to_listing(await other.get(s.id), clock())
    assert listing["next_run"] == "2026-11-23T09:00:00+01:00" and listing["paused"] is False

    paused = await other.pause(s.id, by="U1")
    assert paused.paused and to_listing(paused, clock())["next_run"] is None
    clock.advance(days=14)  # two Mondays pass while paused
    resumed = await book.resume(s.id)
    assert resumed.failures == 0 and resumed.cursor == iso(clock())
    assert iso(resumed.next_run(clock())) == "2026-12-07T09:00:00+01:00"  # not the missed ones

    await book.remove(s.id)
    for call in (book.get, book.pause, book.resume, book.remove):
        with pytest.raises(UnknownSchedule, match="No schedule has the id"):
            await call(s.id)
    events = [t["event"] for t in await book.store.list_turns(session_id=f"schedule:{s.id}")]
    assert events == ["created", "paused", "resumed", "removed"]


async def test_caps_per_channel_and_per_user_count_active_schedules(make_store):
    clock = Clock(datetime(2026, 11, 23, tzinfo=UTC))
    access = AccessPolicy(admins=frozenset({"UADMIN"}))
    book = ScheduleBook(
        make_store(), limits=ScheduleLimits(per_channel=2, per_user=1), access=access, clock=clock
    )
    first = await book.add(schedule(clock, owner="U1"))
    with pytest.raises(ScheduleError, match="You already have 1 active schedule;"):
        await book.add(schedule(clock, owner="U1"))
    await book.add(schedule(clock, owner="U2"))
    with pytest.raises(ScheduleError, match="This channel already has 2 active schedules"):
        await book.add(schedule(clock, owner="U3"))
    await book.add(schedule(clock, owner="U3", channel="C2"))  # another channel is fine
    await book.add(schedule(clock, owner="UADMIN"))  # admins are not capped
    await book.pause(first.id)  # paused schedules do not count
    await book.add(schedule(clock, owner="U1", channel="C9"))
    await book.add(schedule(clock, owner="U9"), trusted=True)  # the terminal operator is not capped


async def test_who_may_create_is_the_access_settings_call(make_store):
    clock = Clock(datetime(2026, 11, 23, tzinfo=UTC))
    access = AccessPolicy(channels=frozenset({"C1"}), users=frozenset({"U1"}))
    book = ScheduleBook(make_store(), access=access, clock=clock)
    await book.add(schedule(clock, owner="U1"))
    with pytest.raises(ScheduleError, match="not on the list"):
        await book.add(schedule(clock, owner="U2"))
    with pytest.raises(ScheduleError, match="isn't enabled in this channel"):
        await book.add(schedule(clock, owner="U1", channel="C2"))
