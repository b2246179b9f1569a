"""Who sent a Teams activity, and from where, in the terms the core and its access rules use: the
tenant, the person (their Entra object id), the channel, the conversation a schedule posts to — shared
by the turn (bot/teams_jobs.py) and the card clicks (bot/teams_clicks.py)."""

from __future__ import annotations

from botbuilder.schema import Activity

from core.events import IncomingMessage


def tenant_of(activity: Activity) -> str:
    if activity.conversation and activity.conversation.tenant_id:
        return activity.conversation.tenant_id
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    return str((data.get("tenant") or {}).get("id", ""))


def is_channel(activity: Activity) -> bool:
    return bool(activity.conversation and activity.conversation.conversation_type == "channel")


def is_personal(activity: Activity) -> bool:
    return bool(activity.conversation and activity.conversation.conversation_type == "personal")


def base(activity: Activity) -> tuple[str, str]:
    return (tenant_of(activity), activity.conversation.id)


def user_id(activity: Activity) -> str:
    who = activity.from_property
    return (who.aad_object_id or who.id or "") if who else ""


def channel_id(activity: Activity) -> str:
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    channel = (data.get("channel") or {}).get("id")
    conversation = activity.conversation.id if activity.conversation else ""  # an invoke may carry none
    return channel or conversation.split(";", 1)[0]


def person(activity: Activity) -> IncomingMessage:
    """Who acted on a card, where, in the terms access rules are checked in (a card skipped them: a
    person outside the allowlists saw an answer's SQL, saved verified queries, exported the thread)."""
    return IncomingMessage(
        text="",
        surface="teams",
        thread_key=(activity.conversation.id if activity.conversation else "",),
        user_id=user_id(activity),
        channel_id=channel_id(activity),
        team_id=tenant_of(activity),
        is_direct=is_personal(activity),
    )


def locale_of(activity: Activity) -> str:
    """The asker's locale as their Teams client sends it ("de-DE"): the activity's `locale`, else its
    clientInfo entity's; "" without either (core/asked_when.py drops what is not a BCP 47 tag)."""
    if activity.locale:
        return str(activity.locale)
    for entity in activity.entities or []:
        if (entity.type or "").lower() == "clientinfo":
            return str((entity.additional_properties or {}).get("locale") or "")
    return ""


def mention_name(activity: Activity) -> str:
    """The bot's name as people @-mention it here (the app's manifest names it)."""
    return (activity.recipient.name if activity.recipient else "") or "datathread"


def home(activity: Activity) -> str:
    """The conversation without a thread's message id: where a schedule made here posts its runs."""
    return activity.conversation.id.partition(";messageid=")[0]


def rosters(activity: Activity) -> tuple[str, ...]:
    """Where the Bot Connector is asked who sent `activity` (bot/teams_members.py), in order. A channel
    message's conversation is its thread (`…;messageid=…`), which the members route does not know (404
    ThreadNotFound): its team (`channelData.team.id`), then the channel without the message id — a
    shared channel's members from outside the host team are in the channel's roster, not the team's. A
    chat is asked as itself."""
    if not activity.conversation:
        return ()
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    team = str((data.get("team") or {}).get("id") or "") if is_channel(activity) else ""
    return tuple(dict.fromkeys(c for c in (team, home(activity)) if c))
