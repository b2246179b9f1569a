"""Long threads end to end (real store, real sandbox, the scripted Messages API): what a late turn sends
about early ones, and what the store keeps."""

from __future__ import annotations

from core.events import IncomingMessage
from tests.fakes.anthropic_api import text, tool
from tests.fakes.scenarios import CHART, DELAYS


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
