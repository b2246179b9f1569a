"""A click on a Teams card, run by the runner as a quick job: Run/Cancel (the Run/Cancel card itself,
`confirmer`), and an answer card's Show SQL & code, 👍/👎, Export notebook and Schedule….

Teams posts an Action.Submit as a message activity carrying the card's data as `value`, with an
activity id of its own: the ack's de-duplication (bot/teams_app.py, one activity id) let every click
of a double click through, and in a channel each reply is for everyone — Show SQL & code clicked
twice posted the SQL twice, 👍 twice two "Thanks! I saved this…". A click repeated by the same person
on the same button with the same data (the same answer, vote, cadence, Run or Cancel) within
CLICK_REPEAT_S does nothing: claimed in the session store, as Slack's events are (bot/slack_app.py),
so across workers and replicas too. The claim is let go when the click's reply fails (Teams refused
it: the person may try again), and after a vote, whose repeat is a vote equal to the one recorded
(👍, 👎, 👍 ends 👍). A vote is drawn on the answer's card (bot/teams_votes.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from dataclasses import dataclass

from botbuilder.schema import Activity

from bot import teams_render as render
from bot.files import LinkUnavailable
from bot.surface import AppState
from bot.teams_connector import ConnectorFailed
from bot.teams_members import asker
from bot.teams_out import TeamsOut
from bot.teams_votes import draw_vote
from bot.teams_who import channel_id, home, tenant_of, user_id
from bot.transcript import confirmation_said
from core.events import ConfirmRequest
from core.schedules_tool import from_answer, propose_new, unschedulable
from core.thread import (
    CONFIRM_EXPIRED,
    CONFIRM_NOT_YOURS,
    NOTEBOOK_NAME,
    ConfirmAnswer,
    ConfirmResult,
    Threads,
)
from core.turn_records import NothingToExport

log = logging.getLogger("datathread.teams")

CLICK_REPEAT_S = 60.0  # a double click, or a second try after a slow reply; a minute later, it is asked
CLICK_TRIES = 5  # the same click let go this many times within CLICK_REPEAT_S (failed replies, votes)


def confirmer(threads: Threads, out: TeamsOut, asker: str):
    """Ask with a Run/Cancel card; the answer arrives through the store (any replica may get the click)."""

    async def confirm(request: ConfirmRequest) -> bool:
        key = f"{request.turn_id}:{request.step_id}"

        async def show() -> bool:  # a card that cannot be shown means no, as on Slack, in one log line
            try:
                await out.send(attachments=[render.confirm_card(request.prompt, key, request.yes)])
            except ConnectorFailed as exc:
                where = out.reference.conversation.id
                log.warning("teams: could not ask for confirmation in conversation %s: %s", where, exc)
                return False
            return True

        answer = await threads.await_confirmation(key, asker=asker, show=show)
        if answer is None:
            await out.send(confirmation_said(request.yes, None))
        return bool(answer)

    return confirm


@dataclass(frozen=True)
class Click:
    """A click claimed in the store (`first_click`): `release` lets the same click be handled again."""

    name: str
    at: float  # time.monotonic() when claimed

    async def release(self, threads: Threads) -> None:
        """Until the claim would have expired anyway; a store that fails only keeps the claim."""
        left = CLICK_REPEAT_S - (time.monotonic() - self.at)
        with contextlib.suppress(Exception):
            await threads.note(f"{self.name}:released", "1", ttl_s=max(left, 0.001))


async def first_click(threads: Threads, activity: Activity, value: dict) -> Click | None:
    """None for the same person's same click (same card data) in this conversation within
    CLICK_REPEAT_S while one is handled, or after one was: it does nothing. A claim let go (`release`:
    its reply failed, or it was a vote) is followed by the next of CLICK_TRIES, across replicas."""
    where = activity.conversation.id if activity.conversation else ""
    click = json.dumps([where, user_id(activity), value], sort_keys=True, default=str)
    key = hashlib.sha256(click.encode()).hexdigest()[:32]
    for attempt in range(CLICK_TRIES):
        name = f"teams:click:{key}:{attempt}"
        if await threads.claim(name, ttl_s=CLICK_REPEAT_S):
            return Click(name, time.monotonic())
        if await threads.noted(f"{name}:released") is None:
            return None
    return None


async def card_action(state: AppState, activity: Activity, value: dict, out: TeamsOut) -> None:
    """Handle a click once. A vote is let go after it (the vote recorded says what repeats it), any
    click whose reply failed too: "Show SQL & code" refused with a 5xx could not be tried again for a
    minute, and 👍, 👎, 👍 dropped the second 👍 as a repeat of the first."""
    threads = state.threads
    click = await first_click(threads, activity, value)
    if click is None:
        where = activity.conversation.id if activity.conversation else ""
        log.info("teams: a repeated click (%s) in %s: nothing to do", value.get(render.ACTION_KEY), where)
        return
    try:
        await _act(state, activity, value, out)
    except BaseException:
        await click.release(threads)
        raise
    if value.get(render.ACTION_KEY) == "feedback":
        await click.release(threads)


async def _act(state: AppState, activity: Activity, value: dict, out: TeamsOut) -> None:
    threads = state.threads
    # a card's buttons meet the rules a question does, a guest's or another organization's click too
    if denial := threads.refused(await asker(threads, activity, out)):
        await out.send(denial)
        return
    action = value.get(render.ACTION_KEY)
    if action == "confirm":
        answer = ConfirmAnswer.RUN if value.get("answer") == "run" else ConfirmAnswer.CANCEL
        result = await threads.answer_confirmation(str(value.get("key")), answer, user_id=user_id(activity))
        if result is ConfirmResult.NOT_YOURS:
            await out.send(CONFIRM_NOT_YOURS)
        elif result is ConfirmResult.ALREADY_ANSWERED:
            await out.send(CONFIRM_EXPIRED)
        else:
            # the card carries its yes button's word: a schedule's says Create, a query's Run
            await out.send(confirmation_said(str(value.get("yes", "")), answer is ConfirmAnswer.RUN))
        return
    record = await threads.turn(str(value.get("turn_id", "")), channel_id=channel_id(activity))
    if action == "show_steps":  # twelve steps of long SQL are more than one Teams message takes
        for part in render.split_message(render.steps_markdown(record)):
            await out.send(part)
    elif action == "feedback" and record is not None:
        vote, voter = "up" if value.get("value") == "up" else "down", user_id(activity)
        if (record.get("feedback") or {}).get(voter) == vote:  # a repeat: the vote stands as it is
            return
        said = await threads.vote(record, user_id=voter, value=vote)
        name = activity.from_property.name if activity.from_property else ""
        if not await draw_vote(threads, out, record, voter=voter, name=name or "", vote=vote, said=said):
            await out.send(said)
    elif action == "export_notebook" and record is not None:
        await _export_notebook(state, record, out)
    elif action == "schedule" and record is not None:
        await _schedule_answer(state, activity, record, str(value.get("cadence") or ""), out)
    else:
        await out.send("I can't find that answer any more.")


async def _schedule_answer(
    state: AppState, activity: Activity, record: dict, cron: str, out: TeamsOut
) -> None:
    """ "Schedule…" on an answer card: its question (and final warehouse SQL) on the chosen cadence in this
    conversation, in the person's time zone, created after Create / Cancel like every other way."""
    if refusal := unschedulable(record, s3=bool(state.settings.s3_buckets)):  # it read a shared file
        await out.send(refusal)
        return
    user = user_id(activity)
    sentence = await propose_new(
        state.threads.schedules(),
        confirmer(state.threads, out, user),
        cron=cron,
        tz=activity.local_timezone or state.settings.default_tz,
        surface="teams",
        channel=home(activity),  # each run starts a new thread here (a chat's: a message in it)
        owner=user,
        team_id=tenant_of(activity),
        service_url=activity.service_url or "",
        # as Teams names it, which decides how runs are posted; the id's shape is only a guess
        conversation_type=(activity.conversation.conversation_type or "") if activity.conversation else "",
        **from_answer(record),
    )
    await out.send(sentence)


async def _export_notebook(state: AppState, record: dict, out: TeamsOut) -> None:
    session_id, path = record["session_id"], f"exports/{record['turn_id']}.ipynb"
    try:
        data = await state.threads.export_notebook(session_id, save_as=path)
    except NothingToExport as exc:  # one sentence for a person
        await out.send(str(exc))
        return
    try:
        url = await state.links.download_link(session_id, path, data)
    except LinkUnavailable as exc:  # logged where it was raised
        await out.send(f"I couldn't make a download link for the notebook ({render.inert(str(exc))}).")
        return
    await out.send(render.link_text(NOTEBOOK_NAME, url, state.settings.link_ttl_seconds))
