"""Slack and schedules. A scheduled run: a header message (a new thread, or into the schedule's thread),
then an ordinary turn in that thread through the same sink as a question — progress, chart, CSV,
answer and footer — under the schedule owner's identity.

A channel that is gone or no longer has the bot (`channel_not_found`, `not_in_channel`,
`is_archived`: https://docs.slack.dev/reference/methods/chat.postMessage#errors) makes the run `gone`,
which pauses the schedule; so does an owner Slack now says may not ask (a guest while guests are
refused, a person of another organization, a deactivated account: `_placed`). A Slack that
does not answer (`bot/slack_client.py` bounds every call) fails the run in one log line and one
sentence, no traceback; the run's notices are then not tried against it.

Creating one from Slack: `/ask schedule weekly mon 09:00 …` (parsed without the model) and the
asker's time zone from `users.info` (scope `users:read`, which the access rules use too: who is one of
the organization's people), which turns also carry for `create_schedule`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field, replace

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_access import asker, refused_click, tell_clicker
from bot.slack_client import SlackCallFailed, slack_error
from bot.slack_confirm import build_confirmer
from bot.slack_progress import SlackProgress
from bot.slack_target import SlackTarget
from bot.surface import AppState
from core.analyst import Analyst
from core.events import IncomingMessage
from core.runner import TurnJob
from core.schedules import Schedule, ScheduleError, UnknownSchedule
from core.schedules_manage import manage, parse_manage
from core.schedules_owner import refused_owner
from core.schedules_parse import parse_schedule_command
from core.schedules_run import RunResult, in_owners_name, turn_question
from core.schedules_tool import from_answer, propose_new, unschedulable
from core.sessions import StoreUnavailable

log = logging.getLogger("datathread.schedules")

GONE_ERRORS = frozenset(
    {"channel_not_found", "not_in_channel", "is_archived", "channel_is_archived", "account_inactive"}
)


@dataclass
class SlackSchedulePoster:
    """Posts one occurrence's runs with one Web API client (the bot token, DATATHREAD_SLACK_API_URL).
    `unreachable`: why Slack did not answer this occurrence's last header, if it did not."""

    client: AsyncWebClient
    analyst: Analyst
    unreachable: str = field(default="", init=False)

    async def run(self, schedule: Schedule, *, turn_id: str, note: str, thread: str = "") -> RunResult:
        schedule, refused = await self._placed(schedule, turn_id)
        if refused:
            return refused
        if thread:  # a retry: in the first attempt's thread, under its "Retrying once"
            return await self._answer(schedule, turn_id=turn_id, thread_ts=thread)
        try:
            header = await self.client.chat_postMessage(
                channel=schedule.channel, thread_ts=schedule.thread or None, text=render.escape(note)
            )
        except SlackApiError as exc:
            error = slack_error(exc)
            return RunResult(ok=False, error=error, gone=error in GONE_ERRORS, turn_id=turn_id)
        except SlackCallFailed as exc:
            self.unreachable = str(exc)
            log.warning(
                "schedule %s: run %s not posted in %s: %s", schedule.id, turn_id, schedule.channel, exc
            )
            return RunResult(ok=False, error=self.unreachable, turn_id=turn_id)
        self.unreachable = ""
        return await self._answer(schedule, turn_id=turn_id, thread_ts=schedule.thread or header["ts"])

    def places_owner(self, schedule: Schedule) -> bool:
        """Whether `_placed` asks Slack who the owner is (a Slack member id): its check, which
        knows their Enterprise Grid organization, then decides (`SchedulePoster.places_owner`)."""
        return schedule.owner.startswith(("U", "W"))

    async def _placed(self, schedule: Schedule, turn_id: str) -> tuple[Schedule, RunResult | None]:
        """A failed run, before anything is posted, when the owner may not ask by who Slack says they
        are now (`users.info`, kept a day; the run-time check knew the allowlists only): a guest while
        guests are refused, a person of another organization, someone who has left (a deactivated
        account: it kept posting the warehouse's data for good) — a pause, as no later run does better.
        One Slack could not look up fails this run only. None for a schedule without a Slack owner.
        With the schedule as the run asks as its owner: their organization, once Slack names it, on a
        schedule stored without it (the terminal's, one made before it was recorded), and kept there —
        DATATHREAD_ALLOWED_TEAMS may list the organization alone, and the turn is checked by it too."""
        if not self.places_owner(schedule):
            return schedule, None
        threads, owner = self.analyst.threads, schedule.owner
        who = await asker(self.client, threads, {"asker_team": schedule.team_id, "user": owner}, tz=True)
        book = threads.schedules()
        if who.enterprise and not schedule.enterprise_id:
            schedule = replace(schedule, enterprise_id=who.enterprise)
            with contextlib.suppress(UnknownSchedule, StoreUnavailable):  # kept next time if not now
                await book.update(schedule.id, enterprise_id=who.enterprise)
        enterprise = who.enterprise or schedule.enterprise_id
        refused = refused_owner(book, schedule, outsider=who.outsider, enterprise=enterprise, turn_id=turn_id)
        return schedule, refused

    async def _answer(self, schedule: Schedule, *, turn_id: str, thread_ts: str) -> RunResult:
        """The run's turn in its thread, through the same sink as a question."""
        threads = self.analyst.threads
        with contextlib.suppress(StoreUnavailable):  # for `tell_stopped`, if this process dies
            await threads.note(_thread_key(turn_id), thread_ts)
        target = SlackTarget(
            channel=schedule.channel, thread_ts=thread_ts, team_id=schedule.team_id, user_id=schedule.owner
        )
        message = IncomingMessage(
            text=turn_question(schedule),
            surface="slack",
            thread_key=(schedule.team_id, schedule.channel, thread_ts),
            user_id=schedule.owner,
            channel_id=schedule.channel,
            team_id=schedule.team_id,
            enterprise_id=schedule.enterprise_id,  # DATATHREAD_ALLOWED_TEAMS may list it alone
            user_tz=schedule.tz,  # "yesterday" on the schedule's calendar
        )

        async def noted(ts: str) -> None:
            with contextlib.suppress(StoreUnavailable):
                await threads.note(_stream_key(turn_id), ts)

        sink = SlackProgress(self.client, target, threads.read_artifact, on_stream=noted)
        # No confirmer: nobody is there to click Run, so a query over the cost cap is not run.
        outcome = await self.analyst.handle(message, in_owners_name(sink), turn_id=turn_id)
        if sink.lost:  # answered, but nobody saw it: not a run that worked
            why = f"the answer was not posted: {sink.lost}"
            return RunResult(ok=False, error=why, turn_id=turn_id, thread=thread_ts)
        return RunResult(
            thread=thread_ts,
            ok=outcome.ok,
            error=outcome.error or "",
            turn_id=turn_id,
            retry=not outcome.at_limit,
            limited=outcome.limited,
        )

    def _not_again(self) -> None:
        """A notice to a Slack that just did not answer would wait as long again, for nobody: the
        caller's log line says it was not posted, and why."""
        if self.unreachable:
            raise SlackCallFailed(f"not tried: {self.unreachable} moments ago")

    async def post_notice(self, schedule: Schedule, text: str, *, thread: str = "") -> None:
        self._not_again()
        await self.client.chat_postMessage(
            channel=schedule.channel, thread_ts=thread or schedule.thread or None, text=render.escape(text)
        )

    async def tell_stopped(self, schedule: Schedule, turn_ids: tuple[str, ...], text: str) -> None:
        """The run's process died: its answer's stream (left open, "is typing" for good) ended with the
        notice, or the notice in the run's thread, or — if no header was posted — in the channel."""
        threads, said = self.analyst.threads, f":warning: {text}"  # our words: nothing to escape
        for turn_id in turn_ids:
            stream = await threads.noted(_stream_key(turn_id))
            thread = await threads.noted(_thread_key(turn_id))
            if stream:
                try:
                    await self.client.chat_stopStream(channel=schedule.channel, ts=stream, markdown_text=said)
                    return
                except SlackApiError as exc:  # ended already (the first attempt's): a message instead
                    log.info("schedule %s: stream %s not ended: %s", schedule.id, stream, exc)
            if thread:
                await self.client.chat_postMessage(channel=schedule.channel, thread_ts=thread, text=said)
                return
        await self.client.chat_postMessage(
            channel=schedule.channel, thread_ts=schedule.thread or None, text=said
        )

    def resume_hint(self, schedule: Schedule) -> str:
        how = f"{self.analyst.settings.slash_command} schedule"
        return (
            f"Resume it with `{how} resume {schedule.id}` once it can work again (`{how} list` shows yours)."
        )

    async def tell_owner(self, schedule: Schedule, text: str) -> None:
        """A direct message (posting to a user id opens the DM with the app: chat:write suffices)."""
        if schedule.owner.startswith(("U", "W")):
            self._not_again()
            await self.client.chat_postMessage(channel=schedule.owner, text=slack_text(text))
        else:  # a schedule made in the terminal has no Slack owner to write to
            log.warning("schedule %s: %s", schedule.id, text)


CHANNEL_REF = re.compile(r"&lt;#([CG][A-Z0-9]+)&gt;")


def slack_text(text: str) -> str:
    """Our sentence for Slack: escaped (it carries people's questions), but a channel written
    `<#C…>` shown as the channel's name, not as an id nobody recognises."""
    return CHANNEL_REF.sub(r"<#\1>", render.escape(text))


def _thread_key(turn_id: str) -> str:
    return f"slack:schedule-thread:{turn_id}"


def _stream_key(turn_id: str) -> str:
    return f"slack:schedule-stream:{turn_id}"


# --- creating from Slack: `/ask schedule …` and the asker's time zone ------------------------------
JOB_SCHEDULE_COMMAND = "slack.schedule"
NOT_MEMBER = (
    "I'm not in this channel, so I can't post a schedule here — `/invite @datathread`, then try again."
)
NOT_MEMBER_ERRORS = frozenset({"not_in_channel", "channel_not_found"})
CANNOT_ASK = "Not created: Slack did not let me ask you here ({})."
JOB_SCHEDULE_ANSWER = "slack.schedule_answer"  # "Schedule…" under an answer


async def schedule_command(ack, submit, command: dict, text: str, who: dict) -> None:
    """`/ask schedule weekly mon 09:00 …`: ack at once, set it up after (parse, confirm, create).
    `who`: who asks (bot/slack_access.py `who_asks`), for the access rules."""
    said = "One moment…" if parse_manage(text) else "Setting up your schedule…"
    await ack(text=f":spiral_calendar_pad: {said}")
    payload = {
        "team": command["team_id"],
        "channel": command["channel_id"],
        "user": command["user_id"],
        **who,
    }
    payload["response_url"] = command.get("response_url", "")  # where the bot is not a member
    await submit(TurnJob(kind=JOB_SCHEDULE_COMMAND, payload={**payload, "text": text}, quick=True))


async def run_schedule_command(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """Parse the command, ask Create / Cancel (only the asker sees the buttons), create on yes."""
    if await refused_click(state.threads, client, p):
        return
    if (manage_command := parse_manage(p["text"])) is not None:  # list, pause, resume, remove
        how = f"{state.settings.slash_command} schedule"
        book = state.threads.schedules()
        said = await manage(book, manage_command, user=p["user"], channel=p["channel"], how=how)
        return await _tell(client, p, said)
    try:
        command = parse_schedule_command(p["text"])
    except ScheduleError as exc:
        return await _tell(client, p, str(exc))
    await _propose(state, client, p, cron=command.cron, question=command.question)


async def run_schedule_answer(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """ "Schedule…" under an answer: its question (and final warehouse SQL) on the chosen cadence, in
    this channel, confirmed with Create / Cancel like every other way of creating a schedule."""
    if await refused_click(state.threads, client, p):
        return
    turn_id, _, cron = p["value"].partition(" ")
    record = await state.threads.turn(turn_id, channel_id=p["channel"])
    if record is None or not cron:
        return await _tell(client, p, "I no longer have the details of that answer.")
    if refusal := unschedulable(record, s3=bool(state.settings.s3_buckets)):  # it read a shared file
        return await _tell(client, p, refusal)
    await _propose(state, client, p, cron=cron, **from_answer(record))


async def _propose(
    state: AppState, client: AsyncWebClient, p: dict, *, cron: str, question: str, sql: str = ""
) -> None:
    threads = state.threads
    target = SlackTarget(  # in the thread of the answer whose "Schedule…" was picked, if any
        channel=p["channel"],
        thread_ts=p.get("thread_ts") or "",
        team_id=p["team"],
        user_id=p["user"],
        private=True,
    )
    # their time zone, and their organization for an allowlist that names it (users.info, kept a day):
    # a schedule kept by its workspace alone was refused where only the organization (E…) is listed
    who = await asker(client, threads, p, tz=True)
    refused: list[str] = []
    sentence = await propose_new(
        threads.schedules(),
        build_confirmer(client, target, threads, refused=refused),
        cron=cron,
        tz=who.tz or state.settings.default_tz,
        surface="slack",
        channel=p["channel"],
        question=question,
        owner=p["user"],
        team_id=p["team"],
        enterprise_id=who.enterprise,
        sql=sql,
        manage_hint=f"`{state.settings.slash_command} schedule list` shows yours.",
    )
    if refused:  # the Create / Cancel question never reached them: not "cancelled"
        sentence = NOT_MEMBER if refused[0] in NOT_MEMBER_ERRORS else CANNOT_ASK.format(refused[0])
    await _tell(client, p, sentence)


async def _tell(client: AsyncWebClient, p: dict, sentence: str) -> None:
    """To the asker alone, where they are: the thread of the answer they scheduled (it landed in the
    channel, away from it), or through the response_url where the bot may not post."""
    try:
        await tell_clicker(client, p, {"text": slack_text(sentence)})
    except SlackClientError as exc:
        log.warning("the schedule reply for %s in %s did not reach them: %s", p["user"], p["channel"], exc)
