"""Confirmation of expensive steps in Slack: Run/Cancel buttons in the thread, awaited by the turn.

The turn posts the buttons and waits on a future registered under "<turn_id>:<step_id>"; the button's
action listener resolves it. Both sides must share this process's `ConfirmRegistry`, so this works
with the local runner; on a remote runner (Modal) no click can reach the waiting turn, and the step is
declined after `timeout_s` (the person can ask again with a narrower question).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_progress import SlackTarget
from core.events import Confirmer, ConfirmRequest

log = logging.getLogger("datathread.slack")


class ConfirmRegistry:
    """Futures of steps waiting for a click, by token. One per process (kept in AppState.extras)."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[bool]] = {}

    def wait_for(self, token: str) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting[token] = future
        return future

    def resolve(self, token: str, value: bool) -> bool:
        """Deliver a click; False when no step waits under this token (already answered, or elsewhere)."""
        future = self.waiting.pop(token, None)
        if future is None or future.done():
            return False
        future.set_result(value)
        return True


def build_confirmer(
    client: AsyncWebClient, target: SlackTarget, registry: ConfirmRegistry, *, timeout_s: float = 300.0
) -> Confirmer:
    """A Confirmer that asks in the thread and returns the person's answer (False on timeout)."""

    async def confirm(request: ConfirmRequest) -> bool:
        token = f"{request.turn_id}:{request.step_id}"
        future = registry.wait_for(token)
        blocks = render.confirm_blocks(request.prompt, token)
        try:
            if target.private:
                await client.chat_postEphemeral(
                    channel=target.channel, user=target.user_id, text=request.prompt, blocks=blocks
                )
                posted = None
            else:
                resp = await client.chat_postMessage(
                    channel=target.channel, thread_ts=target.thread_ts, text=request.prompt, blocks=blocks
                )
                posted = resp["ts"]
        except SlackClientError as exc:
            registry.waiting.pop(token, None)
            log.warning("could not ask for confirmation: %s", exc)
            return False
        try:
            answer = await asyncio.wait_for(future, timeout_s)
            note = ":arrow_forward: Running it." if answer else ":no_entry_sign: Cancelled."
        except TimeoutError:
            registry.waiting.pop(token, None)
            answer, note = False, ":hourglass: No answer, so I didn't run it."
        if posted:
            with contextlib.suppress(SlackClientError):
                await client.chat_update(
                    channel=target.channel, ts=posted, text=f"{request.prompt}\n{note}", blocks=[]
                )
        return answer

    return confirm
