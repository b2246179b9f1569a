"""What a person gets from an answer in Slack beyond the words on screen: the notification their phone
shows (a new message's `text`; an edit notifies nobody), "data as of" in their own time zone, and words
for what a screen reader would otherwise read as emoji. Signed events into `datathread serve`, the real
slack_sdk against the fake Slack Web API, the scripted model, real DuckDB and sandbox."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import pytest
import pytest_asyncio

from bot import slack_blocks
from bot.slack_answer import UNDELIVERED
from tests.bot.slack_harness import demo_home, mention, module_settings, serve
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio(loop_scope="module")

DELAYS = "SELECT carrier, avg(dep_delay) AS avg_delay FROM flights GROUP BY carrier ORDER BY 2 DESC"
# A step that runs long enough for the status message to show it running (edits: at most one a second).
CHART = """
import time, pandas as pd, matplotlib.pyplot as plt
time.sleep(1.5)
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.savefig('delays.png')
"""
LEAD = "F9 had the highest average departure delay, 20.2 min."
# Opens with a table (its preview was the notification) and is long enough for three messages.
LONG_ANSWER = "\n\n".join(
    [
        "| carrier | avg_delay |\n|---|---:|\n| F9 | 20.22 |\n| EV | 19.96 |",
        "**F9** had the highest average departure delay, **20.2 min**. The chart is attached.",
        *(f"Detail {n}. " + "more words " * 250 for n in range(12)),
    ]
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    home = demo_home(tmp_path_factory)
    async with serve(module_settings(home, model.url, model_retries=2), slack_api) as harness:
        harness.warehouse_file = home / "warehouse" / "nycflights13.duckdb"
        yield harness


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    slack_api.clear()
    slack_api.refuse_streaming = False
    with model.lock:
        model.replies.clear()
    yield
    slack_api.refuse_streaming = False


def answer_posts(api: FakeSlackAPI) -> list[int]:
    """Indexes in `api.calls` of the messages carrying the answer's words (a markdown block)."""
    return [
        n
        for n, c in enumerate(api.calls)
        if c.method == "chat.postMessage" and any(b["type"] == "markdown" for b in c.args.get("blocks") or [])
    ]


async def test_on_the_fallback_path_the_answer_is_a_new_message_that_notifies_its_lead_sentence(slack, model):
    """Streaming refused (free workspaces, GovSlack): the answer replaced "Working on it…" through
    chat.update, an edit that notifies nobody, so a phone showed "Working on it…" and never the answer;
    its `text` was the rendered part's words (a table's monospace preview), and a long answer was part
    1 in the status message's place, then the chart, then the other parts. Now every part is a new
    message below the files, the first notifying the lead sentence and the others "(continued)", and the
    status message goes."""
    model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool("attach_file", {"path": "delays.png", "title": "Delays"}),
        text(LONG_ANSWER),
    )
    slack.api.refuse_streaming = True
    await slack.event(mention("which carriers were most delayed? chart it", ts="700.1", channel="C0700"))
    await slack.drain()
    api, calls = slack.api, slack.api.calls
    status = api.posted["C0700"][0]
    assert "Working on it" in status["text"]
    # the answer's words are in no edit (edits don't notify), every part is a new message in the thread
    assert not [c for c in api.of("chat.update") if "highest average" in json.dumps(c.args)]
    parts = answer_posts(api)
    assert len(parts) >= 3 and all(calls[n].args["thread_ts"] == "700.1" for n in parts)
    first, *rest = (calls[n].args for n in parts)
    assert first["text"] == LEAD, first["text"]  # the lead sentence, plain: no table, no fence, no **
    assert "highest average" in first["blocks"][0]["text"]
    assert all(r["text"].startswith("(continued) Detail ") for r in rest), [r["text"] for r in rest]
    # the chart came before the answer, never between its parts; then the status message went
    [upload] = [n for n, c in enumerate(calls) if c.method == "files.completeUploadExternal"]
    assert upload < parts[0] and parts == list(range(parts[0], parts[0] + len(parts)))
    [deleted] = [n for n, c in enumerate(calls) if c.method == "chat.delete"]
    assert deleted > parts[-1] and calls[deleted].args["ts"] == status["ts"]
    # while the step ran, the status message said so in words, not by the hourglass alone
    edits = [c.args["text"] for c in api.of("chat.update")]
    assert any(":hourglass_flowing_sand: Running Python — running…" in e for e in edits), edits


@pytest.mark.parametrize(
    ("age_s", "shown", "words"),
    [
        (3600, "\u200b{date_short_pretty} {time}", "%-d %b %Y %H:%M UTC"),
        (10 * 86400, "{date_short}", "%-d %b %Y"),
    ],
    ids=["today", "last-week"],
)
async def test_data_as_of_is_a_date_each_reader_sees_in_their_own_zone(slack, model, age_s, shown, words):
    """The receipt said "data as of 7 Dec 2026 17:48 UTC" to everyone, and all of it went through
    escape(). Now the time is Slack's date token (each reader's zone and clock), the UTC words its
    fallback, and only that token is left unescaped."""
    moment = int(time.time()) - age_s
    os.utime(slack.warehouse_file, (moment, moment))
    model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("**F9** was the most delayed."))
    await slack.event(mention("most delayed carrier?", ts=f"71{age_s % 7}.1", channel="C0710"))
    await slack.drain()
    context, actions = slack.api.of("chat.stopStream")[0].args["blocks"]
    receipt = context["elements"][0]["text"]
    fallback = datetime.fromtimestamp(moment, UTC).strftime(words)
    token = f"<!date^{moment}^{shown}|{fallback}>"
    assert receipt.startswith(f"flights · 16 rows · data as of {token} · "), receipt
    assert receipt.count("<") == 1 and receipt.count(">") == 1  # nothing else in it is a control sequence


async def test_the_thumbs_have_words_for_screen_readers(slack, model):
    """👍/👎 were the buttons' whole label: a screen reader said "thumbs up sign"."""
    model.enqueue(text("There are 16 airlines."))
    await slack.event(mention("how many airlines?", ts="720.1", channel="C0720"))
    await slack.drain()
    _, actions = slack.api.of("chat.stopStream")[0].args["blocks"]
    labels = {e["action_id"]: e.get("accessibility_label") for e in actions["elements"]}
    assert labels[slack_blocks.ACTION_FEEDBACK_UP] == "Mark this answer helpful"
    assert labels[slack_blocks.ACTION_FEEDBACK_DOWN] == "Mark this answer not helpful"


async def test_a_status_message_slack_will_not_delete_says_it_is_done(slack, model):
    """The answer is below; a status Slack refuses to delete does not say "Working on it…" for good."""
    slack.api.refuse_streaming = True
    slack.api.fail_methods["chat.delete"] = "cant_delete_message"
    try:
        model.enqueue(text("There are **16** airlines."))
        await slack.event(mention("how many airlines?", ts="730.1", channel="C0730"))
        await slack.drain()
    finally:
        slack.api.fail_methods.pop("chat.delete", None)
    [part] = answer_posts(slack.api)
    assert slack.api.calls[part].args["text"] == "There are 16 airlines."
    last = slack.api.of("chat.update")[-1]
    assert last.args["ts"] == slack.api.posted["C0730"][0]["ts"] and last.at > slack.api.calls[part].at
    assert last.args["text"] == ":white_check_mark: Done: the answer is below."


async def test_an_answer_slack_refuses_leaves_a_status_that_says_so(slack, model):
    """On the fallback path the answer comes below the status, which then goes: an answer Slack refused
    left "Working on it…" above nothing, for good, and the person waiting."""
    slack.api.refuse_streaming = True

    def answer_refused(method: str, args: dict) -> str | None:
        blocks = args.get("blocks") or []
        answer = method == "chat.postMessage" and any(b.get("type") == "markdown" for b in blocks)
        return "msg_too_long" if answer else None

    slack.api.refuse = answer_refused
    try:
        model.enqueue(text("There are **16** airlines."))
        await slack.event(mention("how many airlines?", ts="731.1", channel="C0731"))
        await slack.drain()
    finally:
        slack.api.refuse = None
    status = slack.api.posted["C0731"][0]
    last = slack.api.of("chat.update")[-1]
    assert last.args["ts"] == status["ts"]
    assert last.args["text"] == UNDELIVERED
    assert not slack.api.of("chat.delete")  # the status stays, saying what became of the answer
