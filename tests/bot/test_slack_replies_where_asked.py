"""Replies reach the person where they asked or clicked: a click on a private answer in a channel the
bot is not in, a refusal said in the channel's own words, `reset` in the DM's thread (files shared with
a question: tests/bot/test_slack_files_in_turns.py). Signed requests into `datathread serve`, the fake
Slack Web API, the scripted model."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import pytest_asyncio

from bot import slack_blocks
from tests.bot.slack_harness import demo_home, message, module_settings, serve
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import TEAM_ID

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    """One `datathread serve` for the module: building the core (sandbox fork server) is the slow part."""
    home = demo_home(tmp_path_factory)
    async with serve(module_settings(home, model.url), slack_api) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    """Each test starts with an empty call log, Slack taking everything and an empty model script."""
    slack_api.clear()
    slack_api.fail_methods.clear()
    slack_api.refused_in.clear()
    slack_api.http_errors.clear()
    slack_api.rate_limited.clear()
    with model.lock:
        model.replies.clear()
    yield


def responses(api) -> list[dict]:
    """What went through response_urls (a slash command's or a click's), in order."""
    return [c.args for c in api.calls if c.method.startswith("/response/")]


async def test_buttons_on_a_private_answer_where_the_bot_is_no_member_answer_the_clicker(
    slack, model, caplog
):
    """chat.postEphemeral needs the bot in the channel: a click on a `/ask private` answer there was
    refused (`not_in_channel`), a traceback in the log, and the person saw nothing at all."""
    api = slack.api
    api.fail_methods.update({"chat.postMessage": "not_in_channel", "chat.postEphemeral": "not_in_channel"})
    model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights", "save_as": "n"}),
        text("336,776 flights."),
    )
    await slack.command("private how many flights?", channel="C0042")
    await slack.drain()
    buttons = [e for b in responses(api)[-1]["blocks"] if b["type"] == "actions" for e in b["elements"]]
    turn = next(e["value"] for e in buttons if e["action_id"] == slack_blocks.ACTION_SHOW_SQL)

    caplog.set_level(logging.WARNING)
    api.clear()
    await slack.click(slack_blocks.ACTION_SHOW_SQL, turn, channel="C0042", user="U0001")
    await slack.drain()
    [shown] = responses(api)
    assert shown["response_type"] == "ephemeral" and shown["replace_original"] is False
    assert "SELECT count(*) AS n FROM flights" in json.dumps(shown)

    api.clear()
    await slack.click(slack_blocks.ACTION_FEEDBACK_UP, turn, channel="C0042", user="U0001")
    await slack.drain()
    [thanks] = responses(api)
    assert thanks["response_type"] == "ephemeral" and thanks["text"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_ask_where_slack_refuses_the_question_says_slacks_reason(slack, model):
    """`/ask` in a read-only channel the bot is a member of: its answer came privately with "I'm not a
    member of this channel… Invite me with /invite @datathread", which was not why, and no invitation
    helps."""
    api = slack.api
    for refusal, said in (
        ("restricted_action_read_only_channel", "I can't post in this channel (this channel is read-only)"),
        ("not_in_channel", "I'm not a member of this channel"),
    ):
        api.clear()
        api.fail_methods["chat.postMessage"] = refusal
        model.enqueue(text("336,776 flights."))
        await slack.command("how many flights?", channel="C0READ")
        await slack.drain()
        answer = json.dumps(responses(api)[-1])
        assert "336,776 flights." in answer and said in answer
        assert ("/invite" in answer) is (refusal == "not_in_channel")


async def test_reset_in_the_dms_thread_is_answered_in_that_thread(slack, model):
    """`reset` typed in the thread under an answer in the DM (the assistant view) was answered at the
    DM's top level, away from where the person typed; typed top-level, it stays top-level."""
    api = slack.api
    model.enqueue(text("1,458 airports."))
    await slack.event(message("how many airports?", ts="730.1", channel="D0002", channel_type="im"))
    await slack.drain()
    for event, thread in (
        (message("reset", ts="730.2", thread_ts="730.1", channel="D0002", channel_type="im"), "730.1"),
        (message("reset", ts="730.3", channel="D0002", channel_type="im"), None),
    ):
        api.clear()
        await slack.event(event)
        await slack.drain()
        [fresh] = api.of("chat.postMessage")
        assert "fresh conversation" in fresh.args["text"] and fresh.args.get("thread_ts") == thread


async def ask(slack, question: str, *, channel: str, response: str) -> None:
    """`/ask question` in `channel`, its response_url at `/response/RESPONSE` on the fake."""
    url = slack.api.url.removesuffix("api/") + f"response/{response}"
    fields = {"command": "/ask", "text": question, "team_id": TEAM_ID, "channel_id": channel}
    await slack.form(fields | {"user_id": "U0001", "response_url": url, "trigger_id": "t.1"})
    await slack.drain()


@pytest.mark.parametrize(
    ("question", "refusal"),
    [("private how many airlines?", None), ("how many airlines?", "restricted_action_read_only_channel")],
    ids=["ask-private", "ask-in-a-read-only-channel"],
)
async def test_a_private_answer_whose_response_url_fails_comes_as_an_ephemeral_message(
    slack, model, question, refusal
):
    """The response_url's failure was a log line only: `/ask private` left "Working on it…" for good,
    `/ask` in a read-only channel showed nothing at all, where an ephemeral message got through."""
    api = slack.api
    if refusal:
        api.fail_methods.update({"chat.postMessage": refusal, "chat.startStream": refusal})
    api.http_errors[f"/response/eph-{refusal}"] = 500
    model.enqueue(text("There are 16 airlines."))
    await ask(slack, question, channel="C0001", response=f"eph-{refusal}")
    [answer] = [c.args for c in api.of("chat.postEphemeral") if "16 airlines" in json.dumps(c.args)]
    assert (answer["channel"], answer["user"]) == ("C0001", "U0001")
    assert ("read-only" in json.dumps(answer)) is bool(refusal)  # why it is private, as before


async def test_where_the_bot_may_not_post_a_failed_response_url_answers_in_a_dm(slack, model):
    api = slack.api
    api.refused_in["C0042"] = "not_in_channel"  # nor an ephemeral message there; its DM with the person is
    api.http_errors["/response/dm"] = 500
    model.enqueue(text("There are 16 airlines."))
    await ask(slack, "private how many airlines?", channel="C0042", response="dm")
    heading, answer = [c.args for c in api.of("chat.postMessage") if c.args["channel"] == "U0001"]
    assert heading["text"].startswith("The answer to what you asked in <#C0042>")
    assert "16 airlines" in json.dumps(answer)


async def test_a_private_answer_in_a_dm_keeps_its_receipt_and_has_no_buttons(slack, model):
    """The DM carried the answer's Show SQL and 👍/👎 buttons, but a click comes from the DM, where the
    turn (recorded for the channel it was asked in) is not found: every click said "I no longer have
    the details of that answer"."""
    api = slack.api
    api.refused_in["C0042"] = "not_in_channel"
    api.http_errors["/response/dm-buttons"] = 500
    model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM airlines", "save_as": "n"}),
        text("There are 16 airlines."),
    )
    await ask(slack, "private how many airlines?", channel="C0042", response="dm-buttons")
    dm = [c.args for c in api.of("chat.postMessage") if c.args["channel"] == "U0001"]
    blocks = [b for msg in dm for b in msg.get("blocks") or []]
    assert "16 airlines" in json.dumps(dm)
    assert [b for b in blocks if b["type"] == "context"]  # the receipt stays
    assert not [b for b in blocks if b["type"] == "actions"], blocks


@pytest.mark.parametrize("late", ["ephemeral", "response_url"])
async def test_an_answer_slack_did_not_confirm_gets_a_note_that_says_it_may_have_arrived(
    api, model, tmp_path, monkeypatch, late
):
    """An ephemeral message or a response_url that timed out may have been shown; the note said
    "Slack would not take this answer for you, so I couldn't show it" all the same, in place of
    what may have been the answer. Now it says the answer may not have arrived, below it."""
    from bot import slack_client
    from bot.slack_answer import post_private
    from bot.slack_target import SlackTarget

    monkeypatch.setattr(slack_client, "SEND_TIMEOUT_S", 0.5)
    monkeypatch.setattr(slack_client, "RESPONSE_URL_TIMEOUT_S", 0.5)
    settings = module_settings(tmp_path, model.url, slack_bot_token="xoxb-test-token", slack_api_url=api.url)
    client = slack_client.build_client(settings)
    path = f"/response/{late}"
    if late == "ephemeral":  # the response_url refuses, the ephemeral message goes unanswered
        api.http_errors[path] = 500
        api.silent.add("chat.postEphemeral")
    else:  # the response_url goes unanswered, nothing else takes the answer
        api.latency_s[path] = 0.8
        api.refused_in.update({"C0042": "not_in_channel", "U0001": "channel_not_found"})
    target = SlackTarget(
        "C0042", "", TEAM_ID, "U0001", private=True, response_url=api.url.removesuffix("api/") + path[1:]
    )
    with pytest.raises(slack_client.SlackClientError):
        await post_private(client, target, [{"text": "There are 16 airlines."}])
    for _ in range(50):  # a late response_url records the note when its latency is over
        if len(responses(api)) == 2:
            break
        await asyncio.sleep(0.05)
    answer, note = responses(api)
    assert "16 airlines" in answer["text"]
    assert "may not have arrived" in note["text"] and note["replace_original"] is False


async def test_an_answer_slack_takes_nowhere_leaves_a_note_not_working_on_it(slack, model, caplog):
    api = slack.api
    api.refused_in.update({"C0042": "not_in_channel", "U0001": "channel_not_found"})
    api.rate_limited["/response/none"] = {1}  # refuses the answer, takes the note
    model.enqueue(text("There are 16 airlines."))
    caplog.set_level(logging.WARNING)
    await ask(slack, "private how many airlines?", channel="C0042", response="none")
    [note] = responses(api)
    assert note["replace_original"] is True and note["text"].endswith("Please ask again.")
    assert "did not reach Slack: channel_not_found" in caplog.text
    assert not [r for r in caplog.records if r.exc_info]
