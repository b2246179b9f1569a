"""What one Slack turn appends into its stream while it runs: the answer's text as Claude writes it,
and each step's task card — in the order they happened, at the pace the workspace allows.

`bot/slack_stream.py` decides what of the text can be shown without ever taking a piece back; this
sends it: the first words at once, then at most one append per the workspace's interval
(`bot/slack_pacing.py`). A 429 is waited out here, not by the SDK, so the text kept meanwhile goes in
one append after the Retry-After; a card held back then is drawn at the end (`last_cards`). Any other
refusal (msg_too_long…) ends the stream: `refused`, and the answer comes whole as a message. Slack
not answering (`SlackCallFailed`) ends progress for the turn: `failed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import (
    RETRY_AFTER_MAX_S,
    SlackCallFailed,
    pacer_of,
    quick,
    retry_after_s,
    slack_error,
    unretried,
)
from bot.slack_pacing import TextPace
from bot.slack_stream import StreamedText
from bot.slack_target import SlackTarget
from core.events import AnswerDelta

log = logging.getLogger("datathread.slack")

FIRST_WORDS_CHARS = 200  # until this much text is in, a look that shows nothing waits for no interval


class StreamAppends:
    """One turn's appends into its stream (text and task cards)."""

    def __init__(
        self,
        client: AsyncWebClient,
        target: SlackTarget,
        *,
        live: Callable[[], str | None],
        failed: Callable[[SlackCallFailed], None],
        refused: Callable[[SlackApiError], Awaitable[None]],
    ):
        self.client = client  # the answer's bound: the cards drawn at the end
        self.paced = unretried(quick(client))  # progress's bound; a 429 comes back at once
        self.channel = target.channel
        self.live = live  # the stream's ts while progress goes into it (None: not streaming, or stopped)
        self.failed, self.refused = failed, refused
        self.text = StreamedText()
        self.pace = TextPace(pacer_of(client), target.team_id)
        self.lock = asyncio.Lock()  # text and task updates reach the stream in the order they happened
        self.shown: dict[str, str] = {}  # each task card's status as Slack last took it
        self._pending: asyncio.Task | None = None
        self._waiting = False  # the pending send is still sleeping (cancelling it loses nothing)
        self._ending = False  # the turn is finishing: no send is scheduled any more

    # --- the text ------------------------------------------------------------------------------------
    async def add(self, delta: AnswerDelta) -> None:
        self.text.add(delta.call, delta.text)
        wait = self.pace.wait_s()
        if wait == 0:
            await self.send()
        else:
            self._later(wait)

    def _later(self, wait: float) -> None:
        """One send of the text after `wait` s, unless one is on its way (it sends what is there then)."""
        pending = self._pending
        if self._ending or (pending and not pending.done() and pending is not asyncio.current_task()):
            return
        self._pending = asyncio.create_task(self.send(after_s=wait))

    async def send(self, *, after_s: float = 0.0) -> None:
        """Append what of the text can be shown now; held back (a 429, here or in another stream of
        the workspace), it waits for one append after the hold."""
        if after_s:
            self._waiting = True
            try:
                await asyncio.sleep(after_s)
            finally:
                self._waiting = False
        async with self.lock:
            if not (ts := self.live()):
                return
            if held := self.pace.held_s():
                return self._later(held)
            # A look counts as an append, not only a send: inside a code block or a table nothing can be
            # shown yet, and every token rendered the whole answer again (an 82,000-character answer
            # held the event loop for 47 s). Not while the first words are a word short of showable:
            # those go at once.
            new = self.text.ready()
            if new or self.text.sent or sum(map(len, self.text.calls.values())) > FIRST_WORDS_CHARS:
                self.pace.mark()
            if not new:
                return
            try:
                for piece in render.split_rendered(new, render.STREAM_LIMIT):
                    await self.paced.chat_appendStream(channel=self.channel, ts=ts, markdown_text=piece)
                    self.text.delivered(piece)  # counted only once Slack has it: never skipped
            except SlackCallFailed as exc:  # the rest comes with the stream's end
                self.failed(exc)
            except SlackApiError as exc:
                if (wait := retry_after_s(exc)) is not None:  # kept: it goes whole after the hold
                    self.pace.refused(wait)
                    return self._later(self.pace.wait_s())
                log.info("stream append refused (%s); the answer comes another way", slack_error(exc))
                self.text = StreamedText()  # the answer is posted whole
                await self.refused(exc)

    async def settle(self, *, streaming: bool) -> None:
        """The turn is ending: a send still waiting goes (the stream's end sends its text), one on its
        way lands (the stream goes on from what Slack has), and a hold Slack asked for is waited out
        (at most RETRY_AFTER_MAX_S)."""
        self._ending = True
        if self._pending and not self._pending.done():
            if self._waiting:
                self._pending.cancel()
            else:
                with contextlib.suppress(SlackClientError):
                    await self._pending
        if streaming and (held := self.pace.held_s()):
            await asyncio.sleep(min(held, RETRY_AFTER_MAX_S))

    # --- task cards ----------------------------------------------------------------------------------
    async def card(self, chunk: TaskUpdateChunk) -> None:
        """One task card's update; a refused one ends the stream (`refused`). One the workspace's hold
        keeps back is drawn at the end (`last_cards`)."""
        try:
            async with self.lock:
                if not (ts := self.live()) or self.pace.held_s():
                    return  # the stream ended while this one waited its turn, or it is held
                await self.paced.chat_appendStream(channel=self.channel, ts=ts, chunks=[chunk.to_dict()])
                self.shown[chunk.id] = chunk.status
        except SlackCallFailed as exc:
            self.failed(exc)
        except SlackApiError as exc:
            if (wait := retry_after_s(exc)) is not None:
                return self.pace.refused(wait)
            log.info("stream append refused (%s); the answer comes another way", slack_error(exc))
            await self.refused(exc)

    async def last_cards(self, ts: str, cards: Iterable[TaskUpdateChunk]) -> None:
        """Each step's card as it ended, where the stream shows otherwise: a step cut short (an error,
        not a spinner for ever), the steps after progress stopped (a slow Slack) or while Slack held
        the stream back: their cards stayed "in progress" above the answer. Best effort, under the
        answer's own bound."""
        for card in cards:
            if self.shown.get(card.id) == card.status:
                continue
            with contextlib.suppress(SlackClientError):
                async with self.lock:
                    await self.client.chat_appendStream(channel=self.channel, ts=ts, chunks=[card.to_dict()])
                self.shown[card.id] = card.status
