"""Slack refuses an answer's blocks (`invalid_blocks`: a block its validator rejects; `msg_blocks_too_long`):
signed events into `datathread serve` on the fallback path (streaming refused, as on older plans and
GovSlack), the real slack_sdk against the fake Slack Web API answering as Slack does, with its pointer
to the bad block in `response_metadata.messages`."""

from __future__ import annotations

import json
import logging

import pytest

from tests.bot.slack_harness import fresh_fakes, mention, served_once
from tests.fakes.anthropic_api import text, tool

pytestmark = pytest.mark.asyncio(loop_scope="module")

ANSWER = (
    "**UA** flew the most & B6 next; see [the glossary](https://www.bts.gov/glossary).\n\n"
    "| carrier | n |\n|---|---:|\n| UA | 58665 |\n| B6 | 54635 |"
)
POINTER = "[ERROR] unsupported type: markdown [json-pointer:/blocks/0/type]"


slack = served_once("slack-blocks")


@pytest.fixture(autouse=True)
def fresh(slack_api, model):
    fresh_fakes(slack_api, model)
    yield
    fresh_fakes(slack_api, model)


@pytest.mark.parametrize("code", ["invalid_blocks", "msg_blocks_too_long"])
async def test_an_answer_whose_blocks_slack_refuses_comes_as_plain_text(slack, model, caplog, code):
    """The answer was lost ("Slack would not take this answer for you… Please ask again", which failed
    the same way every time) and the log dropped Slack's pointer to the bad block. Now the answer comes
    as plain mrkdwn text with its receipt, and the log line carries the pointer."""
    slack.api.refuse_streaming = True

    def refuse(method: str, args: dict) -> dict | None:
        if method == "chat.postMessage" and args.get("blocks"):
            return {"error": code, "response_metadata": {"messages": [POINTER]}}
        return None

    slack.api.refuse = refuse
    model.enqueue(tool("query_warehouse", {"sql": "SELECT 1 AS n"}), text(ANSWER))
    channel = f"C0X{len(code)}"
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        await slack.event(mention("which carrier?", ts=f"60{len(code)}.1", channel=channel))
        await slack.drain()
    posts = [c.args for c in slack.api.of("chat.postMessage") if c.args.get("channel") == channel]
    answer = [p for p in posts if "flew the most" in p.get("text", "") and not p.get("blocks")]
    assert len(answer) == 1, posts  # (the fake records the refused post too)
    words = answer[0]["text"]
    assert words.startswith(
        "*UA* flew the most &amp; B6 next; see <https://www.bts.gov/glossary|the glossary>."
    )
    assert "```\ncarrier      n\n-------  -----\nUA       58665\nB6       54635\n```" in words
    assert "model calls" in words  # the receipt, below it
    assert answer[0]["thread_ts"] == f"60{len(code)}.1" and answer[0]["unfurl_links"] is False
    assert not [p for p in slack.api.shown() if "Please ask again" in p]
    assert slack.api.of("chat.delete")  # the status message went: the answer is below
    said = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name == "datathread.slack"
    ]
    assert said == [
        f"slack: Slack refused the blocks of the answer for U0001 in {channel} ({code}: {POINTER}); "
        "sending it as plain text"
    ]
    assert not [p for p in posts if "Please ask again" in json.dumps(p)]
