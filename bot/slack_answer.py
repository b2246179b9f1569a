"""Where a finished answer's messages go in Slack: in place of the fallback's status message, below
it, or privately (through the slash command's response_url, or as ephemeral messages).
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import answer_via_response_url, quick, slack_error
from bot.slack_render import escape
from bot.slack_target import SlackTarget

# Links in an answer are the model's (and may come from the data: a URL in a table cell): Slack would
# fetch each to draw a preview under the answer, and a signed file link of the bot's own would be
# downloaded by Slack's crawler. chat.postMessage takes these; the streaming methods and chat.update
# take no such argument.
NO_UNFURL = {"unfurl_links": False, "unfurl_media": False}

log = logging.getLogger("datathread.slack")


async def post_answer(
    client: AsyncWebClient, target: SlackTarget, messages: list[dict], *, mode: str, status_ts: str | None
) -> None:
    """Post `messages` (render.answer_messages) for `target`. `mode` is the progress's ("ephemeral" for
    private answers); `status_ts` the status message the fallback edited, if any. A private answer
    through a response_url replaces the slash command's "Working on it…" with its first message (it
    stayed above the answer for good)."""
    t = target
    for n, msg in enumerate(messages):
        if mode == "ephemeral" and t.response_url:
            await answer_via_response_url(
                client,
                t.response_url,
                what=f"The private answer for {t.user_id} in {t.channel}",
                response_type="ephemeral",
                replace_original=n == 0,
                text=msg.get("text", ""),
                blocks=msg.get("blocks"),
            )
        elif mode == "ephemeral":
            await client.chat_postEphemeral(
                channel=t.channel, user=t.user_id, thread_ts=t.thread_ts or None, **msg
            )
        elif n == 0 and status_ts:
            await _replace_status(client, t, status_ts, msg)
        else:
            await client.chat_postMessage(channel=t.channel, thread_ts=t.thread_ts, **msg, **NO_UNFURL)


async def _replace_status(client: AsyncWebClient, t: SlackTarget, status_ts: str, msg: dict) -> None:
    """The answer in place of the status message; refused (a 429 on chat.update, which every status
    edit of the turn shares), as a new message instead, and the status goes if it can: the answer was
    lost and "Working on it…" stayed for good."""
    try:
        await client.chat_update(channel=t.channel, ts=status_ts, **msg)
        return
    except SlackApiError as exc:
        log.info("answer edit refused (%s); posting it as a message", slack_error(exc))
    await client.chat_postMessage(channel=t.channel, thread_ts=t.thread_ts, **msg, **NO_UNFURL)
    with contextlib.suppress(SlackClientError):
        await quick(client).chat_delete(channel=t.channel, ts=status_ts)


def footer_only(footer: list[dict], receipt: str) -> list[dict]:
    """The answer's receipt and buttons as a message of their own (the answer is already above, in
    the stream), with the receipt as its notification text: no empty answer block, no blank one."""
    return [{"text": escape(receipt or "The answer above: its details"), "blocks": footer}]
