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

Where it is asked: a channel message's conversation is the thread (`19:…@thread.tacv2;messageid=…`),
which the Bot Connector does not know as a conversation (404 ThreadNotFound,
microsoft/botframework-sdk#3062): Teams answers for the team (`channelData.team.id`, as
botbuilder-dotnet's `GetTeamMemberAsync` and https://learn.microsoft.com/microsoftteams/platform/bots/how-to/get-teams-context
ask), and for a shared channel's members from outside the host team, who are not in the team's
roster (404 MemberNotFoundInConversation), the channel itself (`teams_who.rosters`). A chat is asked
as itself.

The answer is kept a day by the core (`Threads.person`, Slack's `users.info` answers' store), per tenant
and person. A lookup that fails — refused, not found, or silent past the connector's timeout
(bot/teams_connector.py) — is tried once, never retried (a person's message must not wait 5 + 5 + 5 s
on a throttled or silent Connector), and kept UNPLACED_TTL_S: one log line says why, and for that
minute the person is refused as unconfirmed without asking again wherever the settings refuse people
Teams cannot place (fail closed), so an outage does not add seconds to every message. Nobody is
looked up when the answer could change nothing (both settings allow, the person is named in
DATATHREAD_ALLOWED_USERS or an admin, or the allowlists refuse them anyway): a lookup costs a round
trip before a first question.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from botbuilder.schema import Activity
from botbuilder.schema.teams import TeamsChannelAccount

from bot import teams_connector as bf
from bot.teams_login import sign_in
from bot.teams_out import TeamsOut
from bot.teams_who import person, rosters
from core.access import EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED
from core.config_types import split_list
from core.events import IncomingMessage
from core.thread import Threads

log = logging.getLogger("datathread.teams")

STANDINGS = ("", GUEST, EXTERNAL, UNCONFIRMED, MAYBE_GUEST)  # every `IncomingMessage.outsider`
MEMBER_NOT_FOUND = "MemberNotFoundInConversation"  # the Bot Connector's 404 for someone not in it
# How long a failed lookup is kept (module constant: tests shorten it): the person is not asked about
# again for this long, and is refused as unconfirmed meanwhile wherever that is the rule.
UNPLACED_TTL_S = 60.0
# Microsoft Entra B2B marks a guest's userPrincipalName `name_home.example#EXT#@host.onmicrosoft.com`
# (https://learn.microsoft.com/entra/external-id/user-properties); Teams has answered such guests with
# userRole "user" (MicrosoftDocs/msteams-docs#6381), so the role alone let them pass as colleagues.
GUEST_UPN_MARK = "#ext#"


@dataclass(frozen=True)
class Standing:
    """`IncomingMessage.outsider` for someone, and why the Bot Connector did not say when the lookup
    failed (`failure`, with its HTTP `status` and error `code`): a schedule's run tells "the bot was
    removed" and "its owner left the conversation" from "Teams did not say"."""

    outsider: str = ""
    failure: str = ""
    status: int | None = None
    code: str = ""

    @property
    def gone(self) -> bool:
        """Refused because the bot is no longer in the conversation (`ConnectorFailed.gone`)."""
        return self.status in (403, 404) and self.code in bf.GONE_CODES

    @property
    def absent(self) -> bool:
        """Teams says the person is not a member of the conversation asked (nor of the team)."""
        return self.status == 404 and self.code == MEMBER_NOT_FOUND


def worth_asking(threads: Threads, who: IncomingMessage) -> bool:
    """Whether what Teams says of `who` could change whether they are answered: the access rules in
    force, asked of every standing they could have. Not when both settings allow everyone, when they
    are named in DATATHREAD_ALLOWED_USERS or are an admin, or when the allowlists refuse them anyway."""
    return len({threads.refused(replace(who, outsider=o)) is None for o in STANDINGS}) > 1


def standing(said: dict | None, *, home: frozenset[str], allow_external: bool, entra: bool) -> str:
    """`IncomingMessage.outsider` from what the members route said (`member_of`; None: it could not
    say), the tenants that are the organization's (`home`: the conversation's and those listed in
    DATATHREAD_ALLOWED_TEAMS) and whether the activity named an Entra object id for them (`entra`).

    A person of a tenant not in `home` is EXTERNAL; of one in it with `userRole` "guest", or an Entra
    B2B guest's userPrincipalName (`GUEST_UPN_MARK`), GUEST. An
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
    return GUEST if role == "guest" or said.get("b2b") else ""


def member_of(account: TeamsChannelAccount) -> dict:
    """A TeamsChannelAccount in `standing`'s terms (plain data: kept in the store)."""
    upn = str(account.user_principal_name or "").lower()
    return {
        "tenant": str(account.tenant_id or "").lower(),
        "role": str(account.user_role or "").lower(),
        "b2b": GUEST_UPN_MARK in upn,  # an Entra B2B guest, whatever userRole says
    }


async def ask_member(
    connector: object, conversations: tuple[str, ...], member: str, *, host: str = ""
) -> dict:
    """What the Bot Connector says of `member` (their `29:` id or Entra object id), read as
    `TeamsInfo._get_member` reads it: asked in the first of `conversations`, and in the next while one
    answers 404 MemberNotFoundInConversation (a shared channel's outside member is not in the host
    team). Each call once, within PROGRESS_TIMEOUT_S; raises `ConnectorFailed`. Signed in first, as
    every send is (bot/teams_out.py)."""
    credentials = getattr(getattr(connector, "config", None), "credentials", None)
    api = connector.conversations  # type: ignore[attr-defined]

    async def get(conversation: str, timeout: tuple[float, float]) -> TeamsChannelAccount:
        if getattr(credentials, "microsoft_app_id", None):  # no app id: the loopback-only mode, no token
            await sign_in(credentials)
        said = await api.get_conversation_member(conversation, member, timeout=timeout)
        return TeamsChannelAccount().deserialize(dict(said.serialize(), **said.additional_properties))

    async def once(conversation: str) -> dict:
        call = functools.partial(get, conversation)
        return member_of(await bf.call(call, read_s=bf.PROGRESS_TIMEOUT_S, retry=False, host=host))

    if not conversations:
        raise bf.ConnectorFailed("the activity names no conversation to ask Teams in")
    *first, last = conversations
    for conversation in first:
        try:
            return await once(conversation)
        except bf.ConnectorFailed as exc:
            if not (exc.status == 404 and exc.code == MEMBER_NOT_FOUND):
                raise
    return await once(last)


def _unplaced_key(key: str) -> str:
    return f"teams:unplaced:{key}"


async def standing_of(
    threads: Threads,
    who: IncomingMessage,
    lookup: Callable[[], Awaitable[dict]],
    *,
    entra: bool = True,
) -> Standing:
    """`who`'s standing (their `team_id`: the conversation's tenant), from what `lookup` (`ask_member`
    where they are) says — called only when neither an answer (kept a day under the tenant and person)
    nor a failure (kept UNPLACED_TTL_S) is kept. Callers ask only when `worth_asking`."""
    tenant = who.team_id.lower()
    key = f"teams:{tenant}:{who.user_id}"
    failed: list[Standing] = []

    async def ask() -> dict | None:
        if (kept := await threads.noted(_unplaced_key(key))) is not None:  # failed a moment ago
            failed.append(Standing(UNCONFIRMED, **json.loads(kept)))
            return None
        try:
            return await lookup()
        except bf.ConnectorFailed as exc:
            failure = {"failure": exc.why, "status": exc.status, "code": exc.code}
            failed.append(Standing(UNCONFIRMED, **failure))
            log.warning(
                "teams: Teams did not say who %s is (%s), so they are refused wherever "
                "DATATHREAD_ALLOW_EXTERNAL_USERS or DATATHREAD_ALLOW_GUESTS refuse people it cannot place; "
                "not asked again for %g s",
                who.user_id,
                exc.why,
                UNPLACED_TTL_S,
            )
            await threads.note(_unplaced_key(key), json.dumps(failure), ttl_s=UNPLACED_TTL_S)
            return None

    said = await threads.person(key, ask)
    listed = {t.lower() for t in split_list(threads.settings.allowed_teams)}
    home = frozenset({tenant, *listed} - {""})
    unplaced_allowed = threads.refused(replace(who, outsider=UNCONFIRMED)) is None  # outsiders allowed
    outsider = standing(said, home=home, allow_external=unplaced_allowed, entra=entra)
    return replace(failed[0], outsider=outsider) if failed else Standing(outsider)


async def asker(threads: Threads, activity: Activity, out: TeamsOut) -> IncomingMessage:
    """Who sent `activity` (`teams_who.person`), with their standing as Teams says it: asked where
    Teams knows the conversation's members (`teams_who.rosters`: a channel's team, then the channel;
    a chat itself), by their `29:` id (an anonymous participant has no other)."""
    who = person(activity)
    if not worth_asking(threads, who):
        return who
    sender = activity.from_property
    member = (sender.id if sender else "") or who.user_id

    async def lookup() -> dict:
        return await ask_member(out.connector, rosters(activity), member, host=out.host)

    found = await standing_of(threads, who, lookup, entra=bool(sender and sender.aad_object_id))
    return replace(who, outsider=found.outsider)
