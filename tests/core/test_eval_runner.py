"""The eval runner end to end: real Analyst, DuckDB warehouse and sandbox; the scripted model on loopback
answers each question with a right or a deliberately wrong query."""

from __future__ import annotations

import asyncio

import pytest

from core.analyst import build_parts
from core.eval_report import EvalReport, QuestionResult
from core.eval_runner import STOP_AFTER, EvalRunner
from core.eval_suite import parse_suite
from core.events import ModelFault
from tests.fakes.anthropic_api import error, tool
from tests.fakes.anthropic_scripts import by_question, model_error


@pytest.fixture
async def runner(settings):
    r = EvalRunner(await build_parts(settings), concurrency=4, question_timeout_s=60)
    yield r
    await r.close()


def suite_of(*questions: dict):
    return parse_suite({"questions": list(questions)})


def q(id_: str, question: str, **rest) -> dict:
    return {"id": id_, "question": question, **rest}


SCORED = [
    # (question, bot's queries, correct?)
    (
        q("jfk", "How many flights left JFK?", gold_sql="SELECT count(*) FROM flights WHERE origin = 'JFK'"),
        "SELECT count(*) AS n FROM flights WHERE origin = 'JFK'",
        True,
    ),
    (
        q(
            "by_origin",
            "Flights per origin?",
            gold_sql="SELECT origin, count(*) AS n FROM flights GROUP BY 1",
        ),
        "SELECT count(*) AS flights, origin AS airport FROM flights GROUP BY origin ORDER BY flights",
        True,
    ),
    (
        q("avg_delay", "Average departure delay?", gold_sql="SELECT avg(dep_delay) FROM flights"),
        "SELECT round(avg(dep_delay), 2) AS avg_delay FROM flights",
        True,
    ),
    (
        q(
            "wrong_filter",
            "How many flights left LGA?",
            gold_sql="SELECT count(*) FROM flights WHERE origin = 'LGA'",
        ),
        "SELECT count(*) FROM flights WHERE origin = 'JFK'",
        False,
    ),
    (
        q(
            "wrong_join",
            "Flights per airline name?",
            gold_sql="SELECT a.name, count(*) FROM flights f JOIN airlines a USING (carrier) GROUP BY 1",
        ),
        "SELECT a.name, count(*) FROM flights f JOIN planes p USING (tailnum) "
        "JOIN airlines a USING (carrier) GROUP BY 1",
        False,
    ),
    (
        q(
            "extra_rows",
            "Top 3 destinations?",
            gold_sql="SELECT dest FROM flights GROUP BY 1 ORDER BY count(*) DESC LIMIT 3",
        ),
        "SELECT dest, count(*) FROM flights GROUP BY 1 ORDER BY 2 DESC LIMIT 5",
        False,
    ),
    (q("expected", "How many airlines?", expected=16), "SELECT count(*) FROM airlines", True),
    (
        q(
            "wrong_order",
            "Cumulative flights by month, in month order?",
            ordered=True,
            gold_sql="SELECT month, sum(count(*)) OVER (ORDER BY month) FROM flights GROUP BY 1 ORDER BY 1",
        ),
        "SELECT month, sum(count(*)) OVER (ORDER BY month) AS c FROM flights GROUP BY 1 ORDER BY 1 DESC",
        False,
    ),
    (
        q("last_query_counts", "How many planes?", gold_sql="SELECT count(*) FROM planes"),
        ["SELECT count(*) FROM airlines", "SELECT count(*) AS planes FROM planes"],
        True,
    ),
    (q("no_query", "How many airports?", gold_sql="SELECT count(*) FROM airports"), None, False),
]


async def test_accuracy_is_the_exact_fraction_of_right_answers(runner, fake_model):
    suite = suite_of(*(question for question, _, _ in SCORED))
    fake_model.enqueue(*[by_question({s[0]["question"]: s[1] for s in SCORED})] * 40)
    seen: list[str] = []

    async def on_result(result: QuestionResult, report: EvalReport) -> None:
        seen.append(str(result.id))
        assert report.questions[-1] is not None

    report = await runner.run(suite, suite_name="t", on_result=on_result)
    verdicts = {str(r.id): r.correct for r in report.questions}
    assert verdicts == {question["id"]: correct for question, _, correct in SCORED}
    assert report.accuracy == 0.5 and report.totals.correct == 5 and report.totals.wrong == 5
    assert sorted(seen) == sorted(verdicts)
    assert [r.id for r in report.questions] == [s[0]["id"] for s in SCORED]  # suite order, not finish order
    by_id = {r.id: r for r in report.questions}
    assert by_id["extra_rows"].reason == "expected 3 rows, got 5"
    assert by_id["wrong_order"].reason == "same rows in a different order"
    assert by_id["no_query"].reason == "the turn produced no query result to compare"
    assert by_id["last_query_counts"].final_sql == "SELECT count(*) AS planes FROM planes"
    assert by_id["jfk"].model_calls == 2 and by_id["last_query_counts"].model_calls == 3
    assert all(r.input_tokens > 0 and r.latency_s > 0 for r in report.questions)
    assert report.totals.model_calls == sum(r.model_calls for r in report.questions)
    assert len({r.session_id for r in report.questions}) == len(SCORED)  # a fresh session per question


async def test_a_failing_question_does_not_stop_the_run(runner, fake_model):
    suite = suite_of(
        q("model_fails", "Q model?", gold_sql="SELECT 1"),
        q("gold_breaks", "Q gold?", gold_sql="SELECT no_such_column FROM flights"),
        q("gold_writes", "Q write?", gold_sql="DELETE FROM flights"),
        q("fine", "Q fine?", expected=3),
    )
    script = {"Q model?": model_error(), "Q fine?": "SELECT count(DISTINCT origin) FROM flights"}
    fake_model.enqueue(*[by_question(script)] * 10)
    report = await runner.run(suite, suite_name="t")
    status = {r.id: (r.status, r.reason) for r in report.questions}
    assert status["fine"][0] == "correct"
    assert status["model_fails"][0] == "error" and status["model_fails"][1].startswith("the turn failed:")
    assert status["gold_breaks"][0] == "error" and "no_such_column" in status["gold_breaks"][1]
    assert status["gold_writes"][0] == "error" and "refused by the SQL policy" in status["gold_writes"][1]
    assert report.accuracy == 0.25 and report.totals.errors == 3
    questions_sent = {m["messages"][0]["content"][0]["text"] for m in fake_model.requests}
    assert "Q gold?" not in questions_sent  # a broken gold is the suite's fault: the bot is not asked


async def test_resume_skips_scored_questions_and_reruns_errors(runner, fake_model):
    suite = suite_of(
        q("a", "Q a?", expected=16),
        q("b", "Q b?", expected=16),
        q("c", "Q c?", expected=16),
    )
    done = [
        QuestionResult(id="a", question="Q a?", correct=True, status="correct", model_calls=7),
        QuestionResult(id="b", question="Q b?", correct=False, status="error", reason="overloaded"),
    ]
    fake_model.enqueue(*[by_question({"Q b?": "SELECT count(*) FROM airlines", "Q c?": None})] * 10)
    report = await runner.run(suite, suite_name="t", done=done)
    asked = {m["messages"][0]["content"][0]["text"] for m in fake_model.requests}
    assert asked == {"Q b?", "Q c?"}
    assert [(r.id, r.status) for r in report.questions] == [
        ("a", "correct"),
        ("b", "correct"),
        ("c", "wrong"),
    ]
    assert report.questions[0].model_calls == 7 and report.accuracy == 2 / 3


def _twelve():
    return suite_of(*(q(f"q{i}", f"Q {i}?", expected=i) for i in range(12)))


@pytest.mark.parametrize(
    ("reply", "fault"),
    [
        (error(401, "authentication_error", "invalid x-api-key"), ModelFault.KEY_REJECTED),
        (error(404, "not_found_error", "model: claude-test"), ModelFault.MODEL_NOT_FOUND),
        (model_error("Your credit balance is too low to access the Anthropic API."), ModelFault.NO_CREDIT),
    ],
)
async def test_the_same_model_fault_in_a_row_stops_the_run(runner, fake_model, reply, fault):
    """Every later question would fail the same way: the run stops instead of asking all of them."""
    fake_model.enqueue(*[reply] * 40)
    report = await runner.run(_twelve(), suite_name="t")
    assert report.stopped_by == fault
    # The questions that were running when the streak was seen finish; no new one starts.
    assert STOP_AFTER <= len(report.questions) < STOP_AFTER + runner.concurrency
    assert len(fake_model.requests) == len(report.questions)
    assert all(r.status == "error" and r.fault == fault for r in report.questions)
    assert report.totals.questions == 12 and report.accuracy == 0.0


async def test_failures_of_the_questions_themselves_never_stop_the_run(runner, fake_model):
    """A fault broken by any other outcome, an invalid request (this conversation's fault) or a rate
    limit (gone in a minute) is no reason to give up on the rest of the suite."""
    rejected = error(401, "authentication_error", "invalid x-api-key")
    fake_model.enqueue(rejected, rejected, model_error("messages: text content blocks must be non-empty"))
    fake_model.enqueue(
        rejected, rejected, *[error(429, "rate_limit_error", "slow down")] * 3
    )  # 1 + 2 retries
    fake_model.enqueue(rejected, rejected)  # then the queue is empty: every later question answers "done"
    runner.concurrency = 1  # in suite order, so the replies above meet the questions in a row
    report = await runner.run(_twelve(), suite_name="t")
    assert report.stopped_by is None and len(report.questions) == 12
    faults = [r.fault for r in report.questions]
    key = ModelFault.KEY_REJECTED
    assert faults == [key, key, None, key, key, None, key, key] + [None] * 4
    assert [r.status for r in report.questions[-4:]] == ["wrong"] * 4  # answered, with no query to score


async def test_stop_ends_the_run_once_the_questions_under_way_are_saved_as_stopped(runner, fake_model):
    """Ctrl-C (`datathread eval` calls stop()) must not wait for the questions under way, nor leave them
    behind: run() returned as soon as a question still waiting for its slot was cancelled, while the
    ones under way were still saving their stopped turns, and the CLI closed the store under them."""
    endless = tool("run_python", {"code": "import time\nwhile True:\n    time.sleep(0.1)\n"})
    fake_model.enqueue(*[endless] * 2)
    runner.concurrency = 2
    run = asyncio.create_task(runner.run(_twelve(), suite_name="t"))
    while len(fake_model.requests) < 2:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # both steps under way
    runner.stop("SIGINT")
    report = await asyncio.wait_for(run, 60)
    assert report.stopped_by == "SIGINT" and report.questions == [] and report.totals.questions == 12
    turns = await runner.parts.store.list_turns(
        session_id=None, user_id=None, channel_id=None, since=None, limit=10
    )
    assert len(turns) == 2 and all("stopped" in t["error"] for t in turns), turns
