"""Teams' side of a scheduled run, by proactive messaging through the Bot Connector:
https://learn.microsoft.com/microsoftteams/platform/bots/how-to/conversations/send-proactive-messages

A new thread per run is a new conversation in the channel (`conversations.create_conversation` with the
channel's id in `channelData`); a schedule with a thread continues `<channel>;messageid=<thread>`. A
group chat, meeting chat or personal chat has no threads, and a bot cannot create a group chat
("You can't create a new group chat or a new channel in a team with proactive messaging"): its runs
are messages into the chat itself (`continue_conversation` on its id), as any proactive message to an
existing conversation. Every run there failed before, as `create_conversation` was asked for a chat.
The turn then renders through the same `TeamsSink` as a question: progress card, chart inline, CSV as
a link, the answer card. A run in a chat joins the chat's current conversation, as a question there
does (after `reset` or 8 idle hours, the next one): follow-ups in the chat see the report. HTTP
403/404 from the connector (bot removed, channel deleted) makes the run `gone`, which pauses the
schedule; so does an owner Teams now says may not ask (a guest while guests are refused, a person of
another organization, someone no longer in the conversation: `_owner_refused`), looked up before
anything is posted.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from botbuilder.core import TurnContext
from botbuilder.schema import (
    Activity,
    ActivityTypes,
    ChannelAccount,
    ConversationAccount,
    ConversationParameters,
    ConversationReference,
)

from bot.surface import AppState
from bot.teams_auth import TeamsBot
from bot.teams_connector import ConnectorFailed
from bot.teams_members import ask_member, standing_of
from bot.teams_out import TeamsOut
from bot.teams_progress import TeamsSink
from core.access import home_tenant
from core.events import IncomingMessage
from core.schedules import Schedule, teams_conversation_type
from core.schedules_owner import refused_owner
from core.schedules_run import RunResult, in_owners_name, turn_question
from core.sessions import StoreUnavailable

log = logging.getLogger("datathread.schedules")

GONE_STATUS = frozenset({403, 404})


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@dataclass
class TeamsSchedulePoster:
    """Posts scheduled runs into Teams channels (or chats) as the bot."""

    bot: TeamsBot
    state: AppState

    def _service_url(self, schedule: Schedule) -> str:
        return schedule.service_url or self.state.settings.teams_service_url

    def _tenant(self, schedule: Schedule) -> str:
        """The schedule's tenant; the bot's own for one stored without (the terminal's, without
        `--team`, before the book filled it in): with "", every run was refused by the access rules
        as another organisation's (and the refusal posted), and `createConversation` named no tenant."""
        return schedule.team_id or home_tenant(self.state.settings)

    def _reference(self, schedule: Schedule, conversation_id: str) -> ConversationReference:
        kind = _kind(schedule)
        return ConversationReference(
            channel_id="msteams",
            service_url=self._service_url(schedule),
            bot=ChannelAccount(id=self.bot.app_id),
            conversation=ConversationAccount(
                id=conversation_id,
                is_group=kind != "personal",
                conversation_type=kind,
                tenant_id=self._tenant(schedule),
            ),
        )

    async def _session_key(self, schedule: Schedule, tenant: str, conversation: str) -> tuple[str, ...]:
        """The session a run answers in: its thread's in a channel; in a chat, the chat's current one,
        as a question there has (bot/teams_jobs.py `thread_key`: after `reset` or 8 idle hours, the next).
        Chat runs took the chat's first session whatever happened since: a run's request held what
        people asked before a reset, and their follow-up under the report never saw it."""
        if _kind(schedule) == "channel":
            return (tenant, conversation)
        return await self.state.threads.current_key("teams", (tenant, conversation), idle_reset=True)

    async def _in_conversation(
        self, schedule: Schedule, header: str, work, *, conversation: str = ""
    ) -> None:
        """Post `header` (a new thread, or into the schedule's thread or chat, or into `conversation`: a
        run's own thread), then `work(out)` in that thread; an empty header is not posted."""
        if schedule.thread:
            into = f"{schedule.channel};messageid={schedule.thread}"
        else:  # a channel gets a new thread per run; a chat, the run's messages
            into = "" if _kind(schedule) == "channel" else schedule.channel
        into = conversation or into

        async def logic(context: TurnContext) -> None:
            connector = context.turn_state[self.bot.connector_key()]
            here = context.activity.conversation.id
            out = TeamsOut(connector=connector, reference=self._reference(schedule, here))
            try:
                if into and header:  # a new conversation's first message is the header already
                    await out.send(header)
                await work(out)
            finally:  # msrest's async ConnectorClient has no close(): __aexit__ closes its session
                await connector.__aexit__(None, None, None)

        if into:
            await self.bot.adapter.continue_conversation(
                self._reference(schedule, into), logic, bot_app_id=self.bot.app_id
            )
            return
        params = ConversationParameters(
            is_group=True,
            bot=ChannelAccount(id=self.bot.app_id),
            channel_data={"channel": {"id": schedule.channel}, "tenant": {"id": self._tenant(schedule)}},
            tenant_id=self._tenant(schedule) or None,
            activity=Activity(type=ActivityTypes.message, text=header, text_format="markdown"),
        )
        await self.bot.adapter.create_conversation(
            self.bot.app_id, logic, params, "msteams", self._service_url(schedule), None
        )

    def places_owner(self, schedule: Schedule) -> bool:
        """Whether `_owner_refused` asks Teams who the owner is (`SchedulePoster.places_owner`)."""
        return teams_person(schedule.owner)

    async def _owner_refused(self, schedule: Schedule, turn_id: str) -> RunResult | None:
        """A failed run, before anything is posted, when the owner may not ask by who Teams says they
        are now (the members route, kept a day: bot/teams_members.py; the run-time check knew the
        allowlists only): a guest while guests are refused, a person of another organization, someone
        Teams says is no longer in the conversation (404 MemberNotFoundInConversation: they left the
        team or chat, or the organization — refused as Slack's deactivated accounts are, admins too) —
        a pause, as no later run does better; so does a Bot Connector that says the bot was removed.
        Asked on every run, as Slack's owners are: skipped while both settings allowed, a leaver's
        schedule kept posting. One Teams could not look up fails this run (its retry is not asked
        again: the failure is kept a minute). None for an owner who is no Teams person."""
        owner, threads = schedule.owner, self.state.threads
        if not self.places_owner(schedule):
            return None
        who = IncomingMessage(
            text="",
            surface="teams",
            thread_key=(),
            user_id=owner,
            channel_id=schedule.channel,
            team_id=self._tenant(schedule),
        )
        said = await standing_of(threads, who, lambda: self._ask_owner(schedule))
        if said.gone:  # removed from the team, the chat deleted
            return RunResult(ok=False, error=f"HTTP {said.status}", gone=True, turn_id=turn_id)
        if said.absent and _kind(schedule) != "channel":
            why = f"its owner ({owner}) is no longer in this conversation"
            return RunResult(ok=False, error=why, turn_id=turn_id, lasting=True, retry=False)
        if said.absent:  # a channel's roster by its own id, not its team's (a schedule keeps no team id):
            # not proof they left — Teams has answered a channel's roster in part — so this run fails
            why = f"Teams did not find its owner ({owner}) in this channel's members"
            return RunResult(ok=False, error=why, turn_id=turn_id, retry=False)
        return refused_owner(threads.schedules(), schedule, outsider=said.outsider, turn_id=turn_id)

    async def _ask_owner(self, schedule: Schedule) -> dict:
        """What the members route says of the owner, asked in the schedule's channel or chat (where
        their runs post), signed in through a proactive turn; raises `ConnectorFailed`. Only when no
        answer is kept: a kept one costs no sign-in and no turn."""
        found: list[dict] = []
        failed: list[ConnectorFailed] = []

        async def logic(context: TurnContext) -> None:
            connector = context.turn_state[self.bot.connector_key()]
            host = urlsplit(self._service_url(schedule)).hostname or ""
            try:
                found.append(await ask_member(connector, (schedule.channel,), schedule.owner, host=host))
            except ConnectorFailed as exc:  # raised below, past the adapter's turn
                failed.append(exc)
            finally:  # msrest's async ConnectorClient has no close(): __aexit__ closes its session
                await connector.__aexit__(None, None, None)

        reference = self._reference(schedule, schedule.channel)
        await self.bot.adapter.continue_conversation(reference, logic, bot_app_id=self.bot.app_id)
        if failed:
            raise failed[0]
        return found[0]

    async def run(self, schedule: Schedule, *, turn_id: str, note: str, thread: str = "") -> RunResult:
        """With `thread` (a retry), in that conversation under the first attempt's notice, no header."""
        try:
            if refused := await self._owner_refused(schedule, turn_id):
                return refused
        except Exception as exc:  # no connector at all (signing in failed: bot/teams_login.py), the store
            why = exc.why if isinstance(exc, ConnectorFailed) else type(exc).__name__
            log.warning("schedule %s: its owner could not be looked up: %s", schedule.id, why)
            return RunResult(ok=False, error=why, turn_id=turn_id)
        outcome_box: list = []
        where: list[str] = [thread]
        tenant = self._tenant(schedule)

        async def answer(out: TeamsOut) -> None:
            conversation = where[0] = out.reference.conversation.id
            with contextlib.suppress(StoreUnavailable):  # for `tell_stopped`, if this process dies
                await self.state.threads.note(_thread_key(turn_id), conversation)
            message = IncomingMessage(
                text=turn_question(schedule),
                surface="teams",
                thread_key=await self._session_key(schedule, tenant, conversation),
                user_id=schedule.owner,
                channel_id=schedule.channel,
                team_id=tenant,
                user_tz=schedule.tz,  # "yesterday" on the schedule's calendar
            )
            sink = TeamsSink(threads=self.state.threads, links=self.state.links, out=out, personal=False)
            outcome_box.append(
                await self.state.analyst.handle(message, in_owners_name(sink), turn_id=turn_id)
            )

        try:
            await self._in_conversation(schedule, "" if thread else note, answer, conversation=thread)
        except Exception as exc:
            status = _status(exc)
            log.warning(
                "schedule %s: Teams post failed (%s, HTTP %s)", schedule.id, type(exc).__name__, status
            )
            why = exc.why if isinstance(exc, ConnectorFailed) else type(exc).__name__  # sign-in: its sentence
            error = f"HTTP {status}" if status else why
            gone = status in GONE_STATUS
            return RunResult(ok=False, error=error, gone=gone, turn_id=turn_id, thread=where[0])
        if not outcome_box:
            return RunResult(ok=False, error="the turn did not run", turn_id=turn_id, thread=where[0])
        outcome = outcome_box[0]
        return RunResult(
            thread=where[0],
            ok=outcome.ok,
            error=outcome.error or "",
            turn_id=turn_id,
            retry=not outcome.at_limit,
            limited=outcome.limited,
        )

    async def post_notice(self, schedule: Schedule, text: str, *, thread: str = "") -> None:
        async def send(out: TeamsOut) -> None:
            return None

        await self._in_conversation(schedule, text, send, conversation=thread)

    async def tell_stopped(self, schedule: Schedule, turn_ids: tuple[str, ...], text: str) -> None:
        """The run's process died: said in the run's conversation, else the schedule's channel."""
        for turn_id in turn_ids:
            if conversation := await self.state.threads.noted(_thread_key(turn_id)):
                return await self.post_notice(schedule, text, thread=conversation)
        await self.post_notice(schedule, text)

    def resume_hint(self, schedule: Schedule) -> str:
        how = "@datathread schedule"  # the bot's name in teams/manifest.json, as people mention it
        return (
            f"Resume it with `{how} resume {schedule.id}` once it can work again (`{how} list` shows yours)."
        )

    async def tell_owner(self, schedule: Schedule, text: str) -> None:
        """Teams has no DM without the person's own conversation id: say it in the channel, to them."""
        await self.post_notice(schedule, text)


# A person's Microsoft Entra object id, as a schedule made in Teams names its owner (`teams_who.user_id`).
ENTRA_OBJECT_ID = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}", re.IGNORECASE)


def teams_person(owner: str) -> bool:
    """Whether a schedule's owner is someone Teams can be asked about: an Entra object id (a schedule
    made in Teams), or a conversation member's `29:` id. A terminal `--owner` of another shape names
    the operator's choice of identity, not a Teams account: not looked up, as Slack's runs skip
    owners that are no Slack member ids (bot/schedule_slack.py)."""
    return bool(ENTRA_OBJECT_ID.fullmatch(owner) or owner.startswith("29:"))


def _kind(schedule: Schedule) -> str:
    """The schedule's conversation kind; read from its id for a schedule made before it was recorded."""
    return schedule.conversation_type or teams_conversation_type(schedule.channel)


def _thread_key(turn_id: str) -> str:
    return f"teams:schedule-thread:{turn_id}"
