"""A session store that stops answering before a turn's answer (core/store_base.py, `ANSWER_S`): a Redis
that froze (it takes the bytes and never replies), a SQLite file another process holds locked. Every
call a turn makes before the model — the daily budget, the rate limits, the session lock, the history —
waited redis-py's three 5 s tries (15 s; the lock's try and its leaving 30 s) or SQLite's 30 s busy
wait, before the first word. Now each call waits `ANSWER_S` once, the turn says so in one sentence,
and the session goes on once the store is back — with no lock left behind by a try the frozen Redis
applied when it thawed."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.analyst import Analyst
from core.events import IncomingMessage
from core.sessions import StoreUnavailable, open_store
from tests.fakes.anthropic_api import text
from tests.fakes.stalled_store import StalledStore

ANSWER_S = 0.5  # the store's deadline per call, short for the test (3 s in production)
SLACK_S = 1.5  # a busy 2-core host


@pytest.fixture(params=["redis", "sqlite"])
def stalled(request, home, monkeypatch):
    monkeypatch.setattr("core.store_base.ANSWER_S", ANSWER_S)
    monkeypatch.setattr("core.sqlite_calls.BUSY_S", ANSWER_S)  # SQLite's wait for a locked file (10 s)
    store = StalledStore(request.param, home)
    yield store
    store.stop()


def ask(words: str) -> IncomingMessage:
    return IncomingMessage(text=words, surface="terminal", thread_key=("unanswered",), user_id="u1")


async def test_a_turn_on_a_store_that_stopped_answering_is_told_in_seconds_and_the_session_goes_on(
    settings, fake_model, stalled
):
    budgeted = settings.model_copy(update={**stalled.settings_update, "daily_token_budget": 1_000_000})
    analyst = await Analyst.create(budgeted)
    try:
        fake_model.enqueue(text("Hello."))
        assert (await analyst.handle(ask("hello?"), _quiet)).ok
        said: list[str] = []

        async def sink(event) -> None:
            if event.kind == "failed":
                said.append(event.message)

        stalled.freeze()
        try:
            started = time.monotonic()
            outcome = await asyncio.wait_for(analyst.handle(ask("how many flights?"), sink), 60)
            took = time.monotonic() - started
        finally:
            stalled.thaw()
        assert took < ANSWER_S + SLACK_S, f"told after {took:.1f} s"
        assert not outcome.ok and said == [outcome.error]
        assert outcome.error.startswith("I can't use my session store right now (")
        assert "Nothing was changed; please try again shortly." in outcome.error
        assert not fake_model.requests[1:], "the model was called for a turn that could not start"

        fake_model.enqueue(text("336,776."))  # the store is back: the same session answers
        again = await asyncio.wait_for(analyst.handle(ask("how many flights?"), _quiet), 20)
        assert again.ok and again.answer == "336,776.", again.error
    finally:
        await analyst.close()


async def test_a_lock_try_the_store_never_answered_leaves_no_lock_behind(settings, stalled):
    """A frozen Redis applies the try it took when it thaws: the session's lock, held by a turn that
    already gave up, kept the thread's next question waiting for the lock's TTL (60 s)."""
    store = await open_store(settings.model_copy(update=stalled.settings_update))
    try:
        async with store.lock("s", ttl_s=60):  # the try's script is known to Redis, as after any turn
            pass
        stalled.freeze()
        started = time.monotonic()
        try:
            with pytest.raises(StoreUnavailable):
                async with store.lock("s", ttl_s=60, wait_s=30):
                    pytest.fail("the lock was taken from a store that did not answer")
            took = time.monotonic() - started
        finally:
            stalled.thaw()
        assert took < ANSWER_S + SLACK_S, f"the lock's failure took {took:.1f} s"
        async with asyncio.timeout(5), store.lock("s", ttl_s=60, wait_s=4) as held:
            assert not held.lost
    finally:
        await store.close()


async def _quiet(event) -> None:
    return None
