"""Where a finished answer's messages go in Slack: into the thread (below the fallback's status
message, which then goes), or privately (through the slash command's response_url, as ephemeral
messages, or as a DM when Slack refuses both).

A message whose blocks Slack refuses (`invalid_blocks`, `msg_blocks_too_long`) goes again as plain
mrkdwn text (`as_text`), its buttons left out: the answer was lost with "Please ask again", which
failed the same way every time, and the log dropped Slack's pointer to the bad block.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.markdown import pack
from bot.slack_client import (
    Posted,
    SlackCallFailed,
    answer_via_response_url,
    cannot_post_here,
    failure_words,
    quick,
    slack_error,
)
from bot.slack_render import SECTION_LIMIT, Unit, escape, split_units, to_mrkdwn, to_units, unit_mrkdwn
from bot.slack_target import SlackTarget

# Links in an answer are the model's (and may come from the data: a URL in a table cell): Slack would
# fetch each to draw a preview under the answer, and a signed file link of the bot's own would be
# downloaded by Slack's crawler. chat.postMessage takes these; the streaming methods and chat.update
# take no such argument.
NO_UNFURL = {"unfurl_links": False, "unfurl_media": False}

log = logging.getLogger("datathread.slack")

# Slack refused the message for its blocks (https://docs.slack.dev/reference/methods/chat.postMessage#errors):
# the same words as plain text are taken.
BLOCKS_REFUSED = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"})
TEXT_LIMIT = SECTION_LIMIT  # per plain-text message: Slack advises 4,000 at most

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
    post = partial(client.chat_postMessage, channel=t.channel, thread_ts=t.thread_ts, **NO_UNFURL)
    try:
        for msg in messages:
            await send(post, msg, f"the answer for {t.user_id} in {t.channel}")
    except SlackClientError as exc:  # "Working on it…" would stay above nothing (or half), for good
        if status_ts and not cannot_post_here(exc):  # (that one: the answer goes another way)
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
    way = "dm" if t.via_dm else "response_url" if t.response_url else "ephemeral"
    replaced, unsure = False, False
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
                    ephemeral = partial(
                        client.chat_postEphemeral,
                        channel=t.channel,
                        user=t.user_id,
                        thread_ts=t.thread_ts or None,
                    )
                    await send(ephemeral, msg, f"the private answer for {t.user_id} in {t.channel}")
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
            dm = partial(client.chat_postMessage, channel=t.user_id, **NO_UNFURL)
            await send(dm, without_buttons(msg), f"the private answer for {t.user_id} (a DM)")
    except SlackClientError as exc:
        unsure = unsure or (isinstance(exc, SlackCallFailed) and exc.unsure)
        if t.response_url and not replaced:  # "Working on it…" would stay above nothing, for good
            note = UNCONFIRMED if unsure else UNDELIVERED
            await _via_response_url(client, t, {"text": note}, replace=not unsure)
        raise


async def send(post: Callable[..., Awaitable], msg: dict, what: str) -> None:
    """`post(**msg)`; where Slack refuses its blocks, its words again as plain text (`as_text`), with
    one log line saying which block Slack found wrong (its `response_metadata.messages`)."""
    try:
        await post(**msg)
    except SlackApiError as exc:
        if slack_error(exc) not in BLOCKS_REFUSED or not msg.get("blocks"):
            raise
        data = exc.response.data if isinstance(exc.response.data, dict) else {}
        said = "; ".join(str(m) for m in (data.get("response_metadata") or {}).get("messages") or [])
        log.warning(
            "slack: Slack refused the blocks of %s (%s%s); sending it as plain text",
            what,
            slack_error(exc),
            f": {said[:300]}" if said else "",
        )
        for part in as_text(msg):
            await post(**part)


def as_text(msg: dict) -> list[dict]:
    """`msg` (render.answer_messages) without blocks: its Markdown as mrkdwn text and its receipt
    line below, in messages of at most TEXT_LIMIT characters. The buttons cannot come as text."""
    parts: list[str] = []
    for block in msg.get("blocks") or []:
        if block.get("type") == "markdown":
            parts += split_units(to_units(block["text"]), _unit_text, TEXT_LIMIT)
        elif block.get("type") in ("section", "context"):
            texts = [block.get("text") or {}, *(block.get("elements") or [])]
            parts += [t["text"] for t in texts if isinstance(t, dict) and t.get("text")]
    return [{"text": text} for text in pack(parts, TEXT_LIMIT) or [msg.get("text") or " "]]


def _unit_text(unit: Unit) -> str:
    """A unit of an answer's rendered Markdown as mrkdwn: its text was escaped as `escape` does
    (undone here, `to_mrkdwn` escapes it again); code was not."""
    if unit.kind != "text":
        return unit_mrkdwn(unit)
    plain = unit.text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return to_mrkdwn(plain)


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
