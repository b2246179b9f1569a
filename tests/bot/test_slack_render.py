"""Table-driven tests of the pure Slack rendering helpers."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import pytest
from rich.cells import cell_len

from bot import slack_blocks
from bot import slack_render as r
from bot.markdown import lead_sentence
from bot.slack_app import action_payload, is_ignored, strip_mention
from bot.transcript import format_bytes
from core.events import Receipt


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("# Title", "*Title*"),
        ("### **Bold** heading ##", "*Bold heading*"),
        ("**bold** and __also__", "*bold* and *also*"),
        ("*italic* and _this_", "_italic_ and _this_"),
        ("~~gone~~", "~gone~"),
        ("[docs](https://example.com/a?b=1)", "<https://example.com/a?b=1|docs>"),
        ("see <https://example.com>", "see <https://example.com>"),
        ("- one\n* two\n  + nested", "• one\n• two\n  • nested"),
        ("1. first\n2. second", "1. first\n2. second"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("`x**2 < y`", "`x**2 &lt; y`"),
        ("> quoted **x**", "> quoted *x*"),
        ("---", "──────────"),
        ("2 * 3 * 4", "2 * 3 * 4"),
    ],
)
def test_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert r.to_mrkdwn(markdown) == mrkdwn


@pytest.mark.parametrize(
    ("markdown", "kinds"),
    [
        ("one\n\ntwo", ["text", "text"]),
        ("intro\n```python\nx = 1\n\ny = 2\n```\nafter", ["text", "code", "text"]),
        ("| a | b |\n|---|---|\n| 1 | 2 |\n\nafter", ["table", "text"]),
        ("before\n| a | b |\n| :-- | --: |\n| x | 10 |", ["text", "table"]),
        ("a | b without a separator", ["text"]),
    ],
)
def test_to_units(markdown: str, kinds: list[str]) -> None:
    assert [u.kind for u in r.to_units(markdown)] == kinds


def test_table_preview_aligns_numbers_and_counts_hidden_rows() -> None:
    rows = ["| carrier | **delay** |", "|---|---:|"] + [f"| C{n} | {n * 1.5} |" for n in range(25)]
    text = r.table_to_text(rows, max_rows=3)
    assert text.splitlines() == [
        "carrier  delay",
        "-------  -----",
        "C0         0.0",
        "C1         1.5",
        "C2         3.0",
        "… 22 more rows",
    ]


def test_table_preview_aligns_wide_and_combined_characters() -> None:
    """A table of Japanese airport names was padded by characters: 東京国際空港 takes twelve columns in
    Slack's monospace font, so every column after it was out of line; an accent typed as a combining
    mark (e\u0301) takes none."""
    rows = ["| airport | flights | note |", "|---|---:|:-:|"]
    rows += ["| 東京国際空港 | 1,234 | 🛫 |", "| JFK | 98,765 | ok |", "| Cafe\u0301 | 5 | é |"]
    assert r.table_to_text(rows).splitlines() == [
        "airport       flights  note",
        "------------  -------  ----",
        "東京国際空港    1,234   🛫",
        "JFK            98,765   ok",
        "Café                5   é",
    ]
    lines = r.table_to_text(rows).splitlines()
    # the numbers end in one column as shown: 東京国際空港 is twelve columns wide, Café four
    assert {
        cell_len(line[: line.index(n) + len(n)])
        for line, n in zip(lines[2:], ["1,234", "98,765", "5"], strict=True)
    } == {21}


def test_a_table_with_a_cell_wider_than_half_a_message_is_split_not_hung() -> None:
    """A two-column table whose first cell was a 6,300-character stack trace: its preview's header and
    rule alone exceeded a message, the room left for rows was negative, and splitting never ended (on
    the event loop, memory growing). Now every row arrives, each message within Slack's limit."""
    cell = "Traceback " + "x" * 6300
    markdown = f"Top errors:\n\n| error | n |\n|---|--:|\n| {cell} | 3 |\n| short | 2 |\n"

    def looped(*_) -> None:
        raise TimeoutError("answer_messages did not return within 10 s")

    before = signal.signal(signal.SIGALRM, looped)  # a regression fails here, not hangs the suite
    signal.alarm(10)
    try:
        messages = r.answer_messages(markdown)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    texts = [m["blocks"][0]["text"] for m in messages]
    assert all(len(t) <= r.MARKDOWN_LIMIT for t in texts)
    # still a monospace preview (as a text its rule was a horizontal rule, its padding a code block)
    assert all(t.removeprefix("Top errors:\n\n").startswith("```\n") and t.endswith("\n```") for t in texts)
    shown = "".join(texts)
    assert shown.count("x") == 6300 and "short" in shown and shown.index("Top errors:") == 0


@pytest.mark.parametrize("markdown", ["&" * 13000, "R&D " * 4000], ids=["one-line", "words"])
def test_a_long_answer_that_escaping_lengthens_still_fits_every_message(markdown: str) -> None:
    """ "&" is sent as "&amp;": a piece cut to half a message came out at 2.5 messages, and the first
    message was empty (SlackObjectFormationError: the answer was never posted)."""
    texts = [m["blocks"][0]["text"] for m in r.answer_messages(markdown)]
    assert all(0 < len(t) <= r.MARKDOWN_LIMIT for t in texts)
    assert sum(t.count("&amp;") for t in texts) == markdown.count("&")
    assert all(0 < len(c) <= r.STREAM_LIMIT for c in r.stream_chunks(markdown))


@pytest.mark.parametrize(
    ("markdown", "limit", "pieces"),
    [
        ("short", 3000, 1),
        ("\n\n".join(["p" * 1000] * 5), 3000, 3),
        ("```\n" + "\n".join(["line " + "x" * 90] * 80) + "\n```", 3000, 3),
        ("| a | b |\n|---|---|\n" + "\n".join(f"| {n} | {'y' * 50} |" for n in range(15)), 500, 3),
    ],
)
def test_split_never_cuts_code_or_tables(markdown: str, limit: int, pieces: int) -> None:
    chunks = r.split_units(r.to_units(markdown), r.unit_mrkdwn, limit)
    assert len(chunks) == pieces
    for chunk in chunks:
        assert len(chunk) <= limit
        assert chunk.count("```") % 2 == 0  # every piece of a long code block is fenced on its own
    if "| a |" in markdown:  # a split table repeats its header in every piece
        assert all(c.split("\n")[1].split() == ["a", "b"] for c in chunks)


def test_answer_messages_respect_block_limits_and_put_the_footer_last() -> None:
    markdown = "\n\n".join(f"Paragraph {n} " + "w" * 2900 for n in range(120))
    footer = slack_blocks.footer_blocks(
        "turn1", {"steps": 2, "rows": 16, "bytes_scanned": 1_500_000, "duration_s": 3.14}
    )
    messages = r.answer_messages(markdown, footer)
    assert len(messages) == 30  # four 2,913-character paragraphs per 12,000-character markdown block
    assert [m["blocks"][0]["type"] for m in messages] == ["markdown"] * 30
    assert all(len(m["blocks"][0]["text"]) <= r.MARKDOWN_LIMIT == 12_000 for m in messages)
    assert all(len(m["blocks"]) == 1 for m in messages[:-1]) and len(messages[-1]["blocks"]) == 1 + len(
        footer
    )
    assert "Paragraph 119 " in messages[-1]["blocks"][0]["text"]
    assert all(len(m["text"]) <= r.SECTION_LIMIT for m in messages)
    assert messages[-1]["blocks"][-2:] == footer and footer[0]["elements"][0]["text"] == (
        "2 steps · 16 rows · 1.5 MB scanned · 3.1 s"
    )


def test_the_notification_text_of_an_answer_is_its_lead_sentence_in_plain_words() -> None:
    """Beside the blocks, `text` is all a phone's notification shows: it was the Markdown as typed
    ("**F9** is worst", table pipes), then the rendered part's words, so a table's monospace preview
    ("carrier  delayed / -------  -------") filled the notification. Now it is the lead sentence."""
    answer = (
        "## Delays\n\n**F9** is worst & late: see [the chart](https://x.example/c). EV is next.\n\n"
        "| carrier | delayed |\n|-|-:|\n| F9 | 1 & 2 |"
    )
    [message] = r.answer_messages(answer)
    assert message["text"] == "F9 is worst &amp; late: see the chart.", message["text"]
    assert message["blocks"][0]["text"].startswith(
        "## Delays\n\n**F9** is worst"
    )  # the message keeps Markdown
    [table_first] = r.answer_messages("| carrier | delayed |\n|-|-:|\n| F9 | 12 |\n\nF9 leads by far, at 12.")
    assert table_first["text"] == "F9 leads by far, at 12.", table_first["text"]
    long = r.answer_messages("word " * 200)[0]["text"]
    assert len(long) <= 300 and long.endswith("word…")


@pytest.mark.parametrize(
    ("markdown", "lead"),
    [
        ("Yes. F9 was the most delayed, by far. Then EV.", "Yes. F9 was the most delayed, by far."),
        ("# Delays by carrier\n\n```sql\nSELECT 1\n```", "Delays by carrier"),
        ("- **F9**: 20.2 min\n- EV: 20.0 min", "F9: 20.2 min"),
        ("```\nSELECT carrier\nFROM flights\n```", "SELECT carrier FROM flights"),
        ("a &lt; b & c, see [docs](https://x.example). More.", "a < b & c, see docs."),
    ],
    ids=["short-first", "heading", "list", "code-only", "entities"],
)
def test_the_lead_sentence_is_the_answers_opening_words(markdown: str, lead: str) -> None:
    assert lead_sentence(markdown) == lead


def test_the_receipt_escapes_its_words_but_not_its_date_token() -> None:
    fresh = datetime(2026, 12, 7, 17, 48, tzinfo=UTC)
    receipt = Receipt(tables=("R&D<x>",), rows=2, fresh_as_of=fresh, wall_s=1.0, verified_by="<!here>")
    line = slack_blocks.receipt_mrkdwn(receipt, now=fresh + timedelta(hours=1))
    token = f"<!date^{int(fresh.timestamp())}^\u200b{{date_short_pretty}} {{time}}|7 Dec 2026 17:48 UTC>"
    assert (
        line
        == f"R&amp;D&lt;x&gt; · 2 rows · data as of {token} · 1.0 s · based on a verified query by &lt;!here&gt;"
    )


def test_a_long_answers_later_messages_notify_as_continued() -> None:
    markdown = "\n\n".join(f"Paragraph {n} says this. " + "w" * 2900 for n in range(8))
    messages = r.answer_messages(markdown)
    assert len(messages) == 2 and messages[0]["text"] == "Paragraph 0 says this."
    assert messages[1]["text"] == "(continued) Paragraph 4 says this."


def test_stream_chunks_keep_markdown_and_fit_the_stream_limit() -> None:
    markdown = "**bold** [x](http://a)\n\n" + "\n\n".join(["z" * 5000] * 5)
    chunks = r.stream_chunks(markdown)
    assert chunks[0].startswith("**bold** [x](http://a)") and all(len(c) <= r.STREAM_LIMIT for c in chunks)


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (999, "999 B"), (1_500, "1.5 KB"), (12_000_000, "12 MB"), (3_200_000_000, "3.2 GB")],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_steps_messages_show_every_query_and_code_step() -> None:
    record = {
        "steps": [
            {
                "tool": "query_warehouse",
                "title": "Querying the warehouse",
                "input": {"sql": "SELECT 1"},
                "ok": True,
                "summary": "1 row",
                "rows": 1,
                "duration_s": 0.21,
            },
            {
                "tool": "run_python",
                "input": {"code": "print(2)"},
                "ok": True,
                "summary": "ok",
                "duration_s": 1.0,
            },
            {
                "tool": "describe_table",
                "input": {"table": "flights"},
                "ok": False,
                "summary": "no such table",
            },
        ]
    }
    text = "\n".join(
        b["text"] for m in slack_blocks.steps_messages(record) for b in m["blocks"] if b["type"] == "markdown"
    )
    assert "**1. Querying the warehouse** ✓ 1 row · 0.2 s\n\n```\nSELECT 1\n```" in text  # Slack: no language
    # a record from before steps kept their title is named by its tool
    assert "**2. run_python** ✓ 1.0 s\n\n```\nprint(2)\n```" in text
    assert "**3. describe_table** ✗ no such table · `flights`" in text


@pytest.mark.parametrize(
    ("event", "ignored"),
    [
        ({"user": "U1", "text": "hi"}, False),
        ({"user": "U1", "subtype": "file_share"}, False),
        ({"user": "U1", "subtype": "message_changed"}, True),
        ({"user": "U1", "subtype": "message_deleted"}, True),
        ({"user": "U1", "subtype": "channel_join"}, True),
        ({"user": "U1", "bot_id": "B1"}, True),
        ({"user": "UBOT"}, True),
        ({"subtype": "bot_message"}, True),
    ],
)
def test_is_ignored(event: dict, ignored: bool) -> None:
    assert is_ignored(event, "UBOT") is ignored


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("<@UBOT> how many?", "how many?"),
        ("<@UBOT|datathread>  hi ", "hi"),
        ("ask <@U2> too", "ask <@U2> too"),
    ],
)
def test_strip_mention(text: str, question: str) -> None:
    assert strip_mention(text, "UBOT") == question


def test_action_payload_prefers_the_thread_of_the_clicked_message() -> None:
    body = {
        "user": {"id": "U1"},
        "team": {"id": "T1"},
        "container": {"channel_id": "C1", "message_ts": "2.0", "thread_ts": "1.0"},
    }
    payload = action_payload(body, {"action_id": slack_blocks.ACTION_SHOW_SQL, "value": "turn1"})
    assert (
        payload
        == {
            "action": slack_blocks.ACTION_SHOW_SQL,
            "value": "turn1",
            "user": "U1",
            "team": "T1",
            "channel": "C1",
            "thread_ts": "1.0",
            "ephemeral": False,
            "response_url": "",  # none here; a click's own, where Slack sends one (replies where the bot is no member)
        }
    )
    body["container"]["is_ephemeral"] = True  # a click on a private (ephemeral) answer
    body["response_url"] = "https://hooks.slack.com/actions/T1/1/x"
    clicked = action_payload(body, {"action_id": slack_blocks.ACTION_EXPORT, "value": "turn1"})
    assert clicked["ephemeral"] is True and clicked["response_url"] == body["response_url"]


# --- inert output: model and step text can never ping, broadcast or link anywhere ------------------
HOSTILE = [
    "<!here> look",
    "<!channel>",
    "<@U1> and <@U123|someone>",
    "[x](!channel)",
    "[x](@U123)",
    "[x](#C123)",
    "[x](javascript:alert(1))",
    "[x](https://ok.example|<!here>)",
    "`<!here>` in code",
    "> <!channel> quoted",
]
CONTROL = ("<!", "<@", "<#", "<javascript")


@pytest.mark.parametrize("text", HOSTILE)
@pytest.mark.parametrize(
    "render",
    [
        r.to_mrkdwn,
        r.inert,
        lambda t: r.unit_markdown(r.Unit("text", t)),
        lambda t: "\n".join(r.stream_chunks(t)),
        lambda t: str(r.answer_messages(t)),
        lambda t: str(slack_blocks.confirm_blocks(t, "t:s")),
    ],
    ids=["mrkdwn", "inert", "markdown", "stream", "messages", "confirm"],
)
def test_model_text_renders_inert_on_every_slack_path(text: str, render) -> None:
    out = render(text)
    assert not any(c in out for c in CONTROL), out


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("[site](https://example.com)", "<https://example.com|site>"),
        ("[mail](mailto:a@example.com)", "<mailto:a@example.com|mail>"),
        ("[x](!channel)", "x (!channel)"),
        ("[x](@U123)", "x (@U123)"),
        ("<!here>", "&lt;!here&gt;"),
    ],
)
def test_only_web_and_mail_links_become_links(markdown: str, mrkdwn: str) -> None:
    assert r.to_mrkdwn(markdown) == mrkdwn


def test_streamed_markdown_keeps_web_links_and_code_but_escapes_the_rest() -> None:
    out = r.unit_markdown(r.Unit("text", "[docs](https://example.com) `a < b` x < y & <@U1>"))
    assert out == "[docs](https://example.com) `a < b` x &lt; y &amp; &lt;@U1&gt;"


@pytest.mark.parametrize("render", [r.unit_mrkdwn, r.unit_markdown])
def test_backticks_inside_code_do_not_close_its_block(render) -> None:
    code = 'note = """\n```sql\nSELECT 1\n```\n"""\nfour = "````"; six = "``````"'
    out = render(r.Unit("code", code))
    assert out.startswith("```\n") and out.endswith("\n```") and out.count("```") == 2, out
    assert out.replace("\u200b", "")[4:-4] == code  # only split


def test_the_footer_says_one_row_in_the_singular():
    assert (
        slack_blocks.stats_line({"steps": 1, "rows": 1, "duration_s": 0.4}) == "1 step · 1 row · 0.4 s"
    )  # was "1 rows"


def test_an_os_error_is_said_without_its_file_name():
    """A step that removed its file before the upload put the host's workspace path in the channel."""
    from bot.slack_client import failure_words

    gone = FileNotFoundError(2, "No such file or directory", "/srv/home/workspaces/sl-abc/x.csv")
    assert failure_words(gone, for_people=True) == "no such file or directory"
