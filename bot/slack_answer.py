"""Where a finished answer's messages go in Slack: into the thread (below the fallback's status
message, which then goes), or privately (through the slash command's response_url, as ephemeral
messages, or as a DM when Slack refuses both).
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import (
    Posted,
    SlackCallFailed,
    answer_via_response_url,
    cannot_post_here,
    failure_words,
    quick,
    slack_error,
)
from bot.slack_render import escape
from bot.slack_target import SlackTarget

# Links in an answer are the model's (and may come from the data: a URL in a table cell): Slack would
# fetch each to draw a preview under the answer, and a signed file link of the bot's own would be
# downloaded by Slack's crawler. chat.postMessage takes these; the streaming methods and chat.update
# take no such argument.
NO_UNFURL = {"unfurl_links": False, "unfurl_media": False}

log = logging.getLogger("datathread.slack")

# A private answer that came as a DM says first where it was asked (the DM is another conversation).
DM_HEADING = "The answer to what you asked in <#{channel}> (Slack would not let me show it to you there):"
STATUS_DONE = ":white_check_mark: Done: the answer is below."
UNDELIVERED = ":warning: Slack would not take this answer for you, so I couldn't show it. Please ask again."
# Where a part of it was sent and not answered in time, Slack may have shown it.
UNCONFIRMED = (
    ":warning: Slack did not confirm this answer, so it may not have arrived. If it is not here, please "
    "ask again."
)


async def post_answer(
    client: AsyncWebClient, target: SlackTarget, messages: list[dict], *, mode: str, status_ts: str | None
) -> None:
    """Post `messages` (render.answer_messages) for `target`. `mode` is the progress's ("ephemeral" for
    private answers: `post_private`); `status_ts` the status message the fallback edited, if any."""
    if mode == "ephemeral":
        return await post_private(client, target, messages)
    t = target
    try:
        for msg in messages:
            await client.chat_postMessage(channel=t.channel, thread_ts=t.thread_ts, **msg, **NO_UNFURL)
    except SlackClientError as exc:  # "Working on it…" would stay above nothing (or half), for good
        if status_ts:
            unsure = isinstance(exc, SlackCallFailed) and exc.unsure
            with contextlib.suppress(SlackClientError):
                note = UNCONFIRMED if unsure else UNDELIVERED
                await quick(client).chat_update(channel=t.channel, ts=status_ts, text=note)
        raise
    if status_ts:
        await _retire_status(client, t, status_ts)


async def post_private(client: AsyncWebClient, target: SlackTarget, messages: list[dict]) -> None:
    """A private answer to the asker alone, the first way Slack takes it: the slash command's
    response_url (its first message in place of "Working on it…"), else an ephemeral message in the
    channel, else where the bot may not post there either, a DM from the bot (the app's Messages tab:
    `chat:write` with the user's id as the channel). Each refusal hands the rest of the answer to the
    next way. A failed response_url was only a log line: `/ask private` left "Working on it…" for good,
    and `/ask` in a read-only channel showed nothing at all, where an ephemeral message got through.

    A response_url that did not answer in time counts as failed (the answer may then show twice:
    better than never); an ephemeral message or a DM that timed out is not tried another way (Slack
    may have shown it). Where nothing reached the person, "Working on it…" is replaced by a short note
    if the response_url takes that, and the failure is raised on for the turn's log line
    (`SlackProgress.lost`); where a part timed out (Slack may have shown it), the note says the answer
    may not have arrived, below what may be showing rather than in its place.

    A DM carries the answer's receipt but not its buttons (Show SQL, 👍/👎): a click there comes from
    the DM, where the turn, recorded for the channel it was asked in, is not found."""
    t = target
    way, replaced, unsure = ("response_url" if t.response_url else "ephemeral"), False, False
    try:
        for n, msg in enumerate(messages):
            if way == "response_url":
                posted = await _via_response_url(client, t, msg, replace=n == 0)
                if posted:
                    replaced = replaced or n == 0
                    continue
                unsure = unsure or posted is Posted.UNSURE
                log.info(
                    "the private answer for %s in %s: sending it as an ephemeral message",
                    t.user_id,
                    t.channel,
                )
                way = "ephemeral"
            if way == "ephemeral":
                try:
                    await client.chat_postEphemeral(
                        channel=t.channel, user=t.user_id, thread_ts=t.thread_ts or None, **msg
                    )
                    continue
                except SlackApiError as exc:
                    if not cannot_post_here(exc):
                        raise
                    log.info(
                        "the private answer for %s in %s: ephemeral refused (%s); sending it as a DM",
                        t.user_id,
                        t.channel,
                        slack_error(exc),
                    )
                    way = "dm"
                    await client.chat_postMessage(
                        channel=t.user_id, text=DM_HEADING.format(channel=t.channel)
                    )
            await client.chat_postMessage(channel=t.user_id, **without_buttons(msg), **NO_UNFURL)
    except SlackClientError as exc:
        unsure = unsure or (isinstance(exc, SlackCallFailed) and exc.unsure)
        if t.response_url and not replaced:  # "Working on it…" would stay above nothing, for good
            note = UNCONFIRMED if unsure else UNDELIVERED
            await _via_response_url(client, t, {"text": note}, replace=not unsure)
        raise


def without_buttons(msg: dict) -> dict:
    """`msg` without its action blocks (a DM's: see `post_private`); its text and receipt stay."""
    blocks = [b for b in msg.get("blocks") or [] if b.get("type") != "actions"]
    return {k: v for k, v in msg.items() if k != "blocks"} | ({"blocks": blocks} if blocks else {})


async def _via_response_url(client: AsyncWebClient, t: SlackTarget, msg: dict, *, replace: bool) -> Posted:
    return await answer_via_response_url(
        client,
        t.response_url,
        what=f"The private answer for {t.user_id} in {t.channel}",
        response_type="ephemeral",
        replace_original=replace,
        text=msg.get("text", ""),
        blocks=msg.get("blocks"),
    )


async def _retire_status(client: AsyncWebClient, t: SlackTarget, status_ts: str) -> None:
    """The status message goes once the answer is below it. The answer used to replace it through
    chat.update, and an edit notifies nobody (Slack sends it as a hidden `message_changed`:
    https://docs.slack.dev/reference/events/message/message_changed): on the fallback path (free
    workspaces, GovSlack) a phone showed "Working on it…" and never the answer. A status Slack will not
    delete says it is done rather than "Working on it…" for good. Best effort, under the short bound."""
    try:
        await quick(client).chat_delete(channel=t.channel, ts=status_ts)
        return
    except SlackClientError as exc:
        log.info("status message not deleted (%s); marking it done", failure_words(exc))
    with contextlib.suppress(SlackClientError):
        await quick(client).chat_update(channel=t.channel, ts=status_ts, text=STATUS_DONE)


def footer_only(footer: list[dict], receipt: str) -> list[dict]:
    """The answer's receipt and buttons as a message of their own (the answer is already above, in
    the stream), with the receipt as its notification text: no empty answer block, no blank one."""
    return [{"text": escape(receipt or "The answer above: its details"), "blocks": footer}]
