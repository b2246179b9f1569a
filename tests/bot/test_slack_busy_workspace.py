"""A busy workspace: Slack's per-workspace limit on `chat.appendStream` (Tier 4) is shared by every turn
answering there at once. Signed events into `datathread serve`, the scripted Messages API streaming its
replies, the real slack_sdk against the fake Slack Web API, whose limit is a token bucket every caller
shares (HTTP 429 and a Retry-After when it is empty), as Slack's is."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.slack_stream import render
from tests.bot.slack_harness import fresh_fakes, mention, served_once
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio(loop_scope="module")

NOTE = "Slack stopped taking this message"


slack = served_once("slack-busy")


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    fresh_fakes(slack_api, model)
    yield
    fresh_fakes(slack_api, model)


def streamed(api: FakeSlackAPI, channel: str) -> str:
    return "".join(
        c.args.get("markdown_text", "")
        for c in api.of("chat.appendStream")
        if c.args.get("channel") == channel and c.args.get("markdown_text")
    )


def posted_answers(api: FakeSlackAPI, needle: str) -> list[dict]:
    return [c.args for c in api.of("chat.postMessage") if needle in json.dumps(c.args)]


async def test_many_people_asking_at_once_each_get_their_answer_streamed_whole_and_once(slack, model):
    """Six people at once against a shared bucket of two appends a second: each turn appended twice
    a second, and the first 429 past the SDK's two retries ended its stream — half an answer, "Slack
    stopped taking this message", "Working on it…", then the whole answer again as a message (the
    trial: 4 at once, 2 of 4 threads; 20, 17 of 20). Now the streams share the limit and wait out a
    429, and every answer is streamed whole, once."""
    people = 6
    slack.api.buckets["chat.appendStream"] = (2.0, 4)
    model.token_delay_s = 0.03
    answers = [f"Answer {i}: " + " ".join(f"word{j}" for j in range(60)) + "." for i in range(people)]
    model.enqueue(*(text(a) for a in answers))
    channels = [f"C0B{i:02d}" for i in range(people)]
    await asyncio.gather(
        *(
            slack.event(mention(f"question {i}", ts=f"400.{i + 1}", channel=ch))
            for i, ch in enumerate(channels)
        )
    )
    await slack.drain()
    shown = {ch: streamed(slack.api, ch) for ch in channels}
    assert sorted(shown.values()) == sorted(render(a) for a in answers), shown  # each whole, once
    stops = slack.api.of("chat.stopStream")
    assert len(stops) == people and not [s for s in stops if NOTE in str(s.args.get("markdown_text"))]
    assert not posted_answers(slack.api, "word59")  # nothing posted again below a stream
    assert not posted_answers(slack.api, "Working on it")


async def test_an_append_slack_holds_back_past_the_sdks_retries_keeps_its_text_for_later(slack, model):
    """Three 429s in a row on a text append (another process, or another app's burst, emptied the
    workspace's limit): the SDK's two retries ran out and the stream was abandoned. Now the text is
    kept and appended once the Retry-After is over, whole, after what was already shown."""
    answer = " ".join(f"word{n}" for n in range(50)) + "."
    slack.api.rate_limited["chat.appendStream"] = {2, 3, 4}
    model.token_delay_s = 0.03
    model.enqueue(text(answer))
    await slack.event(mention("count to fifty", ts="401.1", channel="C0B50"))
    await slack.drain()
    assert streamed(slack.api, "C0B50") == render(answer)
    [stop] = slack.api.of("chat.stopStream")
    assert NOTE not in str(stop.args.get("markdown_text")) and stop.args.get("blocks")
    assert not posted_answers(slack.api, "word49") and not posted_answers(slack.api, "Working on it")


async def test_the_streams_end_slack_holds_back_is_tried_again_within_its_bound(slack, model):
    """chat.stopStream refused with 429 three times (Retry-After 1): after the SDK's two retries the
    stream's end was given up, and the answer's receipt and buttons came as a message of their own
    below it. The answer's calls now try again while the wait fits in their bound (10 s)."""
    slack.api.rate_limited["chat.stopStream"] = {1, 2, 3}
    model.enqueue(text("There are **16** airlines."))
    await slack.event(mention("how many airlines?", ts="402.1", channel="C0B51"))
    await slack.drain()
    [stop] = slack.api.of("chat.stopStream")
    assert stop.args.get("blocks")  # the footer closes the stream
    assert not [p for p in slack.api.of("chat.postMessage") if p.args.get("channel") == "C0B51"]
