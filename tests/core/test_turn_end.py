"""A session store that stops answering while a turn ends (core/turn_end.py): a Redis frozen mid-turn,
a SQLite file another process holds locked. The answer was ready; the person waited 45 s (Redis: three
calls of three 5 s tries) or 90 s (SQLite: three 30 s busy waits) and was then told the answer "was not
saved" — which a frozen Redis made false by applying the history when it thawed. Now the store's part of
the turn's end has one deadline, the words say the outcome is unknown, and the thread goes on."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from core.analyst import Analyst
from core.events import IncomingMessage
from tests.fakes.anthropic_api import text
from tests.fakes.scenarios import assert_valid
from tests.fakes.stalled_store import StalledStore


class TimedRecorder:
    """Every event with the time it arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[float, object]] = []

    async def __call__(self, event) -> None:
        self.events.append((time.monotonic(), event))

    def at(self, kind: str) -> float:
        return [t for t, e in self.events if e.kind == kind][-1]


SETTLE_S = 3.0  # core/turn_end.py's deadline, said here so this test runs against the code before it


def ask(text_: str) -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=("frozen",), user_id="u1")


@pytest.fixture(params=["redis", "sqlite"])
def stalled(request, home):
    store = StalledStore(request.param, home)
    yield store
    store.stop()


async def test_a_store_that_stops_answering_as_the_turn_ends_costs_seconds_and_is_said_honestly(
    settings, fake_model, stalled
):
    analyst = await Analyst.create(settings.model_copy(update=stalled.settings_update))
    events = TimedRecorder()
    try:
        fake_model.enqueue(text("Hello."))
        first = await analyst.handle(ask("hello?"), events)
        assert first.ok, first.error

        def stall_then_answer(body: dict) -> dict:
            stalled.freeze()  # while the model writes: everything the turn's end asks of the store waits
            return text("There were 336,776 flights.")

        fake_model.enqueue(stall_then_answer)
        try:
            second = await asyncio.wait_for(analyst.handle(ask("how many flights?"), events), 20)
            returned = time.monotonic()
        finally:
            stalled.thaw()
        answered = events.at("answer")
        assert events.at("failed") - answered < SETTLE_S + 1, "the person heard too late"
        assert returned - answered < SETTLE_S + 1.5, "the turn ended too late"
        assert not second.ok and second.answer == "There were 336,776 flights."  # given, so recorded
        assert "may not be kept for follow-ups" in second.error, second.error
        assert "not saved" not in second.error  # a frozen Redis applies the write when it thaws
        assert "within 3 s" in second.error  # why, at the terminal (a thread's goes to the log)

        # Back again: the next question takes the lock (freed in the background) and is answered.
        fake_model.enqueue(text("Still 336,776."))
        third = await asyncio.wait_for(analyst.handle(ask("sure?"), events), 20)
        assert third.ok, third.error
        history = await analyst.store.load_history(third.session_id)
        assert_valid(history)
        kept = "336,776 flights" in json.dumps(history)
        # Redis applied the history it was sent before it froze; SQLite gave the write up before it began.
        assert kept is (stalled.kind == "redis"), history
    finally:
        await analyst.close()


async def test_a_turn_stopped_while_its_answer_is_being_kept_says_so(settings, fake_model, stalled):
    """Ctrl-C at "Saving the answer…" (the store slow to take it): the cancellation left the turn
    without a word, so `ask` printed nothing of the answer it had been given and chat said the
    question was kept. Now the person hears that the answer may not be kept."""
    analyst = await Analyst.create(settings.model_copy(update=stalled.settings_update))
    events = TimedRecorder()

    def stall_then_answer(body: dict) -> dict:
        stalled.freeze()
        return text("There were 336,776 flights.")

    fake_model.enqueue(stall_then_answer)
    try:
        turn = asyncio.ensure_future(analyst.handle(ask("how many flights?"), events))
        while not [e for _, e in events.events if e.kind == "answer"]:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # saving it, against the frozen store
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(turn, 10)
    finally:
        stalled.thaw()
        await analyst.close()
    [failed] = [e for _, e in events.events if e.kind == "failed"]
    assert failed.message.startswith("Stopped while this answer was being kept"), failed.message
