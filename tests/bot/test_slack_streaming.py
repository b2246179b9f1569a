"""The answer's text reaches Slack while Claude writes it: signed events into `datathread serve`, the
scripted Messages API streaming its reply a token at a time, the real slack_sdk against the fake Slack
Web API. What is appended is in order, complete, inert, and never has to be taken back."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest

from bot.slack_stream import render
from tests.bot.slack_harness import fresh_fakes, mention, message, served_once
from tests.fakes.anthropic_api import cut, text, tool
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio(loop_scope="module")

ANSWER = (
    "**EV** had the most delayed departures last quarter (23,139), then **B6** and **UA**. "
    "Most of the delay is in the evening bank; see the [BTS glossary](https://www.bts.gov/glossary) "
    "for how `dep_delay` is counted.\n\n"
    "| carrier | delayed |\n|---|---:|\n| EV | 23139 |\n| B6 | 21445 |\n\n"
    "Ask me for the top 3 as a CSV."
)


slack = served_once("slack-stream")


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    fresh_fakes(slack_api, model)
    yield
    fresh_fakes(slack_api, model)


def text_appends(api: FakeSlackAPI) -> list:
    return [c for c in api.of("chat.appendStream") if c.args.get("markdown_text")]


async def test_the_answer_shows_while_claude_writes_it(slack, model):
    model.token_delay_s = 0.02  # ~60 events: the reply takes over a second to write
    model.enqueue(text(ANSWER))
    await slack.event(mention("which carriers had the most delayed departures?", ts="300.1"))
    await slack.drain()
    appends = text_appends(slack.api)
    times = model.stream_times[-1]
    assert appends[0].at < times["done"] - 0.5, "the first words waited for the whole reply"
    assert appends[0].at - times["first_text"] < 1.0
    assert len(appends) >= 3  # several pieces, not the answer in one go at the end
    assert "".join(a.args["markdown_text"] for a in appends) == render(ANSWER)  # in order, complete
    stop = slack.api.of("chat.stopStream")[0]
    assert stop.at >= appends[-1].at and stop.args["blocks"]  # the footer closes the stream
    # at most one append per half second after the first (Tier 4 is shared by the workspace's turns)
    gaps = [b.at - a.at for a, b in zip(appends[:-1], appends[1:], strict=True)][:-1]
    assert all(g > 0.45 for g in gaps), gaps


async def test_text_before_a_step_shows_before_the_step_and_the_answer_after_it(slack, model):
    model.enqueue(
        tool("run_python", {"code": "print(6 * 7)"}, say="Let me work that out."), text("It is **42**.")
    )
    await slack.event(mention("what is six times seven?", ts="301.1"))
    await slack.drain()
    appends = slack.api.of("chat.appendStream")
    kinds = ["text" if a.args.get("markdown_text") else a.args["chunks"][0]["status"] for a in appends]
    runs = [k for n, k in enumerate(kinds) if n == 0 or kinds[n - 1] != k]  # one entry per run of a kind
    assert runs == ["text", "in_progress", "complete", "text"], kinds
    shown = "".join(a.args.get("markdown_text", "") for a in appends)
    assert shown == "Let me work that out.\n\nIt is **42**."


async def test_a_python_error_shows_on_its_task_card_as_the_exception_and_claude_gets_the_traceback(
    slack, model
):
    """The task card read "error: Traceback (most recent call last): File "step.py", line 2, in
    <module> ZeroDivisionError: division by zero": frames a person cannot act on."""
    model.enqueue(tool("run_python", {"code": "x = 1\nx / 0"}), text("Dividing by zero failed."))
    await slack.event(mention("divide one by zero", ts="301.2"))
    await slack.drain()
    chunks = [c for a in slack.api.of("chat.appendStream") for c in a.args.get("chunks") or []]
    failed = [c for c in chunks if c["status"] == "error"]
    assert [c["output"] for c in failed] == ["ZeroDivisionError: division by zero"]
    sent = model.last_tool_results()[0]["content"]
    assert 'Traceback (most recent call last):\n  File "step.py", line 2' in sent, sent


async def test_streamed_pieces_can_never_ping_or_link_anywhere(slack, model):
    hostile = "Sure <!here> and <@U0BOSS> see [the docs](!channel) or [this](slack://open) & <https://x.io|y>"
    model.enqueue(text(hostile))
    await slack.event(mention("ping everyone?", ts="302.1"))
    await slack.drain()
    appends = text_appends(slack.api)
    assert len(appends) >= 2
    for piece in (a.args["markdown_text"] for a in appends):
        assert "<!" not in piece and "<@" not in piece and "](!" not in piece and "](slack:" not in piece
    assert "".join(a.args["markdown_text"] for a in appends) == render(hostile)


async def test_a_reply_that_breaks_off_keeps_its_words_ends_with_a_sentence_and_the_thread_goes_on(
    slack, model
):
    model.enqueue(cut(text("The busiest airport was EWR with many departures"), after=7))
    await slack.event(mention("busiest airport?", ts="303.1"))
    await slack.drain()
    shown = "".join(a.args["markdown_text"] for a in text_appends(slack.api))
    assert shown.startswith("The busiest airport ")
    assert "broke off" in shown.split("\n\n")[-1]  # the failure sentence follows what was shown
    assert slack.api.of("chat.stopStream")  # the stream is closed, not left spinning
    slack.api.clear()
    model.enqueue(text("EWR, with 120,835 departures."))
    await slack.event(message("and the busiest?", ts="303.2", thread_ts="303.1"))
    await slack.drain()
    assert (
        "".join(a.args["markdown_text"] for a in text_appends(slack.api)) == "EWR, with 120,835 departures."
    )


async def test_an_append_held_back_by_slack_still_lands_and_nothing_is_skipped(slack, model):
    """Slack answers the second text append with 429 (retry after 1 s): the turn ends while the SDK
    waits to send it again. The end of the stream waits for that append, then goes on from what Slack
    has, so the words are all there, once and in order."""
    answer = " ".join(f"word{n}" for n in range(40)) + "."
    slack.api.rate_limited["chat.appendStream"] = {2}
    model.token_delay_s = 0.02
    model.enqueue(text(answer))
    await slack.event(mention("count to forty", ts="304.1"))
    await slack.drain()
    assert "".join(a.args["markdown_text"] for a in text_appends(slack.api)) == answer


async def test_a_second_question_in_a_busy_thread_says_it_waits_for_the_first(slack, model):
    """Two mentions in one thread a moment apart: the second waits for the first (the session lock), and
    its stream sat open and empty all that time. Now a task card says it waits, done once it runs."""
    release = threading.Event()

    def slow(body: dict) -> dict:
        release.wait(30)
        return text("First answer.")

    asked = len(model.requests)  # the module's model: earlier tests' requests are there too
    model.enqueue(slow, text("Second answer."))
    await slack.event(mention("first question", ts="310.1"))
    await until_requests(model, asked + 1)  # the first holds the thread
    await slack.event(mention("second question", ts="310.2", thread_ts="310.1"))

    def waiting_cards() -> list[dict]:
        return [
            c
            for call in slack.api.of("chat.appendStream")
            for c in call.args.get("chunks", [])
            if c["id"] == "waiting"
        ]

    for _ in range(200):
        if waiting_cards():
            break
        await asyncio.sleep(0.05)
    assert [c["status"] for c in waiting_cards()] == ["in_progress"]
    assert "Waiting for the previous question" in waiting_cards()[0]["title"]
    release.set()
    await slack.drain()
    assert [c["status"] for c in waiting_cards()] == ["in_progress", "complete"]
    shown = "".join(slack.api.shown())
    assert "First answer." in shown and "Second answer." in shown


async def until_requests(model, n: int) -> None:
    for _ in range(200):
        if len(model.requests) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {n} model requests")


async def test_a_stream_slack_stops_taking_is_closed_before_the_answer_comes_below_it(slack, model):
    """Slack refused an append mid-answer (msg_too_long, a 429 past the SDK's retries): the stream was
    left open with its half-written text "is typing…" for good, the answer came again as a message
    below it, and a task card queued meanwhile was sent with no `ts` at all."""

    def refuse_from_now(body: dict) -> dict:
        slack.api.fail_methods["chat.appendStream"] = "msg_too_long"
        return text("There are **3** airports.")

    model.enqueue(tool("list_tables", {}, say="Counting airports."), refuse_from_now)
    await slack.event(mention("how many airports?", ts="320.1"))
    await slack.drain()
    slack.api.fail_methods.pop("chat.appendStream", None)
    appends = slack.api.of("chat.appendStream")
    assert appends and all(call.args.get("ts") == appends[0].args["ts"] for call in appends)
    stops = slack.api.of("chat.stopStream")
    assert [s.args["ts"] for s in stops] == [appends[0].args["ts"]]  # the stream is closed, with a note
    assert "the answer follows below" in stops[0].args["markdown_text"]
    posted = [
        c for c in slack.api.of("chat.postMessage") if "There are 3 airports." in c.args.get("text", "")
    ]
    assert len(posted) == 1  # the answer, once, as a message below the stream


async def test_an_upload_slack_refuses_is_one_log_line_and_a_note_in_its_words(slack, model, caplog):
    """The log said Slack's refusal over two lines ("The request to the Slack API failed. (url: …)" and
    "The server responded with: {…}"); SLACK.md promises one line per loss."""
    import logging

    slack.api.fail_methods["files.completeUploadExternal"] = "not_in_channel"
    code = "import pandas as pd\npd.DataFrame({'a': [1]}).to_csv('al.csv', index=False)"
    model.enqueue(
        tool("run_python", {"code": code}), tool("attach_file", {"path": "al.csv"}), text("Attached.")
    )
    with caplog.at_level(logging.WARNING, logger="datathread.slack"):
        await slack.event(mention("a csv please", ts="330.1"))
        await slack.drain()
    slack.api.fail_methods.pop("files.completeUploadExternal", None)
    said = [r.getMessage() for r in caplog.records if "upload of al.csv failed" in r.getMessage()]
    assert said == ["upload of al.csv failed: not_in_channel"]
    assert "I couldn't upload `al.csv` (I'm not a member of this channel)." in "".join(slack.api.shown())


async def test_a_channel_that_refuses_the_bot_gets_the_answer_to_the_asker_alone(slack, model):
    """A mention in a read-only or announcement channel: Slack refuses the bot's messages there, and
    the turn ran its model calls and steps and posted nothing (one log line). Now the asker is told at
    once, privately, and gets the answer privately, with a note for each file it could not share."""
    for method in ("chat.startStream", "chat.postMessage"):
        slack.api.fail_methods[method] = "restricted_action"
    code = "import pandas as pd\npd.DataFrame({'a': [1]}).to_csv('al.csv', index=False)"
    model.enqueue(
        tool("run_python", {"code": code}), tool("attach_file", {"path": "al.csv"}), text("Done: 1 row.")
    )
    try:
        await slack.event(mention("a csv please", ts="350.1"))
        await slack.drain()
    finally:
        slack.api.fail_methods.clear()
    private = slack.api.of("chat.postEphemeral")
    assert [c.args["thread_ts"] for c in private] == ["350.1", "350.1"]  # in the thread, to the asker
    assert all(c.args["user"] == "U0001" for c in private)
    assert "I can't post here (posting in this channel is restricted)" in private[0].args["text"]
    answer = json.dumps(private[1].args)
    assert "Done: 1 row." in answer and "only you can see this answer" in answer
    assert "I can't share `al.csv` here" in answer
    assert not slack.api.of("files.completeUploadExternal")  # it would have gone into the channel


async def test_a_channel_refusing_even_the_asker_stops_the_turn_before_any_model_call(slack, model, caplog):
    """The bot was removed from the channel (or it was archived) between the mention and the answer:
    nothing can reach anyone, and the turn paid for every model call and step anyway. Now it stops
    before the first, says why in one log line, and the thread works again once the bot is back."""
    import logging

    asked = len(model.requests)
    for method in ("chat.startStream", "chat.postMessage", "chat.postEphemeral"):
        slack.api.fail_methods[method] = "not_in_channel"
    model.enqueue(text("Nobody would see this."))
    try:
        with caplog.at_level(logging.WARNING, logger="datathread.slack"):
            await slack.event(mention("how many flights?", ts="351.1"))
            await slack.drain()
    finally:
        slack.api.fail_methods.clear()
    assert len(model.requests) == asked
    said = [r.getMessage() for r in caplog.records if r.name == "datathread.slack"]
    assert said == [
        "slack: U0001 in C0001 gets no answer: Slack refuses my messages there (not_in_channel, "
        "not_in_channel); stopping the turn"
    ]
    slack.api.clear()
    await slack.event(message("and now?", ts="351.2", thread_ts="351.1"))
    await slack.drain()
    assert "Nobody would see this." in "".join(slack.api.shown())  # the session goes on


async def test_a_refused_final_edit_on_the_fallback_path_still_delivers_the_answer(slack, model):
    """Streaming refused (free workspaces, GovSlack): the answer replaced the status message with
    chat.update, which every status edit of the turn shares. Refused (a 429 with a long Retry-After),
    the answer was lost and "Working on it…" stayed for good. The answer now never waits on chat.update:
    it comes as a message below, and the status goes."""
    slack.api.refuse_streaming = True
    slack.api.fail_methods["chat.update"] = "ratelimited"
    try:
        model.enqueue(text("There are **16** airlines."))
        await slack.event(mention("how many airlines?", ts="340.1", channel="C0340"))
        await slack.drain()
    finally:
        slack.api.refuse_streaming = False
        slack.api.fail_methods.pop("chat.update", None)
    posts = slack.api.of("chat.postMessage")
    status, answer = posts[0], posts[-1]
    assert "Working on it" in status.args["text"] and answer.args["thread_ts"] == "340.1"
    assert "There are **16** airlines." in json.dumps(answer.args["blocks"])
    for post in (status, answer):  # no previews drawn (and fetched by Slack) for the model's links
        assert post.args["unfurl_links"] is False and post.args["unfurl_media"] is False
    [deleted] = slack.api.of("chat.delete")
    assert deleted.args["ts"] == slack.api.posted["C0340"][0]["ts"]  # the status message went


async def test_a_refused_stream_stop_does_not_post_the_answer_twice(slack, model):
    """Every chunk of the answer was appended, then chat.stopStream was refused: the whole answer was
    posted again below the streamed one. Now only the footer (receipt and buttons) comes below."""
    slack.api.fail_methods["chat.stopStream"] = "internal_error"
    try:
        model.enqueue(tool("list_tables"), text("There are **16** airlines."))
        await slack.event(mention("how many airlines?", ts="341.1", channel="C0341"))
        await slack.drain()
    finally:
        slack.api.fail_methods.pop("chat.stopStream", None)
    streamed = "".join(c.args.get("markdown_text", "") for c in text_appends(slack.api))
    assert "There are **16** airlines." in streamed
    posted = [c.args for c in slack.api.of("chat.postMessage")]
    # not again (its words: "16" alone also matched a footer's random turn id or schedule options)
    assert not [p for p in posted if "airlines" in json.dumps(p.get("blocks", []))], posted
    [footer] = [p for p in posted if p.get("blocks")]
    assert footer["thread_ts"] == "341.1" and footer["blocks"][-1]["type"] == "actions"
    assert "markdown" not in [b["type"] for b in footer["blocks"]] and footer["text"].strip()  # no blank


async def test_text_that_cannot_be_shown_yet_is_not_rendered_again_for_every_token(slack, model, monkeypatch):
    """Inside a code block nothing can be shown until it closes, and each token rendered the whole
    answer again to find that out: an 82,000-character answer held `serve`'s event loop for 47 s. The
    text throttle now counts a look as an append: at most one look per interval, not one per token."""
    from bot import slack_stream

    looks = []
    ready = slack_stream.StreamedText.ready
    monkeypatch.setattr(slack_stream.StreamedText, "ready", lambda self: looks.append(1) or ready(self))
    code = "\n".join(f"SELECT origin, dest, count(*) AS n_{i} FROM flights GROUP BY 1, 2" for i in range(100))
    answer = f"The routes:\n\n```sql\n{code}\n```\n\nDone."
    tokens = len(re.findall(r"\s*\S+\s*|\s+", answer))
    model.token_delay_s = 0.003  # ~4 s of writing: past the text throttle's interval many times
    model.enqueue(text(answer))
    await slack.event(mention("every route as SQL", ts="342.1", channel="C0342"))
    await slack.drain()
    streamed = "".join(c.args.get("markdown_text", "") for c in text_appends(slack.api))
    assert "n_99 FROM flights" in streamed and streamed.rstrip().endswith("Done.")
    assert tokens > 1000 and len(looks) < tokens / 20, (len(looks), tokens)


async def test_cards_left_behind_by_a_slow_slack_end_as_their_steps_did(slack, model, monkeypatch):
    """A task-card append Slack took longer than the progress bound to answer stopped progress for the
    turn: that step's card stayed "in progress" and later steps never showed, above a finished answer.
    At the end each card shows how its step ended."""
    from bot import slack_client

    monkeypatch.setattr(slack_client, "PROGRESS_TIMEOUT_S", 0.5)

    def answer_once_slack_is_quick(body: dict) -> dict:
        slack.api.latency_s.pop("chat.appendStream", None)
        return text("There are 16 airlines.")

    slack.api.latency_s["chat.appendStream"] = 1.0
    model.enqueue(
        tool("list_tables"), tool("describe_table", {"table": "airlines"}), answer_once_slack_is_quick
    )
    await slack.event(mention("how many airlines?", ts="343.1", channel="C0343"))
    await slack.drain()
    last: dict[str, str] = {}
    for call in slack.api.of("chat.appendStream"):
        for chunk in call.args.get("chunks") or []:
            if chunk.get("type") == "task_update":
                last[chunk["id"]] = chunk["status"]
    steps = {k: v for k, v in last.items() if k != "waiting"}
    assert len(steps) == 2 and set(steps.values()) == {"complete"}, last
    assert "There are 16 airlines." in "".join(
        c.args.get("markdown_text", "") for c in text_appends(slack.api)
    )


@pytest.mark.parametrize(
    "n, method", [(0, "chat.startStream"), (1, "chat.appendStream"), (2, "chat.stopStream")]
)
async def test_a_slack_error_page_that_is_not_json_does_not_lose_the_question_or_its_answer(
    slack, model, n, method
):
    """In a Slack incident a load balancer answers 503 with a page of text, not Slack's JSON. Reading
    its error code raised AttributeError: a question whose stream could not start was dropped before
    Claude was asked (the thread saw "is thinking…" and nothing more), and one cut mid-stream ended
    with "Something went wrong on my side" and a traceback in the log."""
    slack.api.http_errors[method] = 503
    try:
        model.enqueue(text("There are **16** airlines."))
        await slack.event(mention("how many airlines?", ts=f"35{n}.1", channel=f"C035{n}"))
        await slack.drain()
    finally:
        slack.api.http_errors.pop(method, None)
    delivered = [
        c
        for c in slack.api.calls
        if c.method in ("chat.update", "chat.postMessage", "chat.appendStream", "chat.stopStream")
        and c.method != method  # what failed may or may not have been shown
        and "16" in json.dumps(c.args)
    ]
    assert delivered, [c.method for c in slack.api.calls]  # the answer came by another way
    assert not [s for s in slack.api.shown() if "went wrong" in s]
