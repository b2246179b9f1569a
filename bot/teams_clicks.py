"""A click on a Teams card, run by the runner as a quick job: Run/Cancel (the Run/Cancel card itself,
`confirmer`), and an answer card's Show SQL & code, 👍/👎, Export notebook and Schedule….

Teams posts an Action.Submit as a message activity carrying the card's data as `value`, with an
activity id of its own: the ack's de-duplication (bot/teams_app.py, one activity id) lets every click
of a double click through.
"""

from __future__ import annotations

import logging

from botbuilder.schema import Activity

from bot import teams_render as render
from bot.files import LinkUnavailable
from bot.surface import AppState
from bot.teams_connector import ConnectorFailed
from bot.teams_out import TeamsOut
from bot.teams_who import channel_id, home, person, tenant_of, user_id
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


async def card_action(state: AppState, activity: Activity, value: dict, out: TeamsOut) -> None:
    threads = state.threads
    if denial := threads.refused(person(activity)):  # a card's buttons meet the rules a question does
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
        vote = "up" if value.get("value") == "up" else "down"
        await out.send(await threads.vote(record, user_id=user_id(activity), value=vote))
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
        channel=home(activity),  # each run starts a new thread here
        owner=user,
        team_id=tenant_of(activity),
        service_url=activity.service_url or "",
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
