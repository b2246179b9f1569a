"""Rendering one turn's events into a Teams conversation: typing, one progress card updated in place,
charts inline, CSVs as file-consent cards (personal chat) or expiring links (channels, group chats),
then the answer with its actions — or a short failure message with an error id.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, ConversationReference

from bot import teams_render as render
from bot.files import FileLinks
from core.events import (
    AnswerReady,
    ArtifactReady,
    StepFinished,
    StepStarted,
    Thinking,
    TurnEvent,
    TurnFailed,
    TurnFinished,
)
from core.thread import Threads

log = logging.getLogger("datathread.teams")

MAX_INLINE_IMAGE = 1_000_000  # Teams shows base64 images up to about 1 MB
PROGRESS_MIN_INTERVAL_S = 1.0  # Teams throttles bots that edit a message many times a second


@dataclass
class TeamsOut:
    """Sends and edits activities in the one conversation a question came from (connector client)."""

    connector: object  # botframework.connector.aio.ConnectorClient
    reference: ConversationReference

    def _address(self, activity: Activity) -> Activity:
        TurnContext.apply_conversation_reference(activity, self.reference)
        activity.reply_to_id = None  # post into the conversation (a channel thread is its own id)
        return activity

    async def send(self, text: str = "", *, attachments: list[dict] | None = None) -> str:
        """Post a message (Markdown text and/or attachments); returns its activity id."""
        activity = Activity(type=ActivityTypes.message, text=text or None, text_format="markdown")
        if attachments:
            activity.attachments = attachments
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

    async def typing(self) -> None:
        """Show 'datathread is typing…' while the first step starts."""
        await self.connector.conversations.send_to_conversation(  # type: ignore[attr-defined]
            self.reference.conversation.id, self._address(Activity(type=ActivityTypes.typing))
        )


@dataclass
class TeamsSink:
    """An EventSink for `Analyst.handle` that renders into Teams."""

    threads: Threads
    links: FileLinks
    out: TeamsOut
    personal: bool
    lines: dict[str, str] = field(default_factory=dict)
    progress_id: str = ""
    last_update: float = 0.0
    dirty: bool = False
    answer: str = ""
    failure: TurnFailed | None = None

    async def __call__(self, event: TurnEvent) -> None:
        try:
            await self._on(event)
        except Exception:  # rendering must never break the turn itself
            log.exception("teams: could not render %s", event.kind)

    async def _on(self, event: TurnEvent) -> None:
        if isinstance(event, Thinking | StepStarted | StepFinished):
            self._track(event)
            await self._show_progress()
        elif isinstance(event, ArtifactReady):
            await self._deliver(event)
        elif isinstance(event, AnswerReady):
            self.answer = event.text
        elif isinstance(event, TurnFailed):
            self.failure = event
        elif isinstance(event, TurnFinished):
            await self._finish(event)

    def _track(self, event: Thinking | StepStarted | StepFinished) -> None:
        if isinstance(event, StepStarted):
            self.lines[event.step_id] = f"⏳ {event.title}"
        elif isinstance(event, StepFinished):
            r = event.record
            title = self.lines.get(r.step_id, f"  {r.tool}")[2:]
            mark = "✅" if r.ok else "⚠️"
            self.lines[r.step_id] = f"{mark} {title} — {r.summary[:120]} ({r.duration_s:.1f} s)"
        self.dirty = True

    async def _show_progress(self, *, status: str = "Working on it…", force: bool = False) -> None:
        card = render.progress_card(list(self.lines.values()), status=status)
        if not self.progress_id:
            self.progress_id = await self.out.send(attachments=[card])
        elif force or time.monotonic() - self.last_update >= PROGRESS_MIN_INTERVAL_S:
            await self.out.update(self.progress_id, attachments=[card])
        else:
            return
        self.last_update, self.dirty = time.monotonic(), False

    async def _deliver(self, artifact: ArtifactReady) -> None:
        if artifact.mime.startswith("image/") and artifact.size <= MAX_INLINE_IMAGE:
            data = await self.threads.read_artifact(artifact)
            await self.out.send(
                artifact.title, attachments=[render.image_attachment(artifact.name, data, artifact.mime)]
            )
        elif self.personal and not artifact.mime.startswith("image/"):
            context = self.links.signer.params(artifact.session_id, artifact.path)
            context.update(session_id=artifact.session_id, path=artifact.path)
            await self.out.send(attachments=[render.file_consent_card(artifact.name, artifact.size, context)])
        else:
            url = await self.links.download_link(artifact.session_id, artifact.path)
            ttl = self.links.settings.link_ttl_seconds
            await self.out.send(render.link_text(artifact.title or artifact.name, url, ttl))

    async def _finish(self, event: TurnFinished) -> None:
        if self.progress_id:
            s = event.stats
            status = (
                f"Done — {s.steps} step{'s' if s.steps != 1 else ''} in {s.duration_s:.1f} s"
                if event.ok
                else "Stopped"
            )
            await self._show_progress(status=status, force=True)
        if self.failure is not None:
            await self.out.send(render.failure_text(self.failure.message, self.failure.error_id))
            return
        text, tables = render.to_teams_markdown(self.answer or "(no answer)")
        await self.out.send(text, attachments=[render.answer_card(event.turn_id, tables)])
