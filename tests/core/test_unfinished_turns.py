"""A turn is in the audit from the moment it runs. A turn whose process died under it (SIGKILL, the OOM
killer, a lost container) left no record at all: the audit never showed that the question was asked,
nor that its answer never came. Its record says so until the turn settles and replaces it."""

from __future__ import annotations

import asyncio

from core.events import IncomingMessage
from core.turn_records import UNFINISHED
from tests.fakes.anthropic_api import text, tool

SLOW = "import time\nprint('began', flush=True)\ntime.sleep(1.5)"


async def test_a_running_turn_is_recorded_unfinished_until_it_settles(analyst, fake_model, recorder):
    fake_model.enqueue(tool("run_python", {"code": SLOW}), text("Done."))
    message = IncomingMessage(
        text="how late were we?", surface="slack", thread_key=("T", "C", "1.0"), user_id="U1", channel_id="C1"
    )
    session_id = analyst.session_id(message)
    turn = asyncio.create_task(analyst.handle(message, recorder))
    while not (records := await analyst.store.list_turns(session_id=session_id)) and not turn.done():
        await asyncio.sleep(0.02)
    assert not turn.done(), "the turn ended before it was recorded"
    [running] = records
    assert (running["ok"], running["error"], running["question"]) == (False, UNFINISHED, "how late were we?")
    assert running["user_id"] == "U1" and running["channel_id"] == "C1"
    outcome = await turn
    assert outcome.ok, outcome.error
    [settled] = await analyst.store.list_turns(session_id=session_id)
    assert settled["turn_id"] == running["turn_id"] and settled["ok"] and settled["error"] == ""
    assert [s["tool"] for s in settled["steps"]] == ["run_python"]
