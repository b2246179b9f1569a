"""Pure Teams rendering: Markdown conversion, capped Adaptive Card tables, steps, failures."""

from __future__ import annotations

import json

import pytest

from bot import teams_render as r
from bot.teams_answer_cards import answer_card


@pytest.mark.parametrize(
    "source,text,n_tables",
    [
        ("# Title\nBody", "**Title**\n\nBody", 0),
        ("line one\nline two", "line one\n\nline two", 0),
        ("Items:\n- a\n- b", "Items:\n- a\n- b", 0),
        ("```sql\nSELECT 1\nFROM t\n```", "```sql\nSELECT 1\nFROM t\n```", 0),
        ("Top:\n\n| a | b |\n|---|:-:|\n| 1 | 2 |\n\nafter", "Top:\n\n*(table 1 below)*\n\nafter", 1),
        ("a | b is not a table", "a | b is not a table", 0),
    ],
)
def test_to_teams_markdown(source, text, n_tables):
    got, tables = r.to_teams_markdown(source)
    assert got == text and len(tables) == n_tables


def test_table_caps_rows_columns_and_cells():
    table = r.Table(header=[f"c{i}" for i in range(12)], rows=[[str(i) * 200] * 12 for i in range(30)])
    element, note = r.table_element(table, max_rows=5, max_cols=3)
    assert len(element["rows"]) == 6 and len(element["columns"]) == 3
    assert all(len(row["cells"]) == 3 for row in element["rows"])
    cell = element["rows"][1]["cells"][0]["items"][0]["text"]
    assert len(cell) == r.MAX_CELL_CHARS and cell.endswith("…")
    assert note["text"] == "Not shown: 25 more rows, 9 more columns."
    small = r.table_element(r.Table(header=["a", "b"], rows=[["1"]]))
    assert len(small) == 1 and small[0]["rows"][1]["cells"][1]["items"][0]["text"] == ""


def test_answer_card_actions_carry_the_turn():
    card = answer_card("turn123", [])
    assert card["contentType"] == r.ADAPTIVE and card["content"]["version"] == "1.5"
    data = [a["data"] for a in card["content"]["actions"]]
    assert [d[r.ACTION_KEY] for d in data] == ["show_steps", "feedback", "feedback", "export_notebook"]
    assert {d["turn_id"] for d in data} == {"turn123"}


def test_the_answer_card_carries_the_receipt_under_the_tables():
    card = answer_card("turn1", [], "flights · 1 row · 2 model calls · 1.0 s")["content"]
    assert card["body"] == [
        {
            "type": "TextBlock",
            "text": "flights · 1 row · 2 model calls · 1.0 s",
            "isSubtle": True,
            "size": "Small",
            "wrap": True,
        }
    ]


def test_steps_markdown():
    record = {
        "steps": [
            {
                "tool": "query_warehouse",
                "title": "Querying the warehouse",
                "input": {"sql": "SELECT 1"},
                "ok": True,
                "summary": "1 row",
                "rows": 1,
                "duration_s": 0.2,
            },
            {
                "tool": "run_python",
                "title": "Running Python",
                "input": {"code": "print(1)"},
                "ok": False,
                "summary": "failed",
                "error": 'Traceback (most recent call last):\n  File "step.py", line 1, in <module>\nValueError: boom',
            },
            {
                "tool": "list_tables",
                "title": "Listing tables",
                "input": {},
                "ok": True,
                "summary": "5 tables",
            },
        ]
    }
    md = r.steps_markdown(record)
    assert "**1. Querying the warehouse** ✓ 1 row · 0.2 s\n\n```sql\nSELECT 1\n```" in md
    assert (
        "**2. Running Python** ✗ ValueError: boom\n\n```python\nprint(1)\n```" in md
    )  # as the task card said it
    assert "**3. Listing tables** ✓ 0.0 s" in md
    assert r.steps_markdown(None).startswith("I can't find")
    assert r.steps_markdown({"steps": []}) == "This answer didn't run any queries or code."
    refused = {
        "tool": "run_python",
        "title": "Running Python",
        "input": {"code": "import os"},
        "ok": False,
        "error": "refused: Line 1: `os` " + "x" * 200 + " `more`",
    }  # cut mid-quote by its brief
    head = r.steps_markdown({"steps": [refused]}).split("\n")[0]
    assert head.startswith("**1. Running Python** ✗ refused: Line 1: 'os' xxx") and "`" not in head
    # code with a fence of its own cannot close the step's fence: the step's is longer
    code = "s = '''\n```\n**x**\n'''"
    fenced = {"tool": "run_python", "title": "Running Python", "input": {"code": code}}
    assert r.steps_markdown({"steps": [fenced]}).endswith(f"\n\n````python\n{code}\n````")


def test_failure_confirm_and_link():
    assert r.failure_text("It broke.", "ab12") == "⚠️ It broke. (error id `ab12`)"
    confirm = r.confirm_card("Scan 2 TB?", "t:s")
    assert [a["data"]["answer"] for a in confirm["content"]["actions"]] == ["run", "cancel"]
    assert "valid for 2 minutes" in r.link_text("x.csv", "https://u", 120)
    assert "valid for 24 hours" in r.link_text("x.csv", "https://u", 86400)
    assert json.dumps(r.image_attachment("c.png", b"\x89PNG")).count("data:image/png;base64,") == 1


@pytest.mark.parametrize(
    "source,expected",
    [
        ("<at>Bob</at> did it", "&lt;at&gt;Bob&lt;/at&gt; did it"),
        ("# <b>big</b>", "**&lt;b&gt;big&lt;/b&gt;**"),
        ("a < b & `x < y`", "a &lt; b &amp; `x < y`"),
        ("<!here> <@U1> <!channel>", "&lt;!here&gt; &lt;@U1&gt; &lt;!channel&gt;"),
    ],
)
def test_model_text_is_inert_in_teams_messages(source, expected):
    assert r.to_teams_markdown(source)[0] == expected


def test_step_errors_and_failures_are_inert_in_teams():
    steps = r.steps_markdown(
        {
            "steps": [
                {"tool": "run_python", "title": "<at>t</at>", "ok": False, "summary": "<!here> <at>x</at>"}
            ]
        }
    )
    assert (
        "<!here>" not in steps and "<at>" not in steps and "&lt;!here&gt;" in steps and "&lt;at&gt;t" in steps
    )
    assert r.failure_text("<@U1> broke", "e1").startswith("⚠️ &lt;@U1&gt; broke")


def test_a_kilobytes_long_fence_line_is_split_and_never_loops():
    """A code block whose opening line alone is 25 KB (an info string the model ran away with): split
    like text, each piece within the limit — once, this looped forever on the bot's event loop."""
    import signal

    from bot.teams_render import MAX_MESSAGE_BYTES, split_message

    answer = "```" + "x" * 25_000 + "\nprint(1)\n```\n\nAfter the code."
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("split_message looped")))
    signal.alarm(10)
    try:
        pieces = split_message(answer)
    finally:
        signal.alarm(0)
    assert all(len(p.encode()) <= MAX_MESSAGE_BYTES for p in pieces) and len(pieces) >= 2
    assert "".join(pieces).count("x") == 25_000 and pieces[-1].endswith("After the code.")


def test_the_progress_cards_tail_never_starts_inside_a_character():
    """The card shows the end of a long answer; it was cut on the reversed text, where the grapheme
    rules read clusters backwards, so it could start with the back half of an emoji family (a joiner
    and "👦") or a lone combining accent. Cut at every byte of such an answer, the tail now starts on
    a character a person sees whole, and is as long as fits."""
    from wcwidth import iter_graphemes

    unit = "👨\u200d👩\u200d👧\u200d👦" + "e\u0301\u0302" + " "  # 80 bytes as the connector counts them
    for pad in range(r._size(unit)):  # the cut falls on each byte of a unit in turn
        answer = unit * 400 + "x" * pad
        starts, at = [], 0
        for cluster in iter_graphemes(answer):
            starts.append(at)
            at += len(cluster)
        body = r.progress_card([], status="Working", answer=answer)["content"]["body"]
        shown = body[-1]["text"]
        cut = len(answer) - len(shown)
        assert answer.endswith(shown) and cut in starts, (pad, shown[:3])
        before = starts[starts.index(cut) - 1]  # one character more would not fit
        assert r._size(shown) <= r.MAX_STREAMED_BYTES < r._size(answer[before:]), pad
