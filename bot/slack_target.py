"""Where a turn answers in Slack, and where it answers when Slack refuses the bot's messages there.

A channel can refuse the bot (read-only and announcement channels, a channel that was archived or
the bot left): the answer then goes to the asker alone, as a slash command's does where the bot is
not a member; where even that is refused, nobody would see the answer, and the turn stops before
it pays for model calls (`core.events.NobodyListening`).

The bot can be removed (or the channel archived) while it answers, too: every later message into
the channel was refused, and the answer was lost after the model had run. The asker then gets a DM
at once saying so (`to_dm`), and the answer follows there; where the DM is refused too, the turn
stops at its next model call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from slack_sdk.errors import SlackApiError

from bot.slack_client import SlackCallFailed, cannot_post_here, failure_words

log = logging.getLogger("datathread.slack")


@dataclass(frozen=True)
class SlackTarget:
    """Where a turn answers: the channel and thread, and who asked (recipient of the stream)."""

    channel: str
    thread_ts: str
    team_id: str
    user_id: str
    private: bool = False
    # A slash command's response_url: answers the person even where the bot is not a member
    # (https://docs.slack.dev/interactivity/handling-user-interaction#message_responses).
    response_url: str = ""
    refused_here: str = ""  # why Slack refuses the bot's messages here, in words (the answer is private)
    unheard: str = ""  # why not even the asker can be told: the turn stops
    via_dm: bool = False  # the answer goes as a DM, whose first line (why) is already there


# Why the answer comes as a DM, when the channel stopped taking the bot's messages mid-turn.
LEFT_CHANNEL = {
    "not_in_channel": "I was removed from <#{channel}> before I could answer what you asked there",
    "is_archived": "<#{channel}> was archived before I could answer what you asked there",
    "channel_not_found": "I can no longer see <#{channel}>, so I couldn't answer what you asked there",
}
LEFT_OTHERWISE = "Slack stopped taking my messages in <#{channel}> ({why}) before I could answer you there"


async def to_dm(quick, target: SlackTarget, refused: SlackApiError) -> SlackTarget:
    """The target once the channel refused the bot mid-turn (`refused`): a slash command's
    response_url still answers the asker; otherwise a DM tells them why at once, and the answer
    follows in it. Where Slack refuses that DM too, nobody can be told (`unheard`): the turn stops."""
    why = failure_words(refused, for_people=True)
    private = replace(target, private=True, refused_here=why)
    if target.response_url:
        return private
    code = failure_words(refused)
    said = LEFT_CHANNEL.get(code, LEFT_OTHERWISE).format(channel=target.channel, why=why)
    log.info(
        "slack: %s refused my messages mid-turn (%s); answering %s by DM",
        target.channel,
        code,
        target.user_id,
    )
    try:
        await quick.chat_postMessage(channel=target.user_id, text=f"{said}, so the answer comes here.")
    except SlackCallFailed:
        pass  # the answer still goes, bounded by its own call
    except SlackApiError as exc:
        log.warning(
            "slack: %s in %s gets no answer: Slack refuses my messages there (%s) and my DM (%s); "
            "stopping the turn",
            target.user_id,
            target.channel,
            code,
            failure_words(exc),
        )
        return replace(private, unheard=f"{said}, and Slack refuses my messages to you too.")
    return replace(private, via_dm=True)


async def privately(quick, target: SlackTarget, refused: SlackApiError, working: str) -> SlackTarget:
    """The target once Slack refused the bot's messages here (`refused`): the asker alone, told so at
    once (`working`: the status line), or nobody (`unheard`) when that is refused too. `quick`: the
    progress client (its calls bounded); a Slack that does not answer leaves the answer private."""
    why = failure_words(refused, for_people=True)
    log.info("slack: cannot post in %s (%s); answering privately", target.channel, failure_words(refused))
    private = replace(target, private=True, refused_here=why)
    try:
        await quick.chat_postEphemeral(
            channel=target.channel,
            user=target.user_id,
            thread_ts=target.thread_ts or None,
            text=f"{working} I can't post here ({why}): I'll answer you privately.",
        )
    except SlackCallFailed:
        pass  # the answer still goes, bounded by its own call
    except SlackApiError as exc:
        if not cannot_post_here(exc):
            raise
        log.warning(
            "slack: %s in %s gets no answer: Slack refuses my messages there (%s, %s); stopping the turn",
            target.user_id,
            target.channel,
            failure_words(refused),
            failure_words(exc),
        )
        why_not = f"Slack refuses my messages in this channel, even to you ({failure_words(exc)})."
        return replace(private, unheard=why_not)
    return private
