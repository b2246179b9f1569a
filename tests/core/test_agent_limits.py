"""Every stop reason is bounded by the same step and token limits: a model that only ever pauses, or
that keeps calling tools after it was told to answer, is stopped at the step limit with a sentence and
a valid history (core/agent.py's loop)."""

from __future__ import annotations

import pytest

from core.analyst import Analyst
from core.events import IncomingMessage
from tests.fakes.anthropic_api import text, tool
from tests.fakes.scenarios import assert_valid

MAX_STEPS = 3


@pytest.fixture
async def strict_analyst(settings):
    analyst = await Analyst.create(settings.model_copy(update={"max_steps": MAX_STEPS}))
    yield analyst
    await analyst.close()


def ask(text_: str) -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=("limits",), user_id="u1")


async def test_a_model_that_only_pauses_stops_at_the_step_limit(strict_analyst, fake_model, recorder):
    fake_model.enqueue(*[text("Still working…", stop_reason="pause_turn") for _ in range(50)])
    outcome = await strict_analyst.handle(ask("how many flights?"), recorder)
    assert not outcome.ok and f"more than {MAX_STEPS} steps" in outcome.error
    assert len(fake_model.requests) == MAX_STEPS + 1  # the limit, then one call told to answer
    assert fake_model.requests[-1]["tool_choice"] == {"type": "none"}
    history = await strict_analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    assert history[0]["content"][0]["text"] == "how many flights?"


async def test_tool_calls_after_being_told_to_answer_stop_too(strict_analyst, fake_model, recorder):
    fake_model.enqueue(*[tool("list_tables") for _ in range(50)])
    outcome = await strict_analyst.handle(ask("which tables?"), recorder)
    assert not outcome.ok and f"more than {MAX_STEPS} steps" in outcome.error
    assert len(fake_model.requests) == MAX_STEPS + 1
    assert_valid(await strict_analyst.store.load_history(outcome.session_id))


async def test_pauses_count_against_the_token_budget(settings, fake_model, recorder):
    analyst = await Analyst.create(settings.model_copy(update={"turn_token_budget": 1}))
    try:
        fake_model.enqueue(*[text("…", stop_reason="pause_turn") for _ in range(50)])
        outcome = await analyst.handle(ask("hi"), recorder)
    finally:
        await analyst.close()
    assert not outcome.ok and "token budget" in outcome.error
    assert len(fake_model.requests) == 1


async def test_a_pause_then_an_answer_still_answers(strict_analyst, fake_model, recorder):
    fake_model.enqueue(text("Looking…", stop_reason="pause_turn"), text("336,776 flights."))
    outcome = await strict_analyst.handle(ask("how many flights?"), recorder)
    assert outcome.ok and outcome.answer == "336,776 flights."


async def test_a_limit_of_one_step_is_said_in_the_singular(settings, fake_model, recorder):
    """DATATHREAD_MAX_STEPS=1 said "needed more than 1 steps"."""
    analyst = await Analyst.create(settings.model_copy(update={"max_steps": 1}))
    try:
        fake_model.enqueue(*[tool("list_tables") for _ in range(5)])
        outcome = await analyst.handle(ask("which tables?"), recorder)
    finally:
        await analyst.close()
    assert not outcome.ok and "needed more than 1 step without reaching an answer" in outcome.error


async def test_cached_tokens_count_against_the_token_budget(settings, fake_model, recorder):
    """The real API reports a cached context as cache reads, input_tokens near zero: the budget
    counted input + output only, and never stopped a turn. Cache reads count at a tenth and writes
    at 1.25 (their price): 20,203 a call here."""
    analyst = await Analyst.create(settings.model_copy(update={"turn_token_budget": 50_000}))
    cached = {
        "input_tokens": 3,
        "output_tokens": 200,
        "cache_read_input_tokens": 150_000,
        "cache_creation_input_tokens": 4_000,
    }
    try:
        fake_model.enqueue(*[{**tool("list_tables"), "usage": cached} for _ in range(20)])
        outcome = await analyst.handle(ask("which tables?"), recorder)
    finally:
        await analyst.close()
    assert not outcome.ok and "token budget" in outcome.error
    assert len(fake_model.requests) == 3  # 20 k, 40 k, then 61 k: over (input + output alone: 0.6 k)


async def test_a_message_of_many_tool_calls_runs_only_so_many_and_a_turn_only_so_many(
    settings, fake_model, recorder
):
    """The step limit counts rounds, and a message may hold any number of calls: with
    DATATHREAD_MAX_STEPS=2 one turn ran 183 steps. A message now runs at most 8 calls (the rest are
    answered "not run", so the history stays valid), a turn at most max_steps × 4 (here 8)."""
    analyst = await Analyst.create(settings.model_copy(update={"max_steps": 2}))

    def many() -> dict:
        return tool("list_tables", more=[("list_tables", {})] * 29)

    try:
        fake_model.enqueue(many(), many(), text("Done."))
        outcome = await analyst.handle(ask("which tables?"), recorder)
        history = await analyst.store.load_history(outcome.session_id)
    finally:
        await analyst.close()
    assert outcome.ok and len(recorder.of("step_finished")) == 8
    first = fake_model.last_tool_results(1)
    assert len(first) == 30 and sum(bool(r.get("is_error")) for r in first) == 22
    assert "at most 8 tool calls of one message run" in first[-1]["content"]
    second = fake_model.last_tool_results(2)
    assert len(second) == 30 and all("this turn has made its 8 tool calls" in r["content"] for r in second)
    assert_valid(history)


async def test_a_reply_that_broke_off_still_counts_its_call_and_tokens(settings, fake_model, recorder):
    """A stream that broke mid-reply was billed (its input, at least), yet the turn counted neither the
    call nor its tokens: the receipt, the audit and the token budget missed it."""
    from tests.fakes.anthropic_api import cut

    analyst = await Analyst.create(settings)
    try:
        fake_model.enqueue(cut(text("The busiest airport was EWR with many departures"), after=7))
        outcome = await analyst.handle(ask("busiest airport?"), recorder)
    finally:
        await analyst.close()
    assert not outcome.ok and "broke off" in outcome.error
    assert outcome.stats.model_calls == 1
    assert outcome.stats.input_tokens + outcome.stats.cache_read_tokens > 0
