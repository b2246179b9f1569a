"""The Slack EventSink: shows a turn's progress in the thread and posts its answer and files.

Preferred path: a streamed reply (https://docs.slack.dev/messaging/sending-and-scheduling-messages#text-streaming)
whose task updates show each tool step, the answer streamed as Markdown, and the footer as blocks on
`chat.stopStream`; the thread's status says "is thinking…" meanwhile (bot/slack_status.py). Where streaming is
refused (older plans, GovSlack, API errors) it falls back to one status message edited in place
(bot/slack_status_message.py). Private answers (`/ask private …`) are ephemeral.

In the stream, Claude's text shows as it is written (`bot/slack_stream_appends.py`, at the pace the
workspace's other streams leave it: chat.appendStream is Tier 4, shared by every turn in the
workspace). A 429 holds the text back for one append after its Retry-After; another refusal
(msg_too_long…) ends the stream, and the answer comes whole as a message below it.

Every call is bounded (`bot/slack_client.py`). Progress — the status, the stream's start, its task
updates and text while Claude writes, the status message's edits — is decoration: it waits at most
PROGRESS_TIMEOUT_S, and the first one Slack does not answer ends progress for the turn (one log line;
the turn goes on, and its answer comes whole at the end). The answer waits SEND_TIMEOUT_S; one that
does not reach Slack is one log line saying whose answer was lost, where, and why (`lost`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.models.messages.chunk import TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_blocks
from bot import slack_render as render
from bot.slack_answer import footer_only, post_answer
from bot.slack_client import SlackCallFailed, cannot_post_here, failure_words, quick, slack_error
from bot.slack_files import share_file
from bot.slack_revoked import locked_out, token_refused
from bot.slack_status import THINKING, ThreadStatus
from bot.slack_status_message import StatusMessage
from bot.slack_stream import render_parts, task_card
from bot.slack_stream_appends import StreamAppends
from bot.slack_target import SlackTarget, privately, to_dm
from bot.transcript import WAITING, WORKING, Change, StepLine, Transcript
from core.events import AnswerDelta, ArtifactReady, NobodyListening, Thinking, TurnEvent, TurnFinished

log = logging.getLogger("datathread.slack")

WORKING_LINE = f":hourglass_flowing_sand: {WORKING}"
CONTINUED = "_(Slack stopped taking this message: the answer follows below.)_"


class SlackProgress:
    """An EventSink for one turn in one Slack thread."""

    def __init__(
        self,
        client: AsyncWebClient,
        target: SlackTarget,
        read_file,
        *,
        min_update_s: float = 1.0,
        on_stream: Callable[[str], Awaitable[None]] | None = None,
    ):
        self.client = client
        self.on_stream = on_stream  # told the stream's ts once it starts (for whoever ends it if we die)
        self.quick = quick(client)  # progress: decoration, a shorter bound
        self.target = target
        self.read_file = read_file  # async (ArtifactReady) -> bytes
        self.mode = "ephemeral" if target.private else "stream"
        self.stream_ts: str | None = None
        self.status = ThreadStatus(client, target)  # "is thinking…", and the shared files' fetch's
        self.transcript = Transcript()
        self.notes = self.transcript.notes
        self.status_message = StatusMessage(  # the fallback's, where Slack refuses streaming
            self.quick,
            self.transcript,
            min_update_s=min_update_s,
            failed=self._progress_failed,
            stopped=lambda: self.no_progress,
            left=self._moved_out,
        )
        self.appends = StreamAppends(  # the text and task cards, while the turn runs
            client, target, live=self._live, failed=self._progress_failed, refused=self._abandon_stream
        )
        self.no_progress = False  # Slack did not answer a progress call: no more of them this turn
        self.lost = ""  # why the answer did not reach Slack, if it did not

    async def __call__(self, event: TurnEvent) -> None:
        try:
            await self._on(event)
        except SlackClientError as exc:  # Slack trouble must not abort the turn; the log says why
            if isinstance(event, TurnFinished):  # the one line that says a person got no answer
                self.lost, t = failure_words(exc), self.target
                where = f"{t.user_id} in {t.channel} (thread {t.thread_ts or '-'}, turn {event.turn_id})"
                log.warning("slack: the answer for %s did not reach Slack: %s", where, self.lost)
            else:
                log.warning("slack progress: %s failed: %s", event.kind, failure_words(exc))

    def _live(self) -> str | None:
        """The stream's ts while progress goes into it."""
        return self.stream_ts if self.mode == "stream" and not self.no_progress else None

    def _progress_failed(self, exc: SlackCallFailed) -> None:
        if not self.no_progress:
            where = f"{self.target.channel} (thread {self.target.thread_ts or '-'})"
            log.warning("slack: no more progress updates this turn in %s: %s", where, exc)
        self.no_progress = True

    async def _on(self, event: TurnEvent) -> None:
        if self.target.unheard and isinstance(event, Thinking):
            raise NobodyListening(self.target.unheard)
        if isinstance(event, AnswerDelta):
            if self._live():  # otherwise the fallback message or the stream's end shows it whole
                await self.appends.add(event)
            return
        was_waiting = self.transcript.waiting
        change = self.transcript.apply(event)
        if change is Change.WAITING or was_waiting != self.transcript.waiting:
            await self._wait_shown(self.transcript.waiting)
        if change is Change.STARTED:
            await self._start()
        elif change is Change.STEP and self.transcript.last is not None:
            await self._step(self.transcript.last)
        elif change is Change.ARTIFACT:
            await self._upload(event)  # type: ignore[arg-type]
        elif change is Change.FINISHED:
            try:
                await self._finish(event)  # type: ignore[arg-type]
            finally:
                self.appends.pace.ended()
                await self.status.settle()  # one set after the reply: "is fetching…" when stopped

    # --- progress ------------------------------------------------------------------------------
    async def _start(self) -> None:
        t = self.target
        try:  # a thread's status only: a private answer or a slash command's has no thread ("")
            await self.status.own(THINKING)
        except SlackCallFailed as exc:
            self._progress_failed(exc)
        if self.mode == "stream" and self.no_progress:
            self.mode = "update"  # no status message either: the answer comes as messages
        if self.mode != "stream":
            return
        try:
            resp = await self.quick.chat_startStream(
                channel=t.channel,
                thread_ts=t.thread_ts,
                recipient_team_id=t.team_id,
                recipient_user_id=t.user_id,
                task_display_mode="timeline",
            )
            self.stream_ts = resp["ts"]
            self.appends.pace.started(self.stream_ts)
            self.status.answered()
            if self.on_stream is not None:
                await self.on_stream(self.stream_ts)
        except SlackCallFailed as exc:
            self.mode = "update"
            self._progress_failed(exc)
        except SlackApiError as exc:
            if cannot_post_here(exc):
                return await self._answer_privately(exc)
            if token_refused(exc):  # so would every other call be
                return self._locked_out(exc, "chat.startStream")
            why = locked_out(exc, "chat.startStream") or slack_error(exc)  # a missing scope, named
            log.info("streaming refused (%s); falling back to chat.update", why)
            self.mode = "update"
            try:
                await self._post_status(":hourglass_flowing_sand: Working on it…")
            except SlackApiError as refused:
                if locked_out(refused, "chat.postMessage"):
                    return self._locked_out(refused, "chat.postMessage")
                if not cannot_post_here(refused):
                    raise
                await self._answer_privately(refused)

    def _locked_out(self, refused: SlackApiError, method: str) -> None:
        """Slack takes no message of the bot's (its token, or a scope the app lacks): nobody can be
        answered, so the turn stops before its first model call, with one ERROR saying what to do."""
        t, todo = self.target, locked_out(refused, method)
        log.error("slack: %s in %s gets no answer, stopping the turn: %s", t.user_id, t.channel, todo)
        why = (
            f"Slack refuses this app's messages ({slack_error(refused)}): an admin needs to fix its install."
        )
        self.target, self.mode = replace(t, unheard=why), "ephemeral"

    async def _answer_privately(self, refused: SlackApiError) -> None:
        self.target, self.mode = await privately(self.quick, self.target, refused, WORKING_LINE), "ephemeral"
        self.notes.append(f"I can't post here ({self.target.refused_here}), so only you can see this answer.")

    async def _wait_shown(self, waiting: bool) -> None:
        """While the thread's previous question is answered, a task card says this one waits (the
        stream sat empty until then); done once its own work starts. The status message says it too."""
        if self.no_progress:
            return
        if self.mode == "stream" and self.stream_ts:
            status = "in_progress" if waiting else "complete"
            await self.appends.card(TaskUpdateChunk(id="waiting", title=WAITING, status=status))
        if self.mode == "update":
            self.status_message.update()

    async def _step(self, line: StepLine) -> None:
        if self.no_progress:
            return
        if self.mode == "stream" and self.stream_ts:
            self.appends.text.close()  # a step runs: the text before it is complete, and shows first
            await self.appends.send()
            await self.appends.card(task_card(line))
        if self.mode == "update":
            self.status_message.update()

    async def _abandon_stream(self, refused: SlackApiError) -> None:
        if cannot_post_here(refused):  # removed from the channel mid-turn, or it was archived
            return await self._moved_out(refused)
        await self._stop_abandoned()
        try:
            await self._post_status(WORKING_LINE)
        except SlackApiError as exc:
            if not cannot_post_here(exc):
                raise
            await self._moved_out(exc)

    async def _moved_out(self, refused: SlackApiError) -> None:
        """The channel stopped taking the bot's messages mid-turn: the asker is told by DM and the
        answer follows there (`to_dm`); where that is refused too, the turn stops at its next model
        call (`_on`), as when nobody can be told at its start."""
        if self.mode == "ephemeral":
            return
        ts, self.stream_ts, self.mode = self.stream_ts, None, "ephemeral"
        self.status_message.cancel()
        self.target = await to_dm(self.quick, self.target, refused)
        if ts:  # refused too, most likely; bounded either way
            self.appends.pace.ended()
            with contextlib.suppress(SlackCallFailed, SlackApiError):
                await self.quick.chat_stopStream(channel=self.target.channel, ts=ts)

    async def _stop_abandoned(self, note: str | None = CONTINUED) -> None:
        """Close the stream Slack stopped taking (left open, it was "is typing…" for good) before the
        answer comes another way."""
        ts, self.mode, self.stream_ts = self.stream_ts, "update", None
        self.appends.pace.ended()
        for said in dict.fromkeys((note, None)) if ts else ():  # the note may be refused as the text was
            with contextlib.suppress(SlackCallFailed, SlackApiError):  # bounded; the answer comes anyway
                await self.quick.chat_stopStream(channel=self.target.channel, ts=ts, markdown_text=said)
                return

    async def _post_status(self, text: str) -> None:
        """The status message the fallback edits (progress: without it, the answer comes as messages)."""
        if await self.status_message.post(self.target, text):
            self.status.answered()

    # --- files ---------------------------------------------------------------------------------
    async def _upload(self, artifact: ArtifactReady) -> None:
        t = self.target
        if note := await share_file(
            self.client,
            artifact,
            self.read_file,
            channel=t.channel,
            thread_ts=t.thread_ts,
            private=t.private,
            refused_here=t.refused_here,
        ):
            self.notes.append(note)

    # --- the end -------------------------------------------------------------------------------
    async def _finish(self, done: TurnFinished) -> None:
        self.status_message.cancel()
        if self.target.unheard:  # said in the log when it was found; Slack would refuse this too
            return  # (no text pending: an unheard turn answers privately, and private answers don't stream)
        await self.appends.settle(streaming=self.mode == "stream" and bool(self.stream_ts))
        body = self.transcript.answer
        if self.notes:
            body = f"{body}\n\n" + "\n".join(f"_{n}_" for n in self.notes)
        # No "Export notebook" on private answers: the export would upload the private session in the channel.
        with_export = not self.target.private
        footer = (
            slack_blocks.footer_blocks(
                done.turn_id,
                asdict(done.stats),
                receipt=done.receipt,
                with_export=with_export,
                schedulable=done.schedulable,  # the core's word: not when it read a shared file
            )
            if done.ok and done.receipt is not None  # help has none: its buttons could only say "no longer"
            else []
        )
        failure, kept = self.transcript.failure, body if self.transcript.answer else ""
        if failure is not None:  # after a whole answer (its store failed), both are said
            body = slack_blocks.failure_text(failure.message, failure.error_id)
        both = f"{kept}\n\n{body}" if failure and kept else body  # unless the stream has the answer's words
        if self.mode == "stream" and self.stream_ts:
            cards = [task_card(line) for line in self.transcript.steps.values()]
            await self.appends.last_cards(self.stream_ts, cards)
        if self.mode == "stream" and self.stream_ts:
            try:
                async with self.appends.lock:
                    return await self._finish_stream(body if self.appends.text.sent else both, footer)
            except _Unstopped as exc:  # the whole answer is in the stream: only the footer comes below
                log.info("stream stop refused (%s); the footer comes as a message", exc.error)
                await self._stop_abandoned(note=None)
                alone = footer_only(footer, self.transcript.receipt())
                return await post_answer(self.client, self.target, alone, mode=self.mode, status_ts=None)
            except (SlackApiError, SlackCallFailed) as exc:  # refused, or taken and never answered
                log.info("stream finish failed (%s); posting the answer instead", failure_words(exc))
                await self._stop_abandoned()
                self.status_message.ts = None
        await self._finish_messages(both, footer)

    async def _finish_stream(self, body: str, footer: list[dict]) -> None:
        chunks, text = render.stream_chunks(body), self.appends.text
        if text.sent:  # the text is on screen up to a point: the stream goes on from there
            text.close()
            failure = self.transcript.failure
            notes = "\n".join(f"_{n}_" for n in self.notes)
            # a failure: the words received so far stay (they were Claude's), then the sentence
            rest = text.rest(self.transcript.answer) if failure is None else text.take()
            extra = render_parts([body if failure is not None else "", notes])
            chunks = render.split_rendered(rest + (f"\n\n{extra}" if extra else ""), render.STREAM_LIMIT)
        for chunk in chunks:
            await self.client.chat_appendStream(
                channel=self.target.channel, ts=self.stream_ts, markdown_text=chunk
            )
        try:
            await self.client.chat_stopStream(
                channel=self.target.channel, ts=self.stream_ts, blocks=footer or None
            )
        except SlackApiError as exc:  # refused after the whole answer was appended: not to be sent twice
            raise _Unstopped(slack_error(exc)) from exc

    async def _finish_messages(self, body: str, footer: list[dict]) -> None:
        messages = render.answer_messages(body, footer)
        try:
            await post_answer(
                self.client, self.target, messages, mode=self.mode, status_ts=self.status_message.ts
            )
        except SlackApiError as exc:  # the bot removed (the channel archived) while it answered
            if self.mode == "ephemeral" or not cannot_post_here(exc):
                raise
            await self._moved_out(exc)
            if self.target.unheard:
                raise
            await post_answer(self.client, self.target, messages, mode=self.mode, status_ts=None)


class _Unstopped(Exception):
    """chat.stopStream refused after every chunk of the answer was appended."""

    def __init__(self, error: str | None):
        super().__init__(error)
        self.error = error
