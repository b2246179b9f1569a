"""What `datathread forget` deletes (core/forget.py), on both stores: a person's threads they alone took
part in go whole, their turn records everywhere, their schedules, verified entries and cached look-ups;
a thread shared with others keeps its history unless asked. Nothing could be deleted before its TTL."""

from __future__ import annotations

import pytest

from bot.cli_forget import _said
from core.forget import NothingToForget, carry_out, plan_forget
from core.sessions import StoreUnavailable
from tests.fakes.kept_threads import Q, two_threads


async def seed(store) -> None:
    await two_threads(store)
    await store.put_record("schedule", "s1", {"id": "s1", "owner": "U1", "channel": "C1", "surface": "slack"})
    await store.put_record("schedule", "s2", {"id": "s2", "owner": "U3", "channel": "C9", "surface": "slack"})
    await store.put_record(
        "verified", "v1", {"id": "v1", "kind": "verified", "verified_by": "U1", "session_id": "x"}
    )
    await store.put_record(
        "verified", "c1", {"id": "c1", "kind": "correction", "by": "U2", "session_id": "sl-alone"}
    )
    await store.put_record(
        "verified", "v2", {"id": "v2", "kind": "verified", "verified_by": "U3", "session_id": "y"}
    )
    await store.set_once("person:slack:T1:U1", "{}", ttl_s=3600)
    await store.set_once("person:slack:T1:U2", "{}", ttl_s=3600)


async def test_forgetting_a_person(make_store, settings):
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, user="U1")
    assert (plan.sessions, plan.shared, plan.schedules) == (["sl-alone"], ["sl-shared"], ["s1"])
    assert plan.verified_entries == ["c1", "v1"]  # theirs, and a correction made in their thread
    counts = (await carry_out(store, settings, plan)).counts
    assert counts["history"] == 1 and counts["turn records"] == 2 and counts["cached look-ups"] == 1
    assert await store.load_history("sl-alone") == [] and await store.list_turns(user_id="U1") == []
    assert await store.load_history("sl-shared") == Q  # shared: kept unless asked
    assert [s["id"] for s in await store.list_records("schedule")] == ["s2"]
    assert [v["id"] for v in await store.list_records("verified")] == ["v2"]
    assert await store.get_value("person:slack:T1:U1") is None
    assert await store.get_value("person:slack:T1:U2") == "{}"


async def test_forgetting_a_person_with_their_shared_threads(make_store, settings):
    store = make_store()
    await seed(store)
    await carry_out(store, settings, await plan_forget(store, user="U1", delete_shared=True))
    assert await store.load_history("sl-shared") == [] and await store.get_meta("sl-shared") is None
    assert [t["user_id"] for t in await store.list_turns()] == ["U3"]


async def test_forgetting_a_thread_channel_and_team(make_store, settings):
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, channel="C2")
    assert plan.sessions == ["sl-shared"]
    await carry_out(store, settings, plan)
    assert await store.list_turns(channel_id="C2") == []
    plan = await plan_forget(store, team="T1")
    assert plan.sessions == ["sl-alone"] and plan.lookups == ["person:*:T1:*"]
    plan = await plan_forget(store, thread="te-other")
    assert plan.sessions == ["te-other"] and plan.schedules == []
    await carry_out(store, settings, plan)
    assert await store.load_history("te-other") == []


async def test_an_unknown_id_is_one_sentence(make_store):
    store = make_store()
    await seed(store)
    for which in ({"thread": "sl-nothing"}, {"user": "U404"}, {"channel": "C404"}, {"team": "T404"}):
        with pytest.raises(NothingToForget, match="datathread audit"):
            await plan_forget(store, **which)


async def test_a_running_turn_keeps_its_thread_and_says_so(make_store, settings):
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, thread="te-other")
    async with store.lock("te-other", ttl_s=30, wait_s=0):
        counts = (await carry_out(store, settings, plan, lock_wait_s=0)).counts
    assert counts["busy"] == 1 and await store.load_history("te-other") == Q


async def test_a_running_turn_keeps_their_turn_records_in_a_shared_thread(make_store, settings):
    """`--user` deleted a person's turn records without the thread's lock: a running turn's UNFINISHED
    record came back when the turn ended. Now a shared thread's records go under its lock, or it is
    left as busy (and the records outside any held thread wait for the next run)."""
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, user="U1")
    async with store.lock("sl-shared", ttl_s=30, wait_s=0):  # a turn of it is running
        deleted = await carry_out(store, settings, plan, lock_wait_s=0)
    assert deleted.busy == ["sl-shared"] and deleted.counts["busy"] == 1
    assert sorted(t["user_id"] for t in await store.list_turns(session_id="sl-shared")) == ["U1", "U2"]
    assert await store.list_turns(session_id="sl-alone") == []  # the thread only they were in went
    again = await carry_out(store, settings, await plan_forget(store, user="U1"))
    assert not again.busy and again.counts["turn records"] == 1
    assert [t["user_id"] for t in await store.list_turns(session_id="sl-shared")] == ["U2"]


async def test_a_store_failing_midway_says_how_far_it_got(make_store, settings, capsys):
    """Redis stopped answering after some threads went: the run says how many, with what went so far,
    instead of only "Redis is not reachable" (the command's sentence: tests/bot/test_cli_forget.py)."""
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, team="T1")
    real = store.erase_sessions
    calls = []

    async def fails_second_time(session_ids, **kw):
        calls.append(session_ids)
        if len(calls) == 2:
            raise StoreUnavailable("Redis at 127.0.0.1:6379 is not reachable.")
        return await real(session_ids, **kw)

    store.erase_sessions = fails_second_time
    deleted = await carry_out(store, settings, plan)
    assert (deleted.done, deleted.total) == (1, 2) and "not reachable" in str(deleted.stopped)
    assert deleted.counts["history"] == 1
    assert _said(deleted, settings.model_copy(update={"redis_url": "redis://127.0.0.1:6379/0"})) == 1
    out, err = capsys.readouterr()
    assert out.startswith("Deleted: 1 thread history") and err.count("\n") == 1
    assert "Redis stopped answering after 1 of 2 threads (" in err and err.endswith(
        "run the same command again.\n"
    )


async def test_a_schedules_audit_entries_are_not_a_thread_of_theirs(make_store, settings):
    """`forget --user` said "not the history of 1 thread they shared with others (schedule:5ef1…)" and
    counted it among their threads: a schedule's audit entries (filed under `schedule:<id>`, by the
    terminal and by them) are no conversation. Their own entries there go with their turn records."""
    store = make_store()
    await seed(store)
    for i, by in enumerate(("terminal", "U1")):
        await store.record_turn(
            {"turn_id": f"schedule-s1-{i}", "kind": "schedule", "session_id": "schedule:s1", "user_id": by}
        )
    plan = await plan_forget(store, user="U1")
    assert (plan.sessions, plan.shared) == (["sl-alone"], ["sl-shared"])
    await carry_out(store, settings, plan)
    assert [t["user_id"] for t in await store.list_turns(session_id="schedule:s1")] == ["terminal"]
