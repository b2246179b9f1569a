"""Confirmation of expensive steps in Slack: Run/Cancel buttons in the thread, awaited by the turn.

The turn posts the buttons and waits for the answer under "<turn_id>:<step_id>" in the session store
(`core/confirm.py`); the button's action listener writes it. So the click may land on any replica or
container (the Modal web endpoint) while the turn waits elsewhere. No answer in `timeout_s` = not run.
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import failure_words
from bot.slack_target import SlackTarget
from bot.transcript import confirmation_said
from core.events import Confirmer, ConfirmRequest
from core.thread import Threads

log = logging.getLogger("datathread.slack")


def build_confirmer(client: AsyncWebClient, target: SlackTarget, threads: Threads) -> Confirmer:
    """A Confirmer that asks in the thread and returns the person's answer (False on timeout)."""

    async def confirm(request: ConfirmRequest) -> bool:
        token = f"{request.turn_id}:{request.step_id}"
        blocks = render.confirm_blocks(request.prompt, token, request.yes)
        text = render.escape(request.prompt)
        posted: list[str] = []

        async def show() -> bool:
            try:
                if target.private:
                    await client.chat_postEphemeral(
                        channel=target.channel, user=target.user_id, text=text, blocks=blocks
                    )
                else:
                    resp = await client.chat_postMessage(
                        channel=target.channel, thread_ts=target.thread_ts, text=text, blocks=blocks
                    )
                    posted.append(resp["ts"])
            except SlackClientError as exc:
                log.warning("could not ask for confirmation: %s", failure_words(exc))
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
        return bool(answer)

    return confirm
