"""End-to-end tests of the Slack surface: signed requests into `datathread serve` (uvicorn on loopback),
the real slack_sdk/Bolt against a fake Slack Web API, the scripted model, real DuckDB and sandbox."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import pytest_asyncio

from bot import slack_blocks
from tests.bot.slack_harness import demo_home, mention, message, module_settings, serve, until
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.slack_api import BOT_ID, BOT_USER_ID, FakeSlackAPI

DELAYS = (
    "SELECT carrier, avg(dep_delay) AS avg_delay, count(*) AS n FROM flights "
    "GROUP BY carrier ORDER BY avg_delay DESC"
)
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.savefig('delays.png')
"""
ANSWER = """## Most delayed carriers

**F9** had the highest average departure delay.

| carrier | avg_delay |
|---|---:|
| F9 | 20.22 |
| EV | 19.96 |
"""


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    """One `datathread serve` for the module: building the core (sandbox fork server) is the slow part."""
    home = demo_home(tmp_path_factory)
    settings = module_settings(home, model.url, model_retries=2)
    async with serve(settings, slack_api) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    """Each test starts with an empty call log, streaming allowed and an empty model script."""
    slack_api.clear()
    slack_api.refuse_streaming = False
    with model.lock:
        model.replies.clear()
    yield


def chunks_of(api: FakeSlackAPI, kind: str) -> list[dict]:
    return [
        c for call in api.of("chat.appendStream") for c in call.args.get("chunks", []) if c["type"] == kind
    ]


def streamed_text(api: FakeSlackAPI) -> str:
    return "".join(c.args.get("markdown_text", "") for c in api.of("chat.appendStream"))


def turns_started(api: FakeSlackAPI) -> int:
    return len(api.of("chat.startStream")) + len(api.of("chat.postEphemeral"))


async def test_mention_progress_files_answer_follow_up_and_buttons(slack, model):
    model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Delays"},
            more=[("attach_file", {"path": "delays.parquet"})],
        ),
        text(ANSWER),
    )
    resp = await slack.event(mention("which carriers were most delayed? chart it", ts="100.1"))
    assert resp.status_code == 200
    await slack.drain()
    api = slack.api
    # progress: status, a stream in the thread, one task per step with rows and time
    assert api.of("assistant.threads.setStatus")[0].args["thread_ts"] == "100.1"
    start = api.of("chat.startStream")[0].args
    assert (start["channel"], start["thread_ts"], start["recipient_user_id"]) == ("C0001", "100.1", "U0001")
    tasks = chunks_of(api, "task_update")
    assert [t["status"] for t in tasks[:2]] == ["in_progress", "complete"]
    assert tasks[0]["title"] == "Querying the warehouse" and "GROUP BY carrier" in tasks[0]["details"]
    assert tasks[1]["output"].startswith("16 rows")
    assert sum(t["status"] == "complete" for t in tasks) == 4
    # files: into the thread, parquet converted to CSV
    completes = api.of("files.completeUploadExternal")
    assert {c.args["thread_ts"] for c in completes} == {"100.1"}
    uploads = list(api.uploads.values())
    assert uploads[0][:4] == b"\x89PNG"
    assert uploads[1].decode().splitlines()[0].replace('"', "") == "carrier,avg_delay,n"
    # answer: streamed as markdown (table as a preview block), footer with stats and buttons
    stop = api.of("chat.stopStream")[0].args
    streamed = streamed_text(api)
    assert "**F9** had the highest" in streamed and "```\ncarrier  avg_delay" in streamed
    context, actions = stop["blocks"]
    receipt = context["elements"][0]["text"]  # what the answer stands on: table, rows, freshness, calls
    assert receipt.startswith("flights · 16 rows · data as of ") and " · 4 model calls · " in receipt
    assert "not from any query" not in receipt  # 20.22 and 19.96 are the query's, rounded
    turn_id = actions["elements"][0]["value"]
    assert [e["action_id"] for e in actions["elements"]][:3] == [
        slack_blocks.ACTION_SHOW_SQL,
        slack_blocks.ACTION_FEEDBACK_UP,
        slack_blocks.ACTION_FEEDBACK_DOWN,
    ]

    # a follow-up in the thread needs no mention; unrelated messages are ignored
    model.enqueue(text("Only the top 3: F9, EV, YV."))
    api.clear()
    for ignored in (
        message("chatter", ts="100.3"),  # channel message, no mention
        message("elsewhere", ts="100.4", thread_ts="99.0"),  # a thread without a session
        message("mine", ts="100.5", thread_ts="100.1", bot_id=BOT_ID, user=BOT_USER_ID),
        message("edit", ts="100.6", thread_ts="100.1", subtype="message_changed"),
        message("hi", ts="100.7", thread_ts="100.1", subtype="channel_join"),
        # in our thread but to a colleague: a team discussing the answer got one answer per remark
        message("<@U0002> can you check this with finance?", ts="100.8", thread_ts="100.1"),
    ):
        assert (await slack.event(ignored)).status_code == 200
    await slack.event(message("only the top 3", ts="100.2", thread_ts="100.1"))
    await slack.drain()
    assert turns_started(api) == 1 and api.of("chat.startStream")[0].args["thread_ts"] == "100.1"
    assert "Only the top 3" in streamed_text(api)
    assert "which carriers" in json.dumps(model.requests[-1]["messages"])  # same session

    # Show SQL & code: every query and code step, only to the person who clicked
    api.clear()
    await slack.click(slack_blocks.ACTION_SHOW_SQL, turn_id, thread_ts="100.1")
    await slack.click(slack_blocks.ACTION_FEEDBACK_DOWN, turn_id, thread_ts="100.1")
    await slack.drain()
    shown, thanks = api.of("chat.postEphemeral")
    assert shown.args["user"] == "U0002" and shown.args["thread_ts"] == "100.1"
    text_shown = json.dumps(shown.args["blocks"], ensure_ascii=False)
    assert "GROUP BY carrier" in text_shown and "read_parquet" in text_shown
    # named and measured as the task cards named them, not by tool name and the model's summary
    assert "**1. Querying the warehouse** ✓ 16 rows · " in text_shown and "query_warehouse" not in text_shown
    record = await slack.state.analyst.store.get_turn(turn_id)
    assert record["feedback"] == {"U0002": "down"}


async def test_retries_and_mention_message_pair_are_answered_once(slack, model):
    before = len(model.requests)
    first = mention("how many flights?", ts="200.1")
    await slack.event(first, event_id="EvA")
    retry = await slack.event(first, event_id="EvA", headers={"X-Slack-Retry-Num": "1"})
    assert retry.status_code == 200
    await slack.drain()
    assert turns_started(slack.api) == 1 and len(model.requests) == before + 1
    # a mention inside a thread with a session arrives as app_mention AND message
    pair_text = f"<@{BOT_USER_ID}> and in 2014?"
    await slack.event(mention("and in 2014?", ts="200.2", thread_ts="200.1"), event_id="EvB")
    await slack.event(message(pair_text, ts="200.2", thread_ts="200.1"), event_id="EvC")
    await slack.drain()
    assert turns_started(slack.api) == 2 and len(model.requests) == before + 2


async def test_dm_and_slash_commands(slack, model):
    api = slack.api
    await slack.event(message("how many airports?", ts="300.1", channel="D0001", channel_type="im"))
    await slack.drain()
    assert api.of("chat.startStream")[0].args["channel"] == "D0001"
    # the Messages tab: a follow-up typed top-level continues the DM's conversation (it began a new one)
    model.enqueue(text("And 5 of them are in NY."))
    await slack.event(message("and in NY?", ts="300.3", channel="D0001", channel_type="im"))
    await slack.drain()
    assert "how many airports?" in json.dumps(model.requests[-1]["messages"])
    model.enqueue(text("And 3 in NJ."))  # a reply in the thread under an answer: the same conversation
    await slack.event(message("and NJ?", ts="300.31", thread_ts="300.3", channel="D0001", channel_type="im"))
    await slack.drain()
    assert "how many airports?" in json.dumps(model.requests[-1]["messages"])
    # `reset` starts afresh: the next question comes alone
    await slack.event(message("reset", ts="300.4", channel="D0001", channel_type="im"))
    await slack.drain()
    assert "fresh conversation" in api.of("chat.postMessage")[-1].args["text"]
    model.enqueue(text("Fresh."))
    await slack.event(message("how many planes?", ts="300.5", channel="D0001", channel_type="im"))
    await slack.drain()
    assert "airports" not in json.dumps(model.requests[-1]["messages"])

    # /ask: acknowledged at once, the question posted as the thread root, the answer in its thread
    api.clear()
    resp = await slack.command("how many flights in 2013?")
    assert resp.status_code == 200 and resp.text == ""
    await slack.drain()
    root = api.of("chat.postMessage")[0]
    assert "asked: how many flights in 2013?" in root.args["text"]
    root_ts = api.of("chat.startStream")[0].args["thread_ts"]
    assert root_ts.startswith("1700000")  # the fake's ts of the posted question
    model.enqueue(text("And 2014 isn't in the data."))
    await slack.event(message("and 2014?", ts="300.2", thread_ts=root_ts))
    await slack.drain()
    assert len(api.of("chat.startStream")) == 2
    assert "how many flights in 2013?" in json.dumps(model.requests[-1]["messages"])

    # /ask private: an ephemeral answer, no stream, no public root
    api.clear()
    model.enqueue(text("Only you see this."))
    resp = await slack.command("private how many planes?")
    assert "Working on it" in resp.text
    await slack.drain()
    assert not api.of("chat.startStream") and not api.of("chat.postMessage")
    assert not api.of("assistant.threads.setStatus")  # no thread to give a status (was thread_ts "")
    answer = [c for c in api.calls if c.method.startswith("/response/")][-1].args  # via the response_url
    assert answer["response_type"] == "ephemeral" and "Only you see this." in json.dumps(answer["blocks"])
    assert answer["replace_original"] is True  # in place of "Working on it…", which stayed for good
    assert "how many planes?" in json.dumps(model.requests[-1]["messages"])
    buttons = [e for b in answer["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert buttons and slack_blocks.ACTION_EXPORT not in [e["action_id"] for e in buttons]
    # even a forged Export click on the private turn uploads nothing; the clicker is told why
    api.clear()
    await slack.click(slack_blocks.ACTION_EXPORT, buttons[0]["value"])
    await slack.drain()
    assert not api.of("files.completeUploadExternal")
    assert "Private answers" in api.of("chat.postEphemeral")[0].args["text"]

    # a conversation the bot cannot post to (not a member): the answer still reaches the person privately
    api.clear()
    api.fail_methods["chat.postMessage"] = "not_in_channel"
    api.fail_methods["chat.postEphemeral"] = "channel_not_found"
    model.enqueue(text("Answered where I cannot post."))
    await slack.command("how many airports?", channel="C0BOTLESS")
    await slack.drain()
    api.fail_methods.clear()
    private = [c for c in api.calls if c.method.startswith("/response/")]
    assert private and "Answered where I cannot post." in json.dumps(private[-1].args["blocks"])
    assert private[-1].args["response_type"] == "ephemeral"

    # empty command: a hint, no turn
    hint = await slack.command("  ")
    assert "Ask me a data question" in hint.text


async def test_what_people_typed_reaches_the_model_as_they_typed_it(slack, model):
    """Slack sends `&gt;`, `&amp;`, `<url|label>` and `<#C|name>`: the model got them verbatim and the
    question posted for `/ask` came back escaped twice (`&amp;gt;`, shown to people as "&gt;")."""
    typed = "flights with dep_delay > 60 & arr_delay < 0 in #ops, see the query (https://x.example/q?a=1&b=2)"
    encoded = (
        "flights with dep_delay &gt; 60 &amp; arr_delay &lt; 0 in <#C0777|ops>, "
        "see <https://x.example/q?a=1&amp;b=2|the query>"
    )
    model.enqueue(text("Mentioned."), text("Slashed."))
    await slack.event(mention(encoded, ts="330.1"))
    await slack.drain()
    assert typed in json.dumps(model.requests[-1]["messages"][-1], ensure_ascii=False)
    slack.api.clear()
    await slack.command(encoded)
    await slack.drain()
    assert typed in json.dumps(model.requests[-1]["messages"][-1], ensure_ascii=False)
    root = slack.api.of("chat.postMessage")[0].args["text"]
    assert "asked: flights with dep_delay &gt; 60 &amp; arr_delay &lt; 0 in #ops" in root, root


async def test_replies_without_a_mention_are_followed_up_only_from_people_who_asked_there(slack, model):
    """Anyone's reply in a thread datathread answered ran a turn: a colleague's "thanks, that's
    great!" got "You're welcome!" — a paid model call and noise in the thread. A reply without a
    mention is a follow-up from someone who has asked the bot something there; anyone else mentions
    it once to join in. A thread answered with help counts too (the asker can then ask)."""
    model.enqueue(text("There are 16 airlines."))
    await slack.event(mention("how many airlines?", ts="350.1", channel="C0350"))
    await slack.drain()
    asked = len(model.requests)
    await slack.event(
        message("thanks, that's great!", ts="350.2", channel="C0350", thread_ts="350.1", user="U0002")
    )
    await slack.drain()
    assert len(model.requests) == asked  # a colleague's remark: no turn
    model.enqueue(text("By month: …"), text("And by carrier: …"))
    await slack.event(
        mention("and by month?", ts="350.3", channel="C0350", thread_ts="350.1") | {"user": "U0002"}
    )
    await until(lambda: len(model.requests) == asked + 1)  # the mention taken (not yet answered)
    await slack.event(
        message("and by carrier?", ts="350.4", channel="C0350", thread_ts="350.1", user="U0002")
    )
    await slack.drain()
    assert len(model.requests) == asked + 2  # mentioned once, then followed up without a mention
    await slack.event(mention("", ts="351.1", channel="C0350"))  # help, answered locally
    await slack.drain()
    model.enqueue(text("16."))
    await slack.event(message("how many airlines?", ts="351.2", channel="C0350", thread_ts="351.1"))
    await slack.drain()
    assert len(model.requests) == asked + 3


async def test_signatures_and_ack_latency_with_a_slow_model(slack, model):
    before = len(model.requests)

    def slow(body: dict) -> dict:
        time.sleep(1.0)
        return text("slow but sure")

    body = json.dumps({"type": "event_callback", "event": mention("x", ts="400.1")})
    bad = await slack.http.post(
        "/slack/events",
        content=body,
        headers={"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=00"},
    )
    stale = await slack.event(mention("x", ts="400.2"), headers=_stale(body))
    assert bad.status_code == stale.status_code == 401
    await slack.drain()
    assert len(model.requests) == before and not slack.api.calls

    model.enqueue(slow)
    model.enqueue(slow, slow, slow)
    latencies = []
    for n in range(3):
        started = time.perf_counter()
        resp = await slack.event(mention(f"question {n}", ts=f"401.{n}"))
        latencies.append(time.perf_counter() - started)
        assert resp.status_code == 200
    assert max(latencies) < 0.5, latencies
    await slack.drain()
    assert len(slack.api.of("chat.stopStream")) == 3


def _stale(body: str) -> dict:
    from tests.bot.slack_harness import sign

    return sign(body, ts=int(time.time()) - 600)


async def test_streaming_refused_falls_back_to_rate_limited_updates_and_splits(slack, model):
    code = "\n".join(f"print({n})  # line {n} " + "x" * 40 for n in range(60))
    long_answer = "\n\n".join(
        [f"Paragraph {n}: " + "words " * 60 for n in range(60)] + [f"```python\n{code}\n```", "The end."]
    )
    model.enqueue(
        tool("list_tables"),
        tool("describe_table", {"table": "flights"}),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}),
        text(long_answer),
    )
    slack.api.refuse_streaming = True
    await slack.event(mention("tell me everything", ts="500.1"))
    await slack.drain()
    api = slack.api
    status = api.of("chat.postMessage")[0]
    assert status.args["thread_ts"] == "500.1" and "Working on it" in status.args["text"]
    progress = api.of("chat.update")  # the status message's edits; the answer is new messages below it
    assert progress and all(b.at - a.at >= 0.9 for a, b in zip(progress, progress[1:], strict=False))
    messages = [c.args for c in api.of("chat.postMessage")[1:]]
    assert [d.args["ts"] for d in api.of("chat.delete")] == [progress[0].args["ts"]]  # then the status goes
    assert all(m.get("thread_ts", "500.1") == "500.1" for m in messages)
    parts = [b["text"] for m in messages for b in m["blocks"] if b["type"] == "markdown"]
    assert len(parts) >= 2 and all(
        len([b for b in m["blocks"] if b["type"] == "markdown"]) == 1 for m in messages
    )
    assert all(len(s) <= 12_000 and s.count("```") % 2 == 0 for s in parts)
    joined = "\n".join(parts)
    assert "Paragraph 59" in joined and "print(59)" in joined and joined.endswith("The end.")
    assert messages[-1]["blocks"][-1]["type"] == "actions"  # the footer goes last


async def test_failing_turn_ends_with_a_short_message_and_error_id(slack, model, caplog):
    model.enqueue(tool("list_tables"), error(400, "invalid_request_error", "bad request"))
    caplog.set_level(logging.WARNING, logger="datathread.turn")
    await slack.event(mention("break please", ts="600.1"))
    await slack.drain()
    stop = slack.api.of("chat.stopStream")[0].args
    shown = streamed_text(slack.api)
    assert "error id `" in shown and "Traceback" not in shown and len(shown) < 300
    error_id = shown.split("error id `")[1].split("`")[0]
    assert any(error_id in r.getMessage() for r in caplog.records)  # the id matches the log line
    assert not stop.get("blocks")  # no footer buttons on a failure


async def test_app_home_prompts_export_and_confirmation(slack, model):
    api = slack.api
    await slack.event({"type": "app_home_opened", "user": "U0003", "channel": "D0003", "tab": "home"})
    await slack.event(
        {
            "type": "assistant_thread_started",
            "assistant_thread": {"channel_id": "D0003", "thread_ts": "700.0"},
        }
    )
    await slack.drain()
    home = api.of("views.publish")[0].args
    assert home["user_id"] == "U0003" and "`flights` — 336,776 rows" in json.dumps(
        home["view"], ensure_ascii=False
    )
    prompts = api.of("assistant.threads.setSuggestedPrompts")[0].args
    assert prompts["thread_ts"] == "700.0" and len(prompts["prompts"]) == 4

    # Export notebook: the thread's session as an .ipynb uploaded into the thread
    model.enqueue(tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}), text("336,776."))
    await slack.event(mention("how many flights?", ts="700.1"))
    await slack.drain()
    turn_id = api.of("chat.stopStream")[-1].args["blocks"][1]["elements"][0]["value"]
    api.clear()
    await slack.click(slack_blocks.ACTION_EXPORT, turn_id, thread_ts="700.1")
    await slack.drain()
    done = api.of("files.completeUploadExternal")[0].args
    assert done["thread_ts"] == "700.1" and done["channel_id"] == "C0001"
    # named as "export this as a notebook" names it (it was datathread-<session id>.ipynb here)
    assert [f["title"] for f in json.loads(done["files"])] == ["This thread as a Jupyter notebook"]
    [asked_for] = api.of("files.getUploadURLExternal")
    assert asked_for.args["filename"] == "thread.ipynb"
    notebook = json.loads(next(iter(api.uploads.values())))
    assert "SELECT count(*) AS n FROM flights" in json.dumps(notebook["cells"])

    # Confirmation: Run/Cancel buttons in the thread; the click resolves the waiting step
    from bot.slack_client import build_client
    from bot.slack_confirm import build_confirmer
    from bot.slack_target import SlackTarget
    from core.events import ConfirmRequest

    target = SlackTarget(channel="C0001", thread_ts="700.1", team_id="T0001", user_id="U0001")
    confirm = build_confirmer(build_client(slack.state.settings), target, slack.state.threads)
    for action, expected in (
        (slack_blocks.ACTION_CONFIRM_RUN, True),
        (slack_blocks.ACTION_CONFIRM_CANCEL, False),
    ):
        waiting = asyncio.create_task(
            confirm(ConfirmRequest(turn_id="t9", step_id=action, prompt="Scan 40 GB?"))
        )
        while not api.of("chat.postMessage"):
            await asyncio.sleep(0.01)
        buttons = api.of("chat.postMessage")[-1].args["blocks"][1]["elements"]
        await slack.click(action, buttons[0]["value"], thread_ts="700.1", user="U0002")  # not the asker
        refusal = [c for c in api.calls if c.method.startswith("/response/")][-1].args
        assert "Only the person who asked" in refusal["text"] and not waiting.done()
        await slack.click(action, buttons[0]["value"], thread_ts="700.1", user="U0001")
        assert await asyncio.wait_for(waiting, 5) is expected
        api.clear()


HOSTILE = "<!here> <@U1> <!channel>"


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "chat.update"])
async def test_model_and_step_text_cannot_ping_anyone(slack, model, streaming):
    """Mentions and broadcasts in the model's text, its links and a step's error stay inert on every
    path: progress (stream tasks or the edited status message), the answer, and the footer."""
    slack.api.refuse_streaming = not streaming
    model.enqueue(
        tool("run_python", {"code": f"raise ValueError({HOSTILE!r})"}, say=f"Checking {HOSTILE}"),
        text(f"Done {HOSTILE} [x](!channel) [y](@U123) [site](https://example.com) a < b & c"),
    )
    await slack.event(mention("ping everyone?", ts=f"95{int(streaming)}.1"))  # one message per case
    await slack.drain()
    sent = json.dumps([call.args for call in slack.api.calls], ensure_ascii=False)
    for control in ("<!here", "<!channel", "<@U1", "<@U123"):
        assert control not in sent
    assert "&lt;!here&gt;" in sent  # shown as text, not dropped
    answer = streamed_text(slack.api) if streaming else sent
    assert "https://example.com" in answer and "a &lt; b &amp; c" in answer
