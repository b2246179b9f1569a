"""Who acted on an answer in Slack (a button, a menu), and whether they may.

A question meets the access rules in the core (`Analyst.handle`); what is done with an answer afterwards
went around them: a person outside the allowlists could see an answer's SQL, save a verified query that
later answers start from, export the thread or schedule it. Every such job asks here first.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import answer_via_response_url, cannot_post_here
from core.events import IncomingMessage
from core.thread import Threads


def clicker(p: dict) -> IncomingMessage:
    """A button job's payload (`slack_app.action_payload`) in the terms access rules are checked in."""
    channel = p.get("channel", "")
    return IncomingMessage(
        text="",
        surface="slack",
        thread_key=(p.get("team", ""), channel, p.get("thread_ts", "")),
        user_id=p.get("user", ""),
        channel_id=channel,
        team_id=p.get("team", ""),
        is_direct=channel.startswith(
            "D"
        ),  # a DM (https://docs.slack.dev/reference/objects/conversation-object)
    )


async def refused_click(threads: Threads, client: AsyncWebClient, p: dict) -> bool:
    """True (and the person told, privately, as a refused question is) when they may not act here."""
    denial = threads.refused(clicker(p))
    if denial is None:
        return False
    await tell_clicker(client, p, {"text": f":warning: {render.escape(denial)}"})
    return True


async def tell_clicker(client: AsyncWebClient, p: dict, msg: dict) -> None:
    """`msg` to the person who clicked alone, in the thread of what they clicked. chat.postEphemeral
    needs the bot in the channel, but a private `/ask` answer carries buttons where it is not: a click
    there was refused (`not_in_channel`), a traceback in the log and nothing for the person. The
    click's own response_url reaches them wherever they clicked (as a slash command's does)."""
    try:
        await client.chat_postEphemeral(
            channel=p["channel"], user=p["user"], thread_ts=p.get("thread_ts") or None, **msg
        )
    except SlackApiError as exc:
        if not (cannot_post_here(exc) and p.get("response_url")):
            raise
        await answer_via_response_url(
            client,
            p["response_url"],
            what=f"The reply to {p['user']}'s click in {p['channel']}",
            response_type="ephemeral",
            replace_original=False,
            text=msg.get("text", ""),
            blocks=msg.get("blocks"),
        )
