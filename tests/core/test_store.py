"""One suite, two stores: every SessionStore behaviour runs against the embedded SQLite file and a real
throwaway redis-server; then what happens when Redis is unreachable or dies in the middle of a turn."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import history as hist
from core.asked_when import MARK as ASKED
from core.events import IncomingMessage
from core.sessions import LockTimeout, SessionStore, StoreUnavailable, open_store
from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from core.turn_lock import turn_lock
from tests.fakes.anthropic_api import text, tool
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import RedisServer, free_port

REPO = Path(__file__).resolve().parents[2]


def history_is_valid(messages: list[dict]) -> bool:
    """Every tool_use is answered by a tool_result in the next message, and roles alternate."""
    for i, m in enumerate(messages):
        if i and m["role"] == messages[i - 1]["role"]:
            return False
        uses = [b["id"] for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if uses:
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in nxt if isinstance(b, dict)}
            if not set(uses) <= answered:
                return False
    return hist.repair(messages) == messages


# --- history and metadata -------------------------------------------------------------------------


async def test_history_round_trip_version_and_ttl(make_store, monkeypatch):
    a, b = make_store(), make_store()
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hé — 数据?"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "list_tables", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "flights"}]},
    ]
    assert await a.load_history("s1") == []
    await a.save_history("s1", messages)
    assert await b.load_history("s1") == messages  # another replica sees it
    await b.save_history("s1", messages[:1])
    assert await a.load_history("s1") == messages[:1]  # replaced, not appended
    # a history written in an older format is ignored, not misread
    monkeypatch.setattr("core.store_sqlite.HISTORY_VERSION", 2)
    monkeypatch.setattr("core.store_redis.HISTORY_VERSION", 2)
    assert await a.load_history("s1") == []
    monkeypatch.undo()
    short = make_store(history_ttl_s=0.3)
    await short.save_history("s2", messages)
    assert await short.load_history("s2") == messages
    await asyncio.sleep(0.45)
    assert await a.load_history("s2") == []


async def test_meta_merge_keeps_created_and_unions_participants(make_store):
    a, b = make_store(), make_store()
    assert await a.get_meta("s1") is None
    first = await a.update_meta("s1", surface="slack", channel_id="C1", participant="U1")
    await asyncio.sleep(0.01)
    second = await b.update_meta("s1", participant="U2", thread_key=["C1", "1.2"])
    await b.update_meta("s1", participant="U1")
    meta = await a.get_meta("s1")
    assert meta["created"] == first["created"] and second["updated"] > first["updated"]
    assert meta["participants"] == ["U1", "U2"]
    assert (meta["surface"], meta["channel_id"], meta["thread_key"]) == ("slack", "C1", ["C1", "1.2"])
    assert meta["session_id"] == "s1"


# --- locks ----------------------------------------------------------------------------------------


async def test_lock_excludes_and_orders_two_replicas(make_store):
    a, b = make_store(), make_store()
    log: list[str] = []
    a_holds = asyncio.Event()

    async def turn(store: SessionStore, name: str, hold_s: float) -> None:
        async with store.lock("s1", ttl_s=5):
            log.append(f"{name}+")
            a_holds.set()
            await asyncio.sleep(hold_s)
            log.append(f"{name}-")

    first = asyncio.create_task(turn(a, "a", 0.3))
    await a_holds.wait()
    second = asyncio.create_task(turn(b, "b", 0.0))
    await asyncio.gather(first, second)
    assert log == ["a+", "a-", "b+", "b-"]
    # other sessions are not blocked by it
    async with a.lock("s1", ttl_s=5), b.lock("s2", ttl_s=5, wait_s=0.2):
        pass


async def test_lock_renewed_while_held_then_expires_when_owner_dies(make_store):
    a, b = make_store(), make_store()
    held = a.lock("s1", ttl_s=0.6)
    await held.__aenter__()
    await asyncio.sleep(0.9)  # longer than the ttl: renewal keeps it
    with pytest.raises(LockTimeout):
        async with b.lock("s1", ttl_s=0.6, wait_s=0.1):
            pass
    # the owner "dies": its renewal (a keeper thread, core/lock_keeper.py) stops and it never releases
    renewals = list(a._keepers)
    assert len(renewals) == 1
    renewals[0].stop()
    started = time.monotonic()
    async with b.lock("s1", ttl_s=5, wait_s=5):
        waited = time.monotonic() - started
        assert 0.2 < waited < 2.0, waited
        # the dead owner's late release must not free the new owner's lock
        await held.__aexit__(None, None, None)
        with pytest.raises(LockTimeout):
            async with a.lock("s1", wait_s=0.15):
                pass


HOLDER = """
import asyncio, sys
from pathlib import Path
from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from core.store_sqlite import SqliteStore

async def main(kind, where):
    store = SqliteStore(Path(where)) if kind == "sqlite" else RedisStore(where)
    async with store.lock("s1", ttl_s=60):
        print("held", flush=True)
        await asyncio.sleep(600)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_holder_killed_on_this_host_frees_its_lock_at_once(make_store):
    """A replica SIGKILLed mid-turn (the OOM killer, kill -9) held its thread for the lock's whole TTL
    (60 s): the next question waited behind a process that no longer existed."""
    store = make_store()
    where = ["sqlite", str(store.path)] if isinstance(store, SqliteStore) else ["redis", store._url]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *where], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout):  # alive and holding: it is waited for
            async with store.lock("s1", ttl_s=5, wait_s=1.5):
                pass
        holder.kill()  # not reaped yet: a zombie is as dead as a process that is gone
        started = time.monotonic()
        async with store.lock("s1", ttl_s=5, wait_s=30):
            assert time.monotonic() - started < 5
    finally:
        holder.kill()
        holder.wait()


async def queued(store: SessionStore) -> int:
    """How many wait for session s1's lock (the queue of core/lock_queue.py)."""
    if isinstance(store, SqliteStore):
        return await store._run(lambda con: con.execute("SELECT count(*) FROM waiting").fetchone()[0])
    return await store.r.zcard(store._k("l", "s1") + ":queue")


async def until_queued(store: SessionStore, count: int) -> None:
    deadline = time.monotonic() + 20
    while await queued(store) < count:
        assert time.monotonic() < deadline, "the waiter never joined the queue"
        await asyncio.sleep(0.01)


async def test_waiters_take_the_lock_in_the_order_they_asked(make_store):
    """Follow-ups sent while an answer ran were answered in a shuffled order (and saved in it): waiters
    polled, and whoever polled first after a release won. Three replicas, six waiters."""
    stores = [make_store() for _ in range(3)]
    order: list[int] = []

    async def follow_up(n: int) -> None:
        async with stores[n % 3].lock("s1", ttl_s=5, wait_s=60):
            order.append(n)
            await asyncio.sleep(0.01)

    async with stores[0].lock("s1", ttl_s=5):
        waiters = []
        for n in range(6):
            waiters.append(asyncio.create_task(follow_up(n)))
            await until_queued(stores[0], n + 1)
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2, 3, 4, 5]
    assert await queued(stores[0]) == 0


async def test_turns_keep_their_place_while_they_say_they_wait(make_store):
    """A turn said "Waiting…" (a Slack call) first and only then queued: the follow-up asked first, whose
    call was slower, went second. Through `turn_lock`, as a turn takes the lock."""
    a, b = make_store(), make_store()
    order: list[str] = []
    saying = asyncio.Event()

    async def follow_up(store: SessionStore, name: str, say_s: float) -> None:
        async def on_wait() -> None:
            saying.set()
            await asyncio.sleep(say_s)

        async with turn_lock(store, "s1", ttl_s=5, on_wait=on_wait):
            order.append(name)

    async with a.lock("s1", ttl_s=5):
        first = asyncio.create_task(follow_up(a, "asked first", 0.6))
        await saying.wait()  # the first has found the thread busy and says so
        second = asyncio.create_task(follow_up(b, "asked second", 0.05))
        await asyncio.sleep(0.3)
    await asyncio.gather(first, second)
    assert order == ["asked first", "asked second"]


async def test_a_waiter_killed_on_this_host_does_not_hold_up_the_queue(make_store):
    store = make_store()
    where = ["sqlite", str(store.path)] if isinstance(store, SqliteStore) else ["redis", store._url]
    async with store.lock("s1", ttl_s=5):
        waiter = subprocess.Popen([sys.executable, "-c", HOLDER, *where], stdout=subprocess.PIPE, cwd=REPO)
        try:
            await until_queued(store, 1)
            waiter.kill()
            waiter.wait()
        finally:
            waiter.kill()
    started = time.monotonic()
    async with store.lock("s1", ttl_s=5, wait_s=10):  # not behind the dead one for its 15 s
        assert time.monotonic() - started < 3


async def test_lock_released_on_exception_and_cancellation(make_store):
    a, b = make_store(), make_store()
    with pytest.raises(ValueError):
        async with a.lock("s1", ttl_s=30):
            raise ValueError("tool crashed")
    async with b.lock("s1", ttl_s=30, wait_s=0.2):
        pass
    inside = asyncio.Event()

    async def hold() -> None:
        async with a.lock("s1", ttl_s=30):
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(hold())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with b.lock("s1", ttl_s=30, wait_s=0.5):
        pass


# --- de-dup, rate limits, budgets -----------------------------------------------------------------


async def test_first_seen_once_across_replicas_until_ttl(make_store):
    a, b = make_store(), make_store()
    results = await asyncio.gather(*(s.first_seen("slack:Ev1", ttl_s=0.5) for s in (a, b, a, b)))
    assert sorted(results) == [False, False, False, True]
    assert await b.first_seen("slack:Ev2") is True
    await asyncio.sleep(0.7)
    assert await b.first_seen("slack:Ev1", ttl_s=0.5) is True


async def test_a_lock_taken_over_while_held_is_reported_lost(make_store):
    """If a holder's lock vanishes (expired during a stall, or Redis lost it) and another replica takes
    it, the first holder learns at its next renewal, so its turn will not overwrite the history."""
    a, b = make_store(), make_store()
    async with a.lock("s-lost", ttl_s=0.6) as held:
        await asyncio.sleep(0.3)
        assert not held.lost  # renewed normally
        await _drop_lock_behind_its_back(a, "s-lost")
        async with b.lock("s-lost", ttl_s=5, wait_s=2):
            await asyncio.sleep(0.5)  # a's next renewal finds b's owner token
            assert held.lost


async def test_a_stalled_event_loop_does_not_lose_the_lock(make_store):
    """Renewal runs in its own thread (core/lock_keeper.py): a blocked loop cannot let the lock expire."""
    a, b = make_store(), make_store()
    async with a.lock("s1", ttl_s=0.6) as held:
        time.sleep(1.8)  # the loop is blocked for three TTLs: nothing on it can renew
        with pytest.raises(LockTimeout):
            async with b.lock("s1", ttl_s=0.6, wait_s=0.1):
                pass
        assert not held.lost
    async with b.lock("s1", ttl_s=0.6, wait_s=1):  # released normally afterwards
        pass


async def test_keepers_stop_with_their_lock(make_store):
    a = make_store()
    async with a.lock("s2", ttl_s=0.3):
        [keeper] = a._keepers
        assert keeper.alive
    assert not a._keepers
    await asyncio.to_thread(keeper.join, 2)
    assert not keeper.alive


async def test_a_stalled_turn_keeps_its_thread_and_its_answer(tmp_path, home, fake_model, redis_server):
    """Replica A's loop stalls mid-turn for 2.5 s (lock TTL 1 s); the thread's next message reaches
    replica B meanwhile. B waits for A's turn, A's answer is saved, then B answers on top of it."""
    from core.analyst import Analyst
    from core.config import load_settings

    redis_server.flush()
    settings = load_settings(
        _env_file=None, anthropic_api_key="sk-ant-test-key-000000", anthropic_base_url=fake_model.url,
        home=home, step_timeout=20, model="claude-test", redis_url=redis_server.url, lock_ttl=1.0,
    )  # fmt: skip
    fake_model.enqueue(
        tool("run_python", {"code": "print(6 * 7)"}), text("A: the answer is 42"), text("B: and again")
    )
    a, b = await Analyst.create(settings), await Analyst.create(settings)
    step_started = asyncio.Event()

    async def stalling_sink(event) -> None:
        if event.kind == "step_started" and not step_started.is_set():
            step_started.set()
            await asyncio.sleep(0.3)  # B is now waiting for the lock
            time.sleep(2.5)  # then A's whole event loop stalls (a blocking call), past the lock's TTL

    async def quiet(event) -> None:
        return None

    def ask(text_: str) -> IncomingMessage:
        return IncomingMessage(text=text_, surface="slack", thread_key=("T", "C1", "9.9"), user_id="U1",
                               channel_id="C1")  # fmt: skip

    try:
        first = asyncio.create_task(a.handle(ask("first"), stalling_sink))
        await step_started.wait()
        second = asyncio.create_task(b.handle(ask("second"), quiet))
        one, two = await asyncio.gather(first, second)
        assert one.ok and one.answer == "A: the answer is 42", one.error
        assert two.ok and two.answer == "B: and again", two.error
        history = await b.store.load_history(one.session_id)
        texts = [blk["text"] for m in history for blk in m["content"] if blk.get("type") == "text"]
        said = [t for t in texts if not t.startswith(ASKED)]  # each question's date (core/asked_when.py)
        assert said == ["first", "A: the answer is 42", "second", "B: and again"]
    finally:
        await a.close()
        await b.close()


async def _drop_lock_behind_its_back(store, session_id: str) -> None:
    if isinstance(store, RedisStore):
        await store.r.delete(store._k("l", session_id))
    else:
        import sqlite3

        with sqlite3.connect(store.path) as con:
            con.execute("DELETE FROM locks WHERE session_id=?", (session_id,))


async def test_set_once_first_writer_wins_across_replicas_until_ttl(make_store):
    a, b = make_store(), make_store()
    assert await a.get_value("confirm:t1:s1") is None
    results = await asyncio.gather(
        a.set_once("confirm:t1:s1", "run", ttl_s=0.5), b.set_once("confirm:t1:s1", "cancel", ttl_s=0.5)
    )
    assert sorted(results) == [False, True]
    winner = "run" if results[0] else "cancel"
    assert await a.get_value("confirm:t1:s1") == await b.get_value("confirm:t1:s1") == winner
    await asyncio.sleep(0.7)
    assert await b.get_value("confirm:t1:s1") is None


async def test_confirmation_answer_travels_between_replicas(make_store):
    from core.confirm import ask, give_answer, wait_for_answer

    turn_side, click_side = make_store(), make_store()
    waiting = asyncio.create_task(wait_for_answer(turn_side, "t2:s1", timeout_s=5, poll_s=0.02))
    await asyncio.sleep(0.1)
    await ask(turn_side, "t2:s1", asker="U1")
    assert await give_answer(click_side, "t2:s1", run=True, user_id="U2") == "not yours"
    assert await give_answer(click_side, "t2:s1", run=True, user_id="U1") == "ok"
    assert await waiting is True
    assert await give_answer(click_side, "t2:s1", run=False, user_id="U1") == "answered"
    # no answer in time: None, and a late click cannot start it any more
    assert await wait_for_answer(turn_side, "t3:s1", timeout_s=0.1, poll_s=0.02) is None
    assert await give_answer(click_side, "t3:s1", run=True) == "answered"
    await ask(turn_side, "t4:s1", asker="U1")
    assert await give_answer(click_side, "t4:s1", run=False, user_id="U9", admin=True) == "ok"  # an admin may


async def test_a_click_soon_after_asking_is_refused_once_the_waiting_turn_is_gone(make_store, monkeypatch):
    """The minute after asking counts as waited for (the card may still be on its way), but a turn
    that began waiting and then died — its process restarted — left that minute open: a click in it
    said "Running it." and nothing ran. Once waiting began, only the waiting turn's marks count."""
    from core import confirm

    monkeypatch.setattr(confirm, "BEAT_S", 0.1)
    turn_side, click_side = make_store(), make_store()
    await confirm.ask(turn_side, "t5:s1", asker="U1")  # ASKING_S is still 60 s
    waiting = asyncio.create_task(confirm.wait_for_answer(turn_side, "t5:s1", timeout_s=60, poll_s=0.02))
    for _ in range(250):  # until it has begun waiting (a loaded machine may take a while to get there)
        if await click_side.get_value("confirm:t5:s1:began") is not None:
            break
        await asyncio.sleep(0.02)
    waiting.cancel()  # the process waiting for it is gone
    await asyncio.sleep(0.45)  # past the three slots its marks cover
    assert await confirm.give_answer(click_side, "t5:s1", run=True, user_id="U1") == "answered"
    await confirm.ask(turn_side, "t6:s1", asker="U1")  # asked, its card still being sent: taken
    assert await confirm.give_answer(click_side, "t6:s1", run=True, user_id="U1") == "ok"


async def hit_rate(store, key: str, limit: int) -> float | None:
    """One window: None if admitted, else the seconds to wait."""
    refused = await store.hit_rates([(key, limit)], window_s=0.8)
    return None if refused is None else refused[1]


async def test_hit_rate_sliding_window_and_retry_after(make_store):
    a, b = make_store(), make_store()
    assert await hit_rate(a, "user:u1", 2) is None
    await asyncio.sleep(0.3)
    assert await hit_rate(b, "user:u1", 2) is None
    wait = await hit_rate(a, "user:u1", 2)
    assert wait is not None and 0.3 < wait <= 0.55, wait  # until the first hit leaves the window
    assert await hit_rate(a, "user:u2", 2) is None  # keys are independent
    await asyncio.sleep(wait + 0.05)
    assert await hit_rate(b, "user:u1", 2) is None  # first hit slid out
    assert await hit_rate(b, "user:u1", 2) is not None  # refused hits don't count


async def test_a_hit_in_several_windows_counts_in_all_or_none(make_store):
    """A person's and a channel's limit in one step: a full channel refuses the question without
    spending one of the person's (counted one after the other, it did)."""
    a, b = make_store(), make_store()
    both = [("user:u1", 2), ("channel:c1", 1)]
    assert await a.hit_rates(both, window_s=60) is None  # counted in both
    index, wait = await b.hit_rates(both, window_s=60)
    assert index == 1 and 59 < wait <= 60  # the channel is full
    assert await a.hit_rates([("user:u1", 2)], window_s=60) is None  # the refusal took none of u1's
    index, _ = await b.hit_rates([("user:u1", 2), ("channel:c2", 5)], window_s=60)
    assert index == 0  # now u1 is full: the first full window is named, and c2 counted nothing
    assert await a.hit_rates([("channel:c2", 1)], window_s=60) is None


async def test_add_usage_expires_from_creation(make_store):
    a, b = make_store(), make_store()
    assert await a.add_usage("tokens:u1", 5, ttl_s=0.6) == 5
    await asyncio.sleep(0.35)
    assert await b.add_usage("tokens:u1", 3, ttl_s=0.6) == 8  # a later add does not extend it
    await asyncio.sleep(0.35)
    assert await a.add_usage("tokens:u1", 2, ttl_s=0.6) == 2
    assert await a.add_usage("tokens:u2", 1, ttl_s=60) == 1


# --- turn records ---------------------------------------------------------------------------------


async def test_turn_records_filters_and_feedback(make_store):
    a, b = make_store(), make_store()
    now = time.time()
    rows = [
        ("t1", "s1", "U1", "C1", now - 30),
        ("t2", "s1", "U2", "C1", now - 20),
        ("t3", "s2", "U1", "C2", now - 10),
    ]
    for turn_id, sid, uid, cid, started in rows:
        await a.record_turn(
            {"turn_id": turn_id, "session_id": sid, "user_id": uid, "channel_id": cid,
             "started": started, "question": f"q {turn_id}", "steps": [], "feedback": {}}
        )  # fmt: skip
    ids = lambda turns: [t["turn_id"] for t in turns]  # noqa: E731
    assert ids(await b.list_turns()) == ["t1", "t2", "t3"]
    assert ids(await b.list_turns(session_id="s1")) == ["t1", "t2"]
    assert ids(await b.list_turns(user_id="U1")) == ["t1", "t3"]
    assert ids(await b.list_turns(channel_id="C1", user_id="U2")) == ["t2"]
    assert ids(await b.list_turns(since=now - 25)) == ["t2", "t3"]
    assert ids(await b.list_turns(limit=2)) == ["t2", "t3"]
    assert ids(await b.list_turns(session_id="nope")) == []
    got = await b.get_turn("t2")
    assert got["question"] == "q t2" and got["steps"] == []
    assert await b.set_feedback("t2", user_id="U9", value="up") is True
    assert await a.set_feedback("t2", user_id="U8", value="down") is True
    assert await a.set_feedback("missing", user_id="U9", value="up") is False
    assert (await a.get_turn("t2"))["feedback"] == {"U9": "up", "U8": "down"}
    await a.record_turn({**got, "answer": "replaced"})
    assert (await b.get_turn("t2"))["answer"] == "replaced" and len(await b.list_turns()) == 3


async def test_turn_records_and_documents_saved_with_lone_surrogates_load_readable(make_store):
    """Saved before questions were repaired on the way in, a record held "M\\udcfcnchen": the notebook
    export, the audit CSV and the Slack and Teams views of it failed to encode it. Loaded, it reads München."""
    store = make_store()
    await store.record_turn(
        {"turn_id": "t1", "session_id": "s", "started": time.time(), "question": "M\udcfcnchen?"}
    )
    await store.put_record("schedules", "r1", {"question": "M\udcfcnchen?"})
    assert (await store.get_turn("t1"))["question"] == "München?"
    assert [t["question"] for t in await store.list_turns(session_id="s")] == ["München?"]
    assert (await store.get_record("schedules", "r1"))["question"] == "München?"
    assert [r["question"] for r in await store.list_records("schedules")] == ["München?"]


async def test_metadata_and_rewritten_records_are_readable_too(make_store):
    """`get_meta`, what `update_record` returns and what `set_feedback` writes back read as every
    loaded record does (compared as ascii(): a surrogate in a diff stops an xdist worker): they passed the old lone surrogate on (and set_feedback stored it again)."""
    store = make_store()
    await store.update_meta("s", title="M\udcfcnchen")
    assert ascii((await store.get_meta("s"))["title"]) == ascii("München")
    assert ascii((await store.update_meta("s", turns=1))["title"]) == ascii("München")
    await store.put_record("schedules", "r1", {"question": "M\udcfcnchen?"})
    assert ascii((await store.update_record("schedules", "r1", {"paused": True}))["question"]) == ascii(
        "München?"
    )
    await store.record_turn(
        {"turn_id": "t1", "session_id": "s", "started": time.time(), "question": "M\udcfcnchen?"}
    )
    assert await store.set_feedback("t1", user_id="U1", value="up") is True
    raw = await _raw_turn(store, "t1")
    assert "\\udcfc" not in raw and ascii(json.loads(raw)["question"]) == ascii("München?")


async def _raw_turn(store, turn_id: str) -> str:
    """A turn record as stored, before the load repairs it."""
    if isinstance(store, RedisStore):
        return (await store.r.get(store._k("t", turn_id))).decode()
    with sqlite3.connect(store.path) as db:
        return db.execute("SELECT data FROM turns WHERE turn_id=?", (turn_id,)).fetchone()[0]


async def test_a_limit_past_any_count_lists_all_and_none_lists_none(make_store):
    """`audit --limit 99999999999999999999` was "OverflowError: Python int too large to convert to SQLite
    INTEGER"; and SQLite read LIMIT -1 as no limit where Redis listed nothing."""
    store = make_store()
    for n in range(3):
        await store.record_turn({"turn_id": f"t{n}", "session_id": "s", "started": time.time() + n})
    assert [t["turn_id"] for t in await store.list_turns(limit=10**20)] == ["t0", "t1", "t2"]
    assert await store.list_turns(limit=0) == [] and await store.list_turns(limit=-1) == []


# --- Redis failure behaviour ----------------------------------------------------------------------


async def test_redis_unreachable_at_start_is_one_clear_sentence(settings):
    redis_url = f"redis://127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        await open_store(settings.model_copy(update={"redis_url": redis_url}))
    message = str(caught.value)
    assert message.startswith("Redis at 127.0.0.1:") and "not reachable" in message
    assert message.count(". ") == 0 and message.endswith(".") and "\n" not in message
    assert time.monotonic() - started < 5


async def test_redis_that_takes_connections_and_never_answers_is_one_sentence_within_the_deadline(settings):
    """A black hole on the Redis port (a proxy, a firewall, another service): the start-up ping ends
    in one sentence within its deadline, not after three tries of the 5 s read timeout (17 s)."""
    from core.store_redis import PING_DEADLINE_S

    hole = BlackHole().start()
    port = hole.url.rsplit(":", 1)[1]
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as caught:
            await open_store(settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{port}/0"}))
        waited = time.monotonic() - started
    finally:
        hole.stop()
    assert str(caught.value) == f"Redis at 127.0.0.1:{port} is not reachable: it did not answer within 3 s."
    assert PING_DEADLINE_S - 0.1 < waited < PING_DEADLINE_S + 2, waited


def ask(text_: str) -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=("r1",), user_id="u1")


async def test_redis_killed_mid_turn_fails_clearly_and_history_stays_valid(settings, fake_model, recorder):
    from core.analyst import Analyst

    server = RedisServer(persist=True).start()
    analyst = await Analyst.create(settings.model_copy(update={"redis_url": server.url}))
    try:
        fake_model.enqueue(tool("run_sql", {"sql": "SELECT 42 AS answer", "save_as": "a"}), text("It is 42."))
        first = await analyst.handle(ask("what is the answer?"), recorder)
        assert first.ok, first.error
        saved = await analyst.store.load_history(first.session_id)
        assert history_is_valid(saved) and len(saved) == 4

        def die_then_answer(body: dict) -> dict:
            server.kill()  # Redis vanishes between the model's calls, mid-turn
            return text("It is still 42.")

        fake_model.enqueue(tool("run_sql", {"sql": "SELECT 43 AS answer", "save_as": "b"}), die_then_answer)
        second = await analyst.handle(ask("and now?"), recorder)
        assert not second.ok
        assert second.error.startswith("I can't use my session store right now (Redis at 127.0.0.1:")
        assert second.error.endswith(
            ": connection refused), so this answer was not saved; please try again shortly."
        )  # was "connection refused.), so": the embedded sentence kept its full stop
        assert "try again" in second.error and "Traceback" not in second.error
        assert recorder.of("failed")[-1].error_id == second.error_id

        server.start()  # back, with what it had acknowledged: the first turn only
        assert await analyst.store.load_history(first.session_id) == saved
        fake_model.enqueue(text("Third answer."))
        third = await analyst.handle(ask("and again?"), recorder)
        assert third.ok, third.error
        sent = fake_model.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
        after = await analyst.store.load_history(first.session_id)
        assert history_is_valid(after) and after[:4] == saved and len(after) == 6
    finally:
        await analyst.close()
        server.stop()


async def test_a_chat_thread_is_not_told_where_the_store_lives(settings, fake_model, recorder, caplog):
    """Everyone in a channel reads the reply: the store's host and port go to the log only (the
    terminal, whose person runs datathread, is told them: the test above)."""
    from core.analyst import Analyst

    server = RedisServer().start()
    analyst = await Analyst.create(settings.model_copy(update={"redis_url": server.url}))
    try:
        server.kill()
        message = IncomingMessage(
            text="how many?", surface="slack", thread_key=("T1", "C1", "1.1"), user_id="U1"
        )
        outcome = await analyst.handle(message, recorder)
        assert not outcome.ok
        assert outcome.error == (
            "I can't use my session store right now. Nothing was changed; please try again shortly."
        )
        assert recorder.of("failed")[-1].message == outcome.error
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert f"Redis at 127.0.0.1:{server.port} is not reachable" in logged
    finally:
        await analyst.close()
        server.stop()


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("redis://:s3cret@cache.internal:6380/0", "cache.internal:6380"),
        ("rediss://user:s3cret@cache.internal", "cache.internal:6379"),
        ("redis://", "localhost:6379"),
        ("unix:///run/redis/redis.sock?db=2", "/run/redis/redis.sock"),  # was "localhost:6379"
        ("unix://:s3cret@/tmp/r.sock", "/tmp/r.sock"),
    ],
)
def test_messages_name_the_redis_server_never_its_password(url, where):
    from core.store_redis import redis_where

    assert redis_where(url) == where


def turn(turn_id: str, started: float, user: str = "u1") -> dict:
    return {"turn_id": turn_id, "session_id": "s1", "user_id": user, "channel_id": "c1", "started": started}


async def test_turn_records_go_after_the_audit_ttl_and_leave_nothing_behind(make_store):
    """DATATHREAD_AUDIT_TTL_DAYS: turn records (and, on Redis, the indexes they joined) were kept for
    ever — in Redis, in memory. A vote keeps the record's expiry (a plain SET had cleared it)."""
    store, other = make_store(turn_ttl_s=1), make_store(turn_ttl_s=1)
    now = time.time()
    await store.record_turn(turn("past", now - 5))  # already older than the TTL: not kept
    await store.record_turn(turn("t1", now))
    assert await other.set_feedback("t1", user_id="u2", value="up")
    assert [t["turn_id"] for t in await other.list_turns(user_id="u1")] == ["t1"]
    assert await other.get_turn("past") is None
    await asyncio.sleep(2.2)
    assert await other.get_turn("t1") is None
    assert await other.list_turns() == [] and await other.list_turns(session_id="s1") == []
    assert not await other.set_feedback("t1", user_id="u2", value="down")
    await store.record_turn(turn("t2", time.time(), user="u9"))
    if isinstance(store, RedisStore):
        keys = sorted(k.decode() for k in await store.r.keys("dt:t*"))
        assert keys == ["dt:t:t2", "dt:ti:all", "dt:ti:c:c1", "dt:ti:s:s1", "dt:ti:u:u9"], keys
        assert await store.r.zrange("dt:ti:all", 0, -1) == [b"t2"]
    else:
        rows = await store._run(lambda con: con.execute("SELECT turn_id FROM turns").fetchall())
        assert rows == [("t2",)]


async def test_without_an_audit_ttl_turn_records_stay(make_store):
    store = make_store()
    await store.record_turn(turn("old", time.time() - 400 * 86400))
    assert [t["turn_id"] for t in await store.list_turns()] == ["old"]
