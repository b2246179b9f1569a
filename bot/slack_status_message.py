"""The status message of a Slack turn that cannot stream: where Slack refuses streaming (older plans,
GovSlack, API errors), one message in the thread says what the turn is doing, edited in place with
`chat.update` at most once per `min_update_s` — chat.update is a Tier 3 method
(https://docs.slack.dev/apis/web-api/rate-limits) — and retired when the answer is posted
(bot/slack_answer.py `post_answer`).

Progress, so decoration: every call is the short-bounded client's, and the first one Slack does not
answer ends progress for the turn (`failed`, bot/slack_progress.py); a refusal of the post itself
(not in the channel) is the caller's to handle. Its own module because it is one piece of state (the
message's ts, the throttle, the edit on its way) the streamed path never touches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_blocks
from bot.slack_answer import NO_UNFURL
from bot.slack_client import SlackCallFailed, cannot_post_here
from bot.slack_target import SlackTarget
from bot.transcript import Throttle, Transcript

EDIT_CHARS = 3000  # of the status message's text: its lines are a summary, the answer comes apart


class StatusMessage:
    """One turn's status message, posted once and then edited from its transcript."""

    def __init__(
        self,
        quick: AsyncWebClient,
        transcript: Transcript,
        *,
        min_update_s: float,
        failed: Callable[[SlackCallFailed], None],
        stopped: Callable[[], bool],
        left: Callable[[SlackApiError], Awaitable[None]],
    ):
        self.quick = quick  # the progress client: bounded by PROGRESS_TIMEOUT_S
        self.transcript = transcript
        self.throttle = Throttle(min_update_s)
        self.ts: str | None = None  # the message's, once Slack has it
        self._channel = ""
        self._failed = failed  # Slack did not answer: no more progress this turn
        self._stopped = stopped  # progress has ended (this or another call failed)
        self._left = left  # an edit refused for where it goes (the bot removed mid-turn)
        self._pending: asyncio.Task | None = None

    async def post(self, target: SlackTarget, text: str) -> bool:
        """Post it in the target's thread; True once Slack has it. Slack refusing it raises SlackApiError."""
        try:
            resp = await self.quick.chat_postMessage(
                channel=target.channel, thread_ts=target.thread_ts, text=text, **NO_UNFURL
            )
        except SlackCallFailed as exc:
            self._failed(exc)
            return False
        self.ts, self._channel = resp["ts"], target.channel
        return True

    def update(self) -> None:
        """Redraw it from the transcript: now, or once the throttle allows (one edit waits at a time)."""
        if self._stopped() or not self.ts:
            return
        if self._pending is None or self._pending.done():
            self._pending = asyncio.create_task(self._edit())

    def cancel(self) -> None:
        """The answer is coming: an edit still waiting would only be overwritten."""
        pending = self._pending
        if pending and not pending.done() and pending is not asyncio.current_task():
            pending.cancel()

    async def _edit(self) -> None:
        wait = self.throttle.wait_s()
        if wait > 0:
            await asyncio.sleep(wait)
        self.throttle.mark()
        head = f":hourglass_flowing_sand: {self.transcript.status()}"  # working, or waiting its turn
        text = "\n".join([head, *(slack_blocks.status_line(row) for row in self.transcript.rows())])
        if self._stopped() or not self.ts:
            return
        try:
            await self.quick.chat_update(channel=self._channel, ts=self.ts, text=text[:EDIT_CHARS])
        except SlackCallFailed as exc:
            self._failed(exc)
        except SlackApiError as exc:
            if cannot_post_here(exc):  # removed from the channel, or it was archived
                await self._left(exc)
        except SlackClientError:  # refused (the message deleted meanwhile): the answer still comes
            pass
