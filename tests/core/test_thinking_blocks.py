"""Adaptive thinking, on by default from Claude Sonnet 5 (the default model is Sonnet 5.5): a reply may
open with a thinking block whose text is omitted and whose signature ties it to the model and the
conversation. The tool loop must send every such block back unchanged, in place, for the rest of the
turn — a changed or dropped block is a 400 from the API — and must never show thought as the answer.
"""

from __future__ import annotations

from core.events import IncomingMessage
from tests.fakes.anthropic_api import text, thinking, tool
from tests.fakes.scenarios import CHART, DELAYS, assert_valid

ANSWER = "**F9** had the highest average departure delay, 20.2 minutes."
THOUGHT = "The user wants delays per carrier; the flights table has dep_delay."


def ask(text_: str, key: str) -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=(key,), user_id="u1")


def blocks_of(message: dict) -> list[dict]:
    return [b for b in message["content"] if isinstance(b, dict)]


async def test_a_thinking_block_goes_back_unchanged_before_its_tool_call(analyst, fake_model, recorder):
    first = thinking(tool("list_tables"), thought=THOUGHT, signature="sig-one")
    fake_model.enqueue(first, text(ANSWER))
    outcome = await analyst.handle(ask("which carriers were most delayed?", "th1"), recorder)
    assert outcome.ok, outcome.error
    sent = fake_model.requests[1]["messages"]
    assert_valid(sent + [{"role": "assistant", "content": "x"}])
    calls = [m for m in sent if m["role"] == "assistant"][-1]
    kinds = [b["type"] for b in blocks_of(calls)]
    assert kinds == ["thinking", "tool_use"]
    replayed = blocks_of(calls)[0]
    assert {k: replayed[k] for k in ("type", "thinking", "signature")} == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": "sig-one",
    }
    shown = "".join(d.text for d in recorder.of("answer_delta"))
    assert THOUGHT not in shown and THOUGHT not in outcome.answer
    assert not any(THOUGHT in e.text for e in recorder.of("thinking"))
    assert outcome.answer == ANSWER


async def test_the_canonical_question_with_thinking_in_every_reply(analyst, fake_model, recorder):
    """Thinking (omitted text) before each call: still three model calls, the answer with its files,
    a valid history, and the follow-up replays the previous turn's blocks as they were."""
    fake_model.enqueue(
        thinking(tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}), signature="s-1"),
        thinking(tool("run_python", {"code": CHART}), signature="s-2"),
        thinking(
            tool(
                "attach_file",
                {"path": "delays.png"},
                say=ANSWER,
                more=[("attach_file", {"path": "delays.csv"})],
            ),
            signature="s-3",
        ),
        text("A fourth call must not happen."),
    )
    outcome = await analyst.handle(
        ask("carriers with the most delays? chart it and give me the CSV", "th2"), recorder
    )
    assert outcome.ok, outcome.error
    assert outcome.stats.model_calls == 3 and outcome.answer == ANSWER
    assert [a.path for a in outcome.artifacts] == ["delays.png", "delays.csv"]
    history = await analyst.store.load_history(outcome.session_id)
    assert_valid(history)
    signatures = [b["signature"] for m in history for b in blocks_of(m) if b["type"] == "thinking"]
    assert signatures == ["s-1", "s-2", "s-3"]
    # the answer moves after the results; its thinking stays with the calls it preceded
    assert [b["type"] for b in history[-3]["content"]] == ["thinking", "tool_use", "tool_use"]
    fake_model.enqueue(text("Only the top 3: F9, EV, YV."))
    follow_up = await analyst.handle(ask("only the top 3", "th2"), recorder)
    assert follow_up.ok, follow_up.error
    sent = fake_model.requests[-1]["messages"]
    assert_valid(sent + [{"role": "assistant", "content": "x"}])
    sent_signatures = [b["signature"] for m in sent for b in blocks_of(m) if b.get("type") == "thinking"]
    assert sent_signatures == ["s-1", "s-2", "s-3"]
