"""Long threads end to end (real store, real sandbox, the scripted Messages API): what a late turn sends
about early ones, and what the store keeps."""

from __future__ import annotations

import json
from dataclasses import replace

from core import history as hist
from core.events import IncomingMessage, SharedFile
from core.shared_files import is_intake_block
from tests.fakes.anthropic_api import text, tool
from tests.fakes.scenarios import CHART, DELAYS, assert_valid


def ask(text_: str, key: str = "long") -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=(key,), user_id="u1")


async def chart_turn(analyst, fake_model, recorder, key: str = "long"):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool("attach_file", {"path": "delays.png"}, say="**F9** had the highest average delay."),
    )
    outcome = await analyst.handle(ask("which carriers were most delayed? chart it", key), recorder)
    assert outcome.ok, outcome.error
    return outcome


async def fillers(analyst, fake_model, recorder, count: int, key: str = "long") -> None:
    for n in range(count):
        fake_model.enqueue(text(f"Answer {n}."))
        assert (await analyst.handle(ask(f"filler question {n}", key), recorder)).ok


async def test_a_late_turn_still_names_the_files_an_early_turn_made(analyst, fake_model, recorder):
    await chart_turn(analyst, fake_model, recorder)
    await fillers(analyst, fake_model, recorder, 8)
    fake_model.enqueue(text("Here it is in blue."))
    assert (await analyst.handle(ask("the chart from earlier but in blue"), recorder)).ok
    sent = fake_model.requests[-1]["messages"]
    assert not any(b.get("type") == "tool_use" for b in sent[1]["content"])  # turn 1 is collapsed…
    assert sent[1]["content"][0]["text"] == (  # …to its answer and what its steps left
        "**F9** had the highest average delay.\n"
        "[3 steps; files: delays.parquet (16 rows), delays.csv, delays.png; attached: delays.png]"
    )


async def test_the_saved_history_keeps_only_what_a_request_can_send(analyst, fake_model, recorder):
    first = await chart_turn(analyst, fake_model, recorder)
    await fillers(analyst, fake_model, recorder, 7)
    saved = await analyst.store.load_history(first.session_id)
    assert_valid(saved)
    # turn 1 is 7 turns back: every later request sends it collapsed, so it is saved collapsed
    assert saved[:2] == hist.compact([*saved, {"role": "user", "content": "next"}])[:2]
    assert [b["type"] for b in saved[1]["content"]] == ["text"] and "delays.png" in json.dumps(saved[1])
    fake_model.enqueue(text("Next."))
    await analyst.handle(ask("next"), recorder)
    # what was sent is what the whole history would have sent, byte for byte (the prompt cache)
    whole = [*saved, {"role": "user", "content": [{"type": "text", "text": "next"}]}]
    assert fake_model.requests[-1]["messages"][:-1] == hist.compact(whole)[:-1]

    await fillers(analyst, fake_model, recorder, hist.MAX_TURNS - 8)  # past the 40 turns a request holds
    saved = await analyst.store.load_history(first.session_id)
    assert_valid(saved)
    questions = [m for m in saved if hist.is_question(m)]
    assert len(questions) == hist.MAX_TURNS - 1  # with the next question, all a request can hold
    assert questions[0]["content"][0]["text"] == "filler question 1"
    assert sum(1 for m in saved for b in m["content"] if b.get("type") == "tool_use") == 0


async def test_a_file_shared_early_is_one_line_once_its_turn_is_older(analyst, fake_model, recorder):
    """The block the intake wrote for a shared file goes whole with the next question, then as one
    line naming the file in the workspace and its rows (a question with ten files had 30 KB of it in
    every request, all 40 turns long)."""
    shared = SharedFile("sales.csv", b"region,amount\nnorth,10\nsouth,5\n")
    fake_model.enqueue(text("Two regions."))
    asked = ask("what is in it?")
    assert (await analyst.handle(replace(asked, files=(shared,)), recorder)).ok
    await fillers(analyst, fake_model, recorder, 6)
    firsts = [[b["text"] for b in body["messages"][0]["content"]] for body in fake_model.requests[1:]]
    assert firsts[0][0] == "what is in it?" and is_intake_block(firsts[0][-1])  # with the next question
    line = "(Shared with this question: 'sales.csv' 2 rows.)"
    assert [texts[-1] for texts in firsts[1:]] == [line] * 5  # stubbed, then collapsed
    assert not any(is_intake_block(t) for texts in firsts[1:] for t in texts)
