"""Confirmation of expensive steps in Slack: Run/Cancel buttons in the thread, awaited by the turn.

The turn posts the buttons and waits for the answer under "<turn_id>:<step_id>" in the session store
(`core/confirm.py`); the button's action listener writes it. So the click may land on any replica or
container (the Modal web endpoint) while the turn waits elsewhere. No answer in `timeout_s` = not run.

Once answered, the question is replaced by what became of it, so its buttons are gone. A message in
the thread is edited (`chat.update`); an ephemeral one (Create/Cancel of a schedule, only the asker
sees it) cannot be, only replaced through the click's response_url, which the listener keeps in the
store for the waiting turn (`remember_click`).
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_blocks
from bot import slack_render as render
from bot.slack_client import answer_via_response_url, failure_words, slack_error
from bot.slack_target import SlackTarget
from bot.transcript import confirmation_said
from core.events import Confirmer, ConfirmRequest
from core.sessions import StoreUnavailable
from core.thread import Threads

log = logging.getLogger("datathread.slack")


def _click_key(token: str) -> str:
    return f"slack:confirm-click:{token}"


async def remember_click(threads: Threads, token: str, response_url: str) -> None:
    """Keep the response_url of a click on an ephemeral Run/Cancel (or Create/Cancel) for the turn
    waiting on it, which replaces the question with its outcome; noted before the answer is given,
    so the turn finds it as soon as it sees the answer. The first click's stays."""
    if response_url:
        with contextlib.suppress(StoreUnavailable):  # then the buttons stay, as before
            await threads.note(_click_key(token), response_url)


def build_confirmer(
    client: AsyncWebClient, target: SlackTarget, threads: Threads, *, refused: list[str] | None = None
) -> Confirmer:
    """A Confirmer that asks in the thread and returns the person's answer (False on timeout).
    `refused` collects Slack's error code when the question could not be shown at all (the caller
    says why — `not_in_channel` — instead of "cancelled")."""

    async def confirm(request: ConfirmRequest) -> bool:
        token = f"{request.turn_id}:{request.step_id}"
        blocks = slack_blocks.confirm_blocks(request.prompt, token, request.yes)
        text = render.escape(request.prompt)
        posted: list[str] = []

        async def show() -> bool:
            try:
                if target.private:
                    await client.chat_postEphemeral(
                        channel=target.channel,
                        user=target.user_id,
                        thread_ts=target.thread_ts or None,
                        text=text,
                        blocks=blocks,
                    )
                else:
                    resp = await client.chat_postMessage(
                        channel=target.channel, thread_ts=target.thread_ts, text=text, blocks=blocks
                    )
                    posted.append(resp["ts"])
            except SlackClientError as exc:
                log.warning("could not ask for confirmation: %s", failure_words(exc))
                if refused is not None and isinstance(exc, SlackApiError):
                    refused.append(slack_error(exc))
                return False
            return True

        answer = await threads.await_confirmation(token, asker=target.user_id, show=show)
        mark = {True: ":arrow_forward:", False: ":no_entry_sign:"}.get(answer, ":hourglass:")
        note = f"{mark} {confirmation_said(request.yes, answer)}"
        if posted:
            with contextlib.suppress(SlackClientError):
                await client.chat_update(
                    channel=target.channel, ts=posted[0], text=f"{text}\n{note}", blocks=[]
                )
        elif target.private and answer is not None:
            await _replace_ephemeral(client, threads, token, f"{text}\n{note}")
        return bool(answer)

    return confirm


async def _replace_ephemeral(client: AsyncWebClient, threads: Threads, token: str, said: str) -> None:
    """The ephemeral question replaced by its outcome through the click's response_url: its buttons
    stayed live after Create, and a second click was told the question had expired."""
    with contextlib.suppress(StoreUnavailable):
        if url := await threads.noted(_click_key(token)):
            await answer_via_response_url(
                client, url, what=f"The answered confirmation {token}", replace_original=True, text=said
            )
