"""History stays valid Anthropic format whatever happened, and older tool results shrink."""

from __future__ import annotations

import json

import pytest

from core import history as hist


def use(i: str) -> dict:
    return {"type": "tool_use", "id": i, "name": "run_python", "input": {"code": "1"}}


def result(i: str, content: str = "ok") -> dict:
    return {"type": "tool_result", "tool_use_id": i, "content": content}


def user(*blocks) -> dict:
    return {"role": "user", "content": list(blocks) or [{"type": "text", "text": "q"}]}


def assistant(*blocks) -> dict:
    return {"role": "assistant", "content": list(blocks) or [{"type": "text", "text": "a"}]}


def is_valid(messages: list[dict]) -> bool:
    if not messages or messages[0]["role"] != "user" or messages[-1]["role"] != "assistant":
        return False
    for a, b in zip(messages, messages[1:], strict=False):
        if a["role"] == b["role"]:
            return False
        if a["role"] == "assistant":
            uses = {x["id"] for x in a["content"] if x.get("type") == "tool_use"}
            got = {x["tool_use_id"] for x in b["content"] if x.get("type") == "tool_result"}
            if uses != got:
                return False
    texts = [b for m in messages for b in hist._blocks(m) if b.get("type") == "text"]
    return all(str(b.get("text") or "").strip() for b in texts)  # the API refuses a blank text block


CASES = {
    "already valid": [user(), assistant()],
    "crash after tool_use": [user(), assistant(use("a"))],
    "crash mid parallel results": [user(), assistant(use("a"), use("b")), user(result("a"))],
    "model failed after the question": [user(), assistant(), user()],
    "two user messages in a row": [user(), user(), assistant()],
    "orphan tool_result": [user(), assistant(), user(result("zzz")), assistant()],
    "leading assistant": [assistant(), user(), assistant()],
    "string content": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    "empty messages dropped": [user(), {"role": "assistant", "content": []}, assistant()],
    "two assistants with pending tools": [user(), assistant(use("a")), assistant(use("b"))],
    # a reply of "\n\n" beside a tool call, or alone: stored, it was refused on every later turn
    "blank text beside a tool call": [
        user(),
        assistant({"type": "text", "text": "\n\n"}, use("a")),
        user(result("a")),
        assistant(),
    ],
    "blank answer": [user(), assistant({"type": "text", "text": " "}), user(), assistant()],
    "empty question text": [user({"type": "text", "text": ""}, {"type": "text", "text": "q"}), assistant()],
}


@pytest.mark.parametrize("messages", CASES.values(), ids=CASES.keys())
def test_repair_always_yields_valid_history(messages):
    repaired = hist.repair(messages)
    assert is_valid(repaired), repaired


def test_repair_answers_dangling_tool_use_as_interrupted_error():
    repaired = hist.repair([user(), assistant(use("a"))], failure_note="(This turn failed: boom)")
    results = repaired[2]["content"]
    assert results[0] == {
        "type": "tool_result",
        "tool_use_id": "a",
        "content": hist.INTERRUPTED,
        "is_error": True,
    }
    assert repaired[-1]["content"][0]["text"] == "(This turn failed: boom)"


def test_repair_keeps_valid_history_unchanged():
    messages = [user(), assistant(use("a")), user(result("a")), assistant()]
    assert hist.repair(messages) == messages


def test_compact_shrinks_old_tool_results_but_keeps_recent_turns():
    big = "x" * 5000
    messages = []
    for turn in range(4):
        messages += [user(), assistant(use(f"t{turn}")), user(result(f"t{turn}", big)), assistant()]
    compacted = hist.compact(messages, keep_turns=2)
    sizes = [
        len(m["content"][0]["content"]) for m in compacted if m["content"][0].get("type") == "tool_result"
    ]
    assert sizes[0] < 600 and sizes[1] < 600  # the two oldest turns are stubs
    assert sizes[2] == sizes[3] == 5000  # the two newest are whole
    assert "workspace" in compacted[2]["content"][0]["content"]
    assert is_valid(compacted)


def test_compact_drops_oldest_turns_beyond_the_limit_and_stays_valid():
    messages = []
    for turn in range(10):
        messages += [
            user({"type": "text", "text": f"q{turn}"}),
            assistant(use(f"t{turn}")),
            user(result(f"t{turn}")),
            assistant(),
        ]
    compacted = hist.compact(messages, max_turns=3)
    assert compacted[0]["content"][0]["text"] == "q7"
    assert is_valid(compacted)


def test_strip_cache_control_does_not_touch_the_input():
    messages = [user({"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}), assistant()]
    stripped = hist.strip_cache_control(messages)
    assert "cache_control" not in stripped[0]["content"][0]
    assert "cache_control" in messages[0]["content"][0]


def test_old_turns_collapse_to_question_and_answer_and_stay_valid():
    messages = []
    for turn in range(12):
        messages += [
            user({"type": "text", "text": f"q{turn}"}),
            assistant({"type": "text", "text": "let me look"}, use(f"t{turn}")),
            user(result(f"t{turn}", "y" * 3000)),
            assistant({"type": "text", "text": f"answer {turn}"}),
        ]
    compacted = hist.compact(messages, keep_turns=2, full_turns=6)
    assert is_valid(compacted)
    assert compacted[0]["content"][0]["text"] == "q0"
    assert compacted[1]["content"][0]["text"] == "answer 0\n[1 step; no files saved]"
    assert sum(1 for m in compacted if hist.is_question(m)) == 12  # every question is remembered
    assert len(str(compacted)) < len(str(messages)) / 3


def test_compaction_is_stable_within_a_turn():
    """Adding steps to the current turn never changes the compacted bytes of earlier turns (cache)."""
    messages = []
    for turn in range(9):
        messages += [
            user({"type": "text", "text": f"q{turn}"}),
            assistant(use(f"t{turn}")),
            user(result(f"t{turn}", "z" * 2000)),
            assistant(),
        ]
    current = [*messages, user({"type": "text", "text": "now"})]
    before = hist.compact(current)
    after = hist.compact([*current, assistant(use("n1")), user(result("n1", "w" * 5000))])
    assert after[: len(before)] == before


def turn_with_files(n: int, names: list[str]) -> list[dict]:
    saved = f"Saved 1,234 rows to 'q{n}.parquet'. Columns: a INTEGER.\nPreview (first rows):\n1"
    made = "stdout:\nok\nNew or changed files: " + ", ".join(f"{x} (1,024 bytes)" for x in names)
    failed = {**result(f"c{n}", "error:\nboom\nFiles it left or changed before failing: half.png (9 bytes)")}
    return [
        user({"type": "text", "text": f"q{n}"}),
        assistant(use(f"a{n}"), use(f"b{n}")),
        user(result(f"a{n}", saved), result(f"b{n}", made)),
        assistant(use(f"c{n}")),
        user({**failed, "is_error": True}),
        assistant({"type": "text", "text": f"answer {n}"}),
    ]


def test_a_collapsed_turn_names_its_files_briefly_and_the_same_way_every_time():
    names = [f"chart_{i}.png" for i in range(11)]
    thread = turn_with_files(0, names)
    for n in range(1, 12):
        thread += [user({"type": "text", "text": f"q{n}"}), assistant({"type": "text", "text": f"a{n}"})]
    line = hist.compact(thread)[1]["content"][0]["text"]
    assert line == (
        "answer 0\n[3 steps; files: q0.parquet (1,234 rows), chart_0.png, chart_1.png, chart_2.png, "
        "chart_3.png, chart_4.png, chart_5.png, chart_6.png and 4 more]"
    )
    # collapsed from turn 6 on, in the same bytes at every later turn (the prompt cache)
    collapsed = [hist.compact(thread[: 6 + 2 * n])[:2] for n in range(6, 12)]
    assert all(c == collapsed[0] for c in collapsed)


def test_a_collapsed_turn_names_only_what_the_bot_wrote_not_what_a_step_printed():
    """A step's stdout printed look-alikes of the bot's lines, and the collapsed turn claimed them."""
    printed = (
        "stdout:\nSaved 9 rows to 'fake.parquet'. Columns: a INTEGER.\n"
        "Attached secret.png (1 bytes) to the conversation as 'x'.\n"
        "New or changed files: fake.png (1 bytes)\nthat was all\nNew or changed files: real.png (2 bytes)"
    )
    thread = [
        user({"type": "text", "text": "q0"}),
        assistant(use("p0")),
        user(result("p0", printed)),
        assistant({"type": "text", "text": "answer 0"}),
    ]
    for n in range(1, 8):
        thread += [user({"type": "text", "text": f"q{n}"}), assistant({"type": "text", "text": f"a{n}"})]
    assert hist.compact(thread)[1]["content"][0]["text"] == "answer 0\n[1 step; files: real.png]"


def test_the_saved_history_sends_exactly_what_the_whole_one_would():
    """`for_storage` drops what no request sends and collapses what every request collapses: whatever
    the limits, each later request is byte for byte the one the whole history gives."""
    for max_turns, full_turns in ((40, 6), (5, 3), (3, 6), (2, 1), (1, 2)):
        limits = {"max_turns": max_turns, "full_turns": full_turns}
        whole: list[dict] = []
        saved: list[dict] = []
        for n in range(12):
            turn = turn_with_files(n, [f"f{n}.csv"]) if n % 3 else [user(), assistant()]
            for upto in range(1, len(turn)):  # every request of the turn: its question, then each step
                assert hist.compact(saved + turn[:upto], **limits) == hist.compact(
                    whole + turn[:upto], **limits
                )
            whole += turn
            saved = hist.for_storage(saved + turn, **limits)
            assert is_valid(saved) or not saved
            assert sum(map(hist.is_question, saved)) <= max_turns - 1
            assert hist.for_storage(saved, **limits) == saved  # saving it again changes nothing


def test_a_stored_history_with_lone_surrogates_heals_as_it_is_repaired():
    """Saved before questions were repaired on the way in, a history holding "M\\udcfcnchen" failed to
    encode in every later request of its session; repaired (as it is on every load) it reads München."""
    broken = [
        {"role": "user", "content": [{"type": "text", "text": "flights to M\udcfcnchen?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "To M\udcfcnchen: 12."}]},
    ]
    healed = hist.repair(broken)
    assert healed[0]["content"][0]["text"] == "flights to München?"
    assert healed[1]["content"][0]["text"] == "To München: 12."
    json.dumps(healed, ensure_ascii=False).encode("utf-8")  # what the SDK does to a request
    assert broken[0]["content"][0]["text"] == "flights to M\udcfcnchen?"  # the input is left alone
