"""Daily model budgets (core/model_budget.py): all questions together and each person, per UTC day,
counted in the store every replica shares. Before them, nothing bounded a day's Claude bill but the
hourly question limits times the per-turn budget."""

from __future__ import annotations

import re

import pytest

from core.analyst import Analyst
from core.events import IncomingMessage
from core.store_redis import RedisStore
from tests.fakes.anthropic_api import text, tool
from tests.fakes.scenarios import assert_valid

# What the fake's scripted replies cost, weighted as the turn budget counts: 1,000 + 100 + 5,000/10.
CALL = {
    "input_tokens": 1_000,
    "output_tokens": 100,
    "cache_read_input_tokens": 5_000,
    "cache_creation_input_tokens": 0,
}
COST = 1_600
RESETS = r"It resets at 00:00 UTC \(in (\d+ hours|\d+ minutes)\)\."


def costly(reply: dict) -> dict:
    return {**reply, "usage": CALL}


def ask(text_: str, *, user: str = "U1", surface: str = "slack", thread: str = "1.0") -> IncomingMessage:
    return IncomingMessage(
        text=text_,
        surface=surface,
        thread_key=("T1", "C1", thread),
        user_id=user,
        channel_id="C1",
        team_id="T1",
    )


async def test_a_spent_day_stops_the_question_in_flight_and_refuses_the_next(settings, fake_model, recorder):
    """The day's budget of 2,000 tokens: the first question's first call (1,600) is under it, its
    second call (3,200 in all) takes the day over, so the tools that call asked for never run; the
    next question is refused without a model call, without an error id, saying when it resets."""
    analyst = await Analyst.create(settings.model_copy(update={"daily_token_budget": 2_000}))
    try:
        fake_model.enqueue(
            costly(tool("list_tables")),
            costly(tool("run_python", {"code": "open('ran.txt', 'w').write('ran')"})),
            costly(text("never asked for")),
        )
        stopped = await analyst.handle(ask("which tables?"), recorder)
        assert not stopped.ok and stopped.at_limit  # a schedule would not retry it at once
        assert re.fullmatch(
            r"This question stopped: datathread has used today's model budget, set by an admin\. " + RESETS,
            stopped.error,
        ), stopped.error
        assert [s.tool for s in stopped.steps] == ["list_tables"]  # run_python never ran
        assert not list(settings.home.glob("workspaces/*/ran.txt"))
        assert len(fake_model.requests) == 2
        assert_valid(await analyst.store.load_history(stopped.session_id))

        refused = await analyst.handle(ask("and now?", user="U2", thread="2.0"), recorder)
        assert not refused.ok and not refused.error_id and refused.at_limit  # a schedule would not retry
        assert re.fullmatch(
            r"datathread has used today's model budget, set by an admin\. " + RESETS, refused.error
        )
        failed = recorder.of("failed")[-1]
        assert failed.retry_after_s and 0 < failed.retry_after_s <= 86400
        assert len(fake_model.requests) == 2  # refused before any model call
    finally:
        await analyst.close()


async def test_an_answer_already_written_still_reaches_the_person(settings, fake_model, recorder):
    """The call that spends the day wrote the answer: it was paid for, so it goes out."""
    analyst = await Analyst.create(settings.model_copy(update={"daily_token_budget": 1_000}))
    try:
        fake_model.enqueue(costly(text("There are 16 airlines.")))
        outcome = await analyst.handle(ask("how many airlines?"), recorder)
        assert outcome.ok and outcome.answer == "There are 16 airlines."
        assert "model budget" in (await analyst.handle(ask("more?"), recorder)).error
    finally:
        await analyst.close()


async def test_each_person_has_their_own_day_and_admins_have_none(settings, fake_model, recorder):
    analyst = await Analyst.create(
        settings.model_copy(update={"user_daily_token_budget": 1_000, "admin_users": "BOSS"})
    )
    try:
        fake_model.enqueue(*(costly(text(f"answer {i}")) for i in range(5)))
        assert (await analyst.handle(ask("q1", user="U1"), recorder)).ok
        spent = await analyst.handle(ask("q2", user="U1"), recorder)
        assert re.fullmatch(
            r"You've used your daily model budget \(1,000 tokens\), set by an admin\. " + RESETS, spent.error
        ), spent.error
        assert (await analyst.handle(ask("q3", user="U2"), recorder)).ok  # someone else's day
        assert (await analyst.handle(ask("q4", user="U1", surface="teams"), recorder)).ok  # per surface
        assert (await analyst.handle(ask("q5", user="BOSS"), recorder)).ok
        assert (await analyst.handle(ask("q6", user="BOSS"), recorder)).ok
        assert len(fake_model.requests) == 5  # all but U1's second question on Slack
    finally:
        await analyst.close()


async def test_a_refused_question_keeps_the_persons_hourly_questions(settings, fake_model, recorder):
    """The daily budget is checked before the hourly limit counts the question."""
    analyst = await Analyst.create(
        settings.model_copy(update={"user_daily_token_budget": 1_000, "user_turns_per_hour": 2})
    )
    try:
        fake_model.enqueue(costly(text("one")))
        assert (await analyst.handle(ask("q1"), recorder)).ok
        for _ in range(3):
            assert "daily model budget" in (await analyst.handle(ask("again"), recorder)).error
        hits = await analyst.store.hit_rates([("user:slack:U1", 2)], window_s=3600)
        assert hits is None  # one hour's question left: the refusals took none
    finally:
        await analyst.close()


async def test_the_terminal_names_the_setting(settings, fake_model, recorder):
    analyst = await Analyst.create(settings.model_copy(update={"daily_token_budget": 1_000}))
    try:
        fake_model.enqueue(costly(text("one")))
        assert (await analyst.handle(ask("q1", surface="terminal"), recorder)).ok
        refused = await analyst.handle(ask("q2", surface="terminal"), recorder)
        assert refused.error.startswith(
            "datathread's daily model budget is spent (1,000 tokens, set by DATATHREAD_DAILY_TOKEN_BUDGET). "
        ), refused.error
    finally:
        await analyst.close()


@pytest.mark.usefixtures("redis_server")
async def test_replicas_share_one_day(settings, fake_model, recorder, redis_server):
    """Two replicas on one Redis: what one spent, the other sees."""
    redis_server.flush()
    shared = settings.model_copy(update={"daily_token_budget": 1_000, "redis_url": redis_server.url})
    first, second = await Analyst.create(shared), await Analyst.create(shared)
    try:
        assert isinstance(first.store, RedisStore)
        fake_model.enqueue(costly(text("one")))
        assert (await first.handle(ask("q1"), recorder)).ok
        refused = await second.handle(ask("q2", user="U2", thread="2.0"), recorder)
        assert "today's model budget" in refused.error and len(fake_model.requests) == 1
    finally:
        await first.close()
        await second.close()


async def test_a_spent_day_still_exports_a_notebook(settings, fake_model, recorder):
    """ "export notebook" calls no model: a spent budget refused it with "model budget spent"."""
    analyst = await Analyst.create(settings.model_copy(update={"daily_token_budget": 1_000}))
    try:
        fake_model.enqueue(costly(text("There are 16 airlines.")))
        assert (await analyst.handle(ask("how many airlines?"), recorder)).ok
        exported = await analyst.handle(ask("export notebook"), recorder)
        assert exported.ok, exported.error
        assert len(fake_model.requests) == 1
    finally:
        await analyst.close()
