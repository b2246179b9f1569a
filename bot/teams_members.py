"""Who a Teams sender is to the organization whose data the bot answers from: one of its people, a
guest of its tenant (Microsoft Entra B2B), a person of another organization (a shared channel's member
from another tenant: Teams Connect), or an anonymous meeting participant — what
DATATHREAD_ALLOW_EXTERNAL_USERS and DATATHREAD_ALLOW_GUESTS decide on, as bot/slack_access.py does in
Slack.

Why a lookup: an activity names the conversation's tenant (`channelData.tenant.id`,
`conversation.tenantId`), never the sender's own, and says nothing of a guest. Guests and shared-channel
members ask inside the host tenant's conversations, so the tenant check alone answered them from the
organization's warehouse like colleagues. Teams says who someone is when asked: the Bot Connector's
GET /v3/conversations/{id}/members/{member} — what botbuilder's `TeamsInfo.get_member` calls, and how
it reads the answer — gives a TeamsChannelAccount with the person's own `tenantId` and `userRole`
("user", "guest", "anonymous").

The answer is kept a day by the core (`Threads.person`, Slack's `users.info` answers' store), per tenant
and person. A lookup that fails — refused, not found, or silent past the connector's timeout
(bot/teams_connector.py) — is not kept: one log line says why, and the person is refused as
unconfirmed wherever the settings refuse people Teams cannot place (fail closed). Nobody is looked up
when the answer could change nothing (both settings allow, the person is named in
DATATHREAD_ALLOWED_USERS or an admin, or the allowlists refuse them anyway): a lookup costs a round trip
before a first question.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from botbuilder.schema import Activity
from botbuilder.schema.teams import TeamsChannelAccount

from bot import teams_connector as bf
from bot.teams_login import sign_in
from bot.teams_out import TeamsOut
from bot.teams_who import person
from core.access import EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED
from core.config_types import split_list
from core.events import IncomingMessage
from core.thread import Threads

log = logging.getLogger("datathread.teams")

STANDINGS = ("", GUEST, EXTERNAL, UNCONFIRMED, MAYBE_GUEST)  # every `IncomingMessage.outsider`


@dataclass(frozen=True)
class Standing:
    """`IncomingMessage.outsider` for someone, and the Bot Connector's refusal when the lookup failed
    (`failure`: a schedule's run tells "the bot was removed" from "Teams did not say")."""

    outsider: str = ""
    failure: bf.ConnectorFailed | None = None


def worth_asking(threads: Threads, who: IncomingMessage) -> bool:
    """Whether what Teams says of `who` could change whether they are answered: the access rules in
    force, asked of every standing they could have. Not when both settings allow everyone, when they
    are named in DATATHREAD_ALLOWED_USERS or are an admin, or when the allowlists refuse them anyway."""
    return len({threads.refused(replace(who, outsider=o)) is None for o in STANDINGS}) > 1


def standing(said: dict | None, *, home: frozenset[str], allow_external: bool, entra: bool) -> str:
    """`IncomingMessage.outsider` from what the members route said (`member_of`; None: it could not
    say), the tenants that are the organization's (`home`: the conversation's and those listed in
    DATATHREAD_ALLOWED_TEAMS) and whether the activity named an Entra object id for them (`entra`).

    A person of a tenant not in `home` is EXTERNAL; of one in it with `userRole` "guest", GUEST. An
    anonymous meeting participant (`userRole` "anonymous"; in the activity, no Entra object id) is
    EXTERNAL too, whatever tenant the meeting is in: they joined by a link, signed in to no tenant,
    and nothing vouches that they belong to the organization — only DATATHREAD_ALLOW_EXTERNAL_USERS,
    which allows everyone from outside, lets them ask (they have no object id to list by name).
    Unplaced (no answer, or one without a tenant): UNCONFIRMED, refused unless people from outside
    are allowed; then, while guests are refused, MAYBE_GUEST, since a guest must not pass as an
    allowed outsider."""
    said = said or {}
    role, tenant = str(said.get("role") or "").lower(), str(said.get("tenant") or "").lower()
    if role == "anonymous" or (not said and not entra):
        return EXTERNAL
    if not tenant:
        return MAYBE_GUEST if allow_external else UNCONFIRMED
    if tenant not in home:
        return EXTERNAL
    return GUEST if role == "guest" else ""


def member_of(account: TeamsChannelAccount) -> dict:
    """A TeamsChannelAccount in `standing`'s terms (plain data: kept in the store)."""
    return {"tenant": str(account.tenant_id or "").lower(), "role": str(account.user_role or "").lower()}


async def ask_member(connector: object, conversation: str, member: str, *, host: str = "") -> dict:
    """What the Bot Connector says of `member` (their `29:` id or Entra object id) in `conversation`,
    read as `TeamsInfo._get_member` reads it, within PROGRESS_TIMEOUT_S (a transient refusal tried once
    more); raises `ConnectorFailed`. Signed in first, as every send is (bot/teams_out.py)."""
    credentials = getattr(getattr(connector, "config", None), "credentials", None)
    conversations = connector.conversations  # type: ignore[attr-defined]

    async def get(timeout: tuple[float, float]) -> TeamsChannelAccount:
        if getattr(credentials, "microsoft_app_id", None):  # no app id: the loopback-only mode, no token
            await sign_in(credentials)
        said = await conversations.get_conversation_member(conversation, member, timeout=timeout)
        return TeamsChannelAccount().deserialize(dict(said.serialize(), **said.additional_properties))

    return member_of(await bf.call(get, read_s=bf.PROGRESS_TIMEOUT_S, retry=True, host=host))


async def standing_of(
    threads: Threads,
    connector: object,
    who: IncomingMessage,
    *,
    conversation: str,
    member: str,
    entra: bool = True,
    host: str = "",
) -> Standing:
    """`who`'s standing (their `team_id`: the conversation's tenant), looked up as `member` in
    `conversation` (callers ask only when `worth_asking`), the answer kept a day under the tenant and
    person."""
    failed: list[bf.ConnectorFailed] = []

    async def lookup() -> dict | None:
        try:
            return await ask_member(connector, conversation, member, host=host)
        except bf.ConnectorFailed as exc:
            failed.append(exc)
            log.warning(
                "teams: Teams did not say who %s is (%s), so they are refused wherever "
                "DATATHREAD_ALLOW_EXTERNAL_USERS or DATATHREAD_ALLOW_GUESTS refuse people it cannot place",
                who.user_id,
                exc.why,
            )
            return None

    tenant = who.team_id.lower()
    said = await threads.person(f"teams:{tenant}:{who.user_id}", lookup)
    listed = {t.lower() for t in split_list(threads.settings.allowed_teams)}
    home = frozenset({tenant, *listed} - {""})
    unplaced_allowed = threads.refused(replace(who, outsider=UNCONFIRMED)) is None  # outsiders allowed
    outsider = standing(said, home=home, allow_external=unplaced_allowed, entra=entra)
    return Standing(outsider, failed[0] if failed else None)


async def asker(threads: Threads, activity: Activity, out: TeamsOut) -> IncomingMessage:
    """Who sent `activity` (`teams_who.person`), with their standing as Teams says it: asked in the
    activity's own conversation, by their `29:` id (an anonymous participant has no other)."""
    who = person(activity)
    if not worth_asking(threads, who):
        return who
    sender = activity.from_property
    found = await standing_of(
        threads,
        out.connector,
        who,
        conversation=activity.conversation.id if activity.conversation else "",
        member=(sender.id if sender else "") or who.user_id,
        entra=bool(sender and sender.aad_object_id),
        host=out.host,
    )
    return replace(who, outsider=found.outsider)
