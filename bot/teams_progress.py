"""Rendering one turn's events into a Teams conversation: typing, one progress card updated in place,
charts inline, CSVs as file-consent cards (personal chat) or expiring links (channels, group chats),
then the answer with its actions — or a short failure message with an error id.

The answer's text shows while Claude writes it. In a personal chat through Teams' streaming protocol
(typing activities with a `streaminfo` entity: `streamType` streaming, a growing `streamSequence`,
the `streamId` Teams gave the first one; each carries all the text so far, and the answer message
closes the stream as `final`). Teams streams only in one-on-one chats, so in channels and group chats
the text so far goes on the progress card, edited in place. Either way at most one update per
PROGRESS_MIN_INTERVAL_S: Teams throttles bots that post or edit faster.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, ConversationReference, Entity

from bot import teams_render as render
from bot.files import FileLinks
from bot.transcript import Change, StepLine, Throttle, Transcript
from core.events import AnswerDelta, ArtifactReady, TurnEvent, TurnFinished
from core.thread import Threads

log = logging.getLogger("datathread.teams")

MAX_INLINE_IMAGE = 1_000_000  # Teams shows base64 images up to about 1 MB
PROGRESS_MIN_INTERVAL_S = 1.0  # Teams throttles bots that edit a message many times a second


class StreamInfo(Entity):
    """The `streaminfo` entity of Teams' streaming protocol (botbuilder's Entity keeps only `type`)."""

    _attribute_map = {
        "type": {"key": "type", "type": "str"},
        "stream_id": {"key": "streamId", "type": "str"},
        "stream_type": {"key": "streamType", "type": "str"},
        "stream_sequence": {"key": "streamSequence", "type": "int"},
    }

    def __init__(self, *, stream_type: str, stream_id: str = "", stream_sequence: int | None = None):
        super().__init__(type="streaminfo")
        self.stream_type, self.stream_id, self.stream_sequence = (
            stream_type,
            stream_id or None,
            stream_sequence,
        )


@dataclass
class TeamsOut:
    """Sends and edits activities in the one conversation a question came from (connector client)."""

    connector: object  # botframework.connector.aio.ConnectorClient
    reference: ConversationReference

    def _address(self, activity: Activity) -> Activity:
        TurnContext.apply_conversation_reference(activity, self.reference)
        activity.reply_to_id = None  # post into the conversation (a channel thread is its own id)
        return activity

    async def send(
        self, text: str = "", *, attachments: list[dict] | None = None, entities: list | None = None
    ) -> str:
        """Post a message (Markdown text and/or attachments); returns its activity id."""
        activity = Activity(type=ActivityTypes.message, text=text or None, text_format="markdown")
        if attachments:
            activity.attachments = attachments
        if entities:
            activity.entities = entities
        response = await self.connector.conversations.send_to_conversation(  # type: ignore[attr-defined]
            self.reference.conversation.id, self._address(activity)
        )
        return getattr(response, "id", "") or ""

    async def update(self, activity_id: str, *, attachments: list[dict], text: str = "") -> None:
        """Edit a message we sent, in place."""
        activity = Activity(
            type=ActivityTypes.message, id=activity_id, text=text or None, attachments=attachments
        )
        await self.connector.conversations.update_activity(  # type: ignore[attr-defined]
            self.reference.conversation.id, activity_id, self._address(activity)
        )

    async def stream(self, text: str, *, sequence: int, stream_id: str = "") -> str:
        """One streaming update: all the text so far; the first one's id is the stream's id."""
        info = StreamInfo(stream_type="streaming", stream_id=stream_id, stream_sequence=sequence)
        activity = Activity(type=ActivityTypes.typing, text=text, entities=[info])
        response = await self.connector.conversations.send_to_conversation(  # type: ignore[attr-defined]
            self.reference.conversation.id, self._address(activity)
        )
        return getattr(response, "id", "") or ""

    async def typing(self) -> None:
        """Show 'datathread is typing…' while the first step starts."""
        await self.connector.conversations.send_to_conversation(  # type: ignore[attr-defined]
            self.reference.conversation.id, self._address(Activity(type=ActivityTypes.typing))
        )


MARKS = {"running": "⏳", "done": "✅", "failed": "⚠️"}


@dataclass
class TeamsSink:
    """An EventSink for `Analyst.handle` that draws the turn's transcript into Teams."""

    threads: Threads
    links: FileLinks
    out: TeamsOut
    personal: bool
    transcript: Transcript = field(default_factory=Transcript)
    throttle: Throttle = field(default_factory=lambda: Throttle(PROGRESS_MIN_INTERVAL_S))
    progress_id: str = ""
    streamed: str = ""  # the model's text so far, a paragraph per model call
    shown: str = ""  # what the last streaming update (or progress card) showed of it
    call: int = 0
    stream_id: str = ""
    sequence: int = 0
    no_stream: bool = False  # Teams refused a streaming update: stop trying for this turn

    async def __call__(self, event: TurnEvent) -> None:
        try:
            await self._on(event)
        except Exception:  # rendering must never break the turn itself
            log.exception("teams: could not render %s", event.kind)

    async def _on(self, event: TurnEvent) -> None:
        if isinstance(event, AnswerDelta):
            await self._stream(event)
            return
        change = self.transcript.apply(event)
        if change in (Change.THINKING, Change.STEP):
            await self._show_progress()
        elif change is Change.ARTIFACT:
            await self._deliver(event)  # type: ignore[arg-type]
        elif change is Change.FINISHED:
            await self._finish(event)  # type: ignore[arg-type]

    async def _show_progress(self, *, force: bool = False, answer: str = "") -> None:
        lines = [progress_line(row) for row in self.transcript.rows() if isinstance(row, StepLine)]
        card = render.progress_card(lines, status=self.transcript.status(), answer=answer)
        if not self.progress_id:
            self.progress_id = await self.out.send(attachments=[card])
        elif force or self.throttle.wait_s() == 0:
            await self.out.update(self.progress_id, attachments=[card])
        else:
            return
        self.throttle.mark()

    async def _stream(self, delta: AnswerDelta) -> None:
        """Collect the text; show it when the throttle allows (the final answer shows all of it)."""
        if delta.call != self.call and self.streamed:
            self.streamed += "\n\n"
        self.call, self.streamed = delta.call, self.streamed + delta.text
        text = render.inert(self.streamed)  # escaping per character: each update extends the last
        if self.personal:  # one streaming update is one activity: the Bot Connector caps its size
            text = render.stream_prefix(text)
        if text.strip() == self.shown.strip() or self.throttle.wait_s() > 0:
            return
        if self.personal and not self.no_stream:
            self.sequence += 1
            self.throttle.mark()
            try:
                first = await self.out.stream(text, sequence=self.sequence, stream_id=self.stream_id)
            except Exception as exc:  # refused (tenant policy, an old client): the answer still comes whole
                log.info("teams: streaming refused (%s); the answer comes when it is done", exc)
                self.no_stream = True
                return
            self.stream_id = self.stream_id or first
        elif not self.personal:
            await self._show_progress(answer=text)
        self.shown = text

    async def _deliver(self, artifact: ArtifactReady) -> None:
        if artifact.mime.startswith("image/") and artifact.size <= MAX_INLINE_IMAGE:
            data = await self.threads.read_artifact(artifact)
            await self.out.send(
                artifact.title, attachments=[render.image_attachment(artifact.name, data, artifact.mime)]
            )
        elif self.personal and not artifact.mime.startswith("image/"):
            try:  # the size of the bytes the upload will send: a CSV's formula cells are made safe first
                size = len(await self.threads.read_artifact(artifact))
            except (OSError, ValueError) as exc:
                await self.out.send(f"I couldn't offer {render.inert(artifact.name)}: {exc}.")
                return
            context = self.links.signer.params(artifact.session_id, artifact.path)
            context.update(session_id=artifact.session_id, path=artifact.path)
            await self.out.send(attachments=[render.file_consent_card(artifact.name, size, context)])
        else:
            url = await self.links.download_link(artifact.session_id, artifact.path)
            ttl = self.links.settings.link_ttl_seconds
            await self.out.send(render.link_text(artifact.title or artifact.name, url, ttl))

    async def _finish(self, event: TurnFinished) -> None:
        if self.progress_id:
            try:
                await self._show_progress(force=True)
            except Exception as exc:  # a last progress edit refused (throttled) must not cost the answer
                log.warning("Teams refused the last progress update: %s", exc)
        # The message that ends a turn also closes its stream, if one was started.
        final = [StreamInfo(stream_type="final", stream_id=self.stream_id)] if self.stream_id else None
        failure = self.transcript.failure
        if failure is not None:
            await self._send_final(final, render.failure_text(failure.message, failure.error_id))
            return
        text, tables = render.to_teams_markdown(self.transcript.answer or "(no answer)")
        card = render.answer_card(
            event.turn_id, tables, self.transcript.receipt(), schedulable=not self.personal
        )
        # A long answer goes out in several messages, the first closing the stream, the card on the last.
        first, *rest = render.split_message(text)
        await self._send_final(final, first, attachments=None if rest else [card])
        for n, part in enumerate(rest, start=1):
            await self.out.send(part, attachments=[card] if n == len(rest) else None)

    async def _send_final(self, final: list | None, text: str, **extra) -> None:
        """The answer (or failure) always arrives: if Teams refuses it as the stream's end (a stream
        open past Teams' two minutes, a throttled update), it is sent again as a plain message."""
        if final is None:
            await self.out.send(text, **extra)
            return
        try:
            await self.out.send(text, entities=final, **extra)
        except Exception as exc:  # the connector's error types vary; the answer must not be lost
            log.warning("Teams refused the stream's final message (%s); sending it as a new message", exc)
            await self.out.send(text, **extra)


def progress_line(line: StepLine) -> str:
    """One step on the progress card: its mark, title and outcome."""
    return f"{MARKS[line.status]} {line.title}" + (f" — {line.outcome}" if line.outcome else "")
