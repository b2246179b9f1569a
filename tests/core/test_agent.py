"""The tool loop: streamed text arrives in order and complete; a stream that breaks leaves a valid
history; tool calls of one message overlap unless they touch the same file, answered in order; an
answer written with its attach_file calls ends the turn without another model call."""

from __future__ import annotations

import pandas as pd
import pytest

from core.events import IncomingMessage
from tests.fakes.anthropic_api import cut, sse_events, text, tool
from tests.fakes.scenarios import CHART, DELAYS, assert_valid

ANSWER = (
    "**F9** (Frontier) had the highest average departure delay, 20.2 minutes.\n\n"
    "| carrier | avg delay |\n| --- | --- |\n| F9 | 20.2 |\n| EV | 20.0 |\n\n"
    "I averaged `dep_delay` by carrier over all 2013 flights."
)


def ask(text_: str, key: str = "s1") -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=(key,), user_id="u1")


async def test_text_streams_in_order_and_complete(analyst, fake_model, recorder):
    fake_model.enqueue(tool("list_tables", say="Let me see the tables first."), text(ANSWER))
    outcome = await analyst.handle(ask("which carriers were most delayed?"), recorder)
    assert outcome.ok, outcome.error
    assert all(body.get("stream") is True for body in fake_model.requests)
    deltas = recorder.of("answer_delta")
    by_call = {call: "".join(d.text for d in deltas if d.call == call) for call in (1, 2)}
    assert by_call == {1: "Let me see the tables first.", 2: ANSWER}
    assert len([d for d in deltas if d.call == 2]) > 20  # word by word, not one piece
    kinds = [e.kind for e in recorder.events]
    # the preamble streams before its step; the answer streams before AnswerReady, which holds it whole
    assert kinds.index("answer_delta") < kinds.index("step_started")
    last_step = len(kinds) - 1 - kinds[::-1].index("step_finished")
    answer_deltas = [i for i, e in enumerate(recorder.events) if e.kind == "answer_delta" and e.call == 2]
    assert last_step < answer_deltas[0] and answer_deltas[-1] < kinds.index("answer")
    assert recorder.of("answer")[0].text == ANSWER == outcome.answer


async def test_stream_cut_mid_text_ends_the_turn_with_a_note_and_valid_history(analyst, fake_model, recorder):
    fake_model.enqueue(tool("list_tables"), cut(text(ANSWER), after=9))
    outcome = await analyst.handle(ask("which carriers?"), recorder)
    assert not outcome.ok and "broke off" in outcome.error and "\n" not in outcome.error
    assert len(fake_model.requests) == 2  # a stream that already showed text is not silently repeated
    shown = "".join(d.text for d in recorder.of("answer_delta"))
    assert shown and ANSWER.startswith(shown) and shown != ANSWER
    assert recorder.of("failed")[0].message == outcome.error
    history = await analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    assert history[-1]["role"] == "assistant" and "broke off" in history[-1]["content"][0]["text"]
    assert not any(b.get("text") == shown for m in history for b in m["content"])  # no half answer kept
    fake_model.enqueue(text("Second works."))
    second = await analyst.handle(ask("again", "s1"), recorder)
    assert second.ok and second.answer == "Second works."
    assert_valid(fake_model.requests[-1]["messages"] + [{"role": "assistant", "content": "x"}])


async def test_stream_cut_mid_tool_use_runs_no_step_and_keeps_history_valid(analyst, fake_model, recorder):
    call = tool("run_sql", {"sql": "SELECT 42 AS answer, 'a long string to split' AS s"}, say="Checking.")
    events = sse_events({**call, "usage": {"output_tokens": 1}})
    inside_tool_json = next(
        i for i, (name, data) in enumerate(events) if data.get("delta", {}).get("type") == "input_json_delta"
    )
    fake_model.enqueue(cut(call, after=inside_tool_json + 2))
    outcome = await analyst.handle(ask("the answer?", "s2"), recorder)
    assert not outcome.ok and "broke off" in outcome.error
    assert recorder.of("step_started") == [] and outcome.steps == []
    history = await analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    assert not any(b.get("type") == "tool_use" for m in history for b in m["content"])


Q_CARRIERS = "SELECT carrier, count(*) AS n FROM flights GROUP BY carrier"
Q_ORIGINS = "SELECT origin, count(*) AS n FROM flights GROUP BY origin"


def _calls_of(body: dict) -> list[str]:
    """The tool_use ids of the assistant message a request answers, in the model's order."""
    return [b["id"] for b in body["messages"][-2]["content"] if b.get("type") == "tool_use"]


async def test_independent_calls_run_together_and_answer_in_order(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool(
            "query_warehouse",
            {"sql": Q_CARRIERS, "save_as": "by_carrier"},
            more=[("query_warehouse", {"sql": Q_ORIGINS, "save_as": "by_origin"})],
        ),
        text("Two results."),
    )
    outcome = await analyst.handle(ask("flights by carrier and by origin", "s3"), recorder)
    assert outcome.ok, outcome.error
    steps = [
        (e.kind, getattr(e, "step_id", None) or e.record.step_id) for e in recorder.events if "step" in e.kind
    ]
    # the loop dispatched both before either finished (the scheduler overlaps them: test_tool_batch.py)
    assert [k for k, _ in steps[:2]] == ["step_started", "step_started"], steps
    results = fake_model.last_tool_results(1)
    assert [r["tool_use_id"] for r in results] == _calls_of(fake_model.requests[1])
    assert "'by_carrier.parquet'" in results[0]["content"] and "'by_origin.parquet'" in results[1]["content"]
    assert [s.input["save_as"] for s in outcome.steps] == ["by_carrier", "by_origin"]
    assert len({s.step_id for s in outcome.steps}) == 2


async def test_calls_saving_the_same_file_run_one_after_the_other(analyst, fake_model, recorder, settings):
    fake_model.enqueue(
        tool(
            "query_warehouse",
            {"sql": Q_CARRIERS, "save_as": "counts"},
            more=[("query_warehouse", {"sql": Q_ORIGINS, "save_as": "counts"})],
        ),
        text("Saved."),
    )
    outcome = await analyst.handle(ask("counts", "s4"), recorder)
    kinds = [e.kind for e in recorder.events if "step" in e.kind]
    assert kinds == ["step_started", "step_finished", "step_started", "step_finished"]
    saved = pd.read_parquet(settings.workspaces_dir / outcome.session_id / "counts.parquet")
    assert list(saved.columns) == ["origin", "n"]  # the later call wrote last, as the model ordered them


@pytest.mark.parametrize(
    "replies",
    [
        [text("\n\n")],  # an answer of nothing
        [text("\u200b \u200d")],  # nothing visible: a zero-width space and a joiner
        [tool("list_tables", say="\n\n"), text(ANSWER)],  # a blank preamble beside a tool call
    ],
    ids=["blank", "invisible", "blank-preamble"],
)
async def test_a_reply_of_nothing_visible_neither_shows_nor_sticks_the_thread(
    analyst, fake_model, recorder, replies
):
    """A reply of "\n\n" was posted as an empty-looking message and kept in the history, which the API
    (and now the fake, as it does) refuses on every later request: the thread could never answer again."""
    fake_model.enqueue(*replies)
    first = await analyst.handle(ask("which carriers were most delayed?"), recorder)
    assert first.ok, first.error
    assert first.answer == (ANSWER if len(replies) > 1 else "I have no answer to give for that.")
    fake_model.enqueue(text("Only the top 3: UA, B6, EV."))
    follow_up = await analyst.handle(ask("only the top 3"), recorder)
    assert follow_up.ok, follow_up.error
    assert follow_up.answer == "Only the top 3: UA, B6, EV."
    assert_valid(fake_model.requests[-1]["messages"])


async def test_answer_written_with_its_attachments_ends_the_turn(analyst, fake_model, recorder):
    """The canonical question in three model calls: query → chart + CSV → answer with attachments."""
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Average delay by carrier"},
            say=ANSWER,
            more=[("attach_file", {"path": "delays.csv"})],
        ),
        text("A fourth call must not happen."),
    )
    question = "which carriers had the most delayed departures? chart it and give me the CSV"
    outcome = await analyst.handle(ask(question, "s5"), recorder)
    assert outcome.ok, outcome.error
    assert len(fake_model.requests) == 3 and outcome.stats.model_calls == 3
    assert outcome.answer == ANSWER == recorder.of("answer")[0].text
    assert [a.path for a in outcome.artifacts] == ["delays.png", "delays.csv"]
    assert not any(ANSWER.splitlines()[0] in e.text for e in recorder.of("thinking"))
    history = await analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    assert [b["type"] for b in history[-3]["content"]] == ["tool_use", "tool_use"]
    assert history[-1] == {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}
    fake_model.enqueue(text("Only the top 3: F9, EV, YV."))
    follow_up = await analyst.handle(ask("only the top 3", "s5"), recorder)
    assert follow_up.ok and len(fake_model.requests) == 4
    assert_valid(fake_model.requests[-1]["messages"] + [{"role": "assistant", "content": "x"}])


async def test_a_failed_attachment_goes_back_to_the_model(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool("attach_file", {"path": "nowhere.png"}, say="Here is the chart."),
        text("I could not make the chart, sorry."),
    )
    outcome = await analyst.handle(ask("chart it", "s6"), recorder)
    assert outcome.answer == "I could not make the chart, sorry." and outcome.stats.model_calls == 2
    assert fake_model.last_tool_results(1)[0]["is_error"] is True
    assert outcome.artifacts == []
