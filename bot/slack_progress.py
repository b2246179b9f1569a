"""The Slack EventSink: shows a turn's progress in the thread and posts its answer and files.

Preferred path: a streamed reply (https://docs.slack.dev/messaging/sending-and-scheduling-messages#text-streaming)
whose task updates show each tool step, the answer streamed as Markdown, and the footer as blocks on
`chat.stopStream`; `assistant.threads.setStatus` shows "is thinking…" meanwhile. Where streaming is
refused (older plans, GovSlack, API errors) it falls back to one status message edited with
`chat.update`, at most once per `min_update_s` (chat.update is a Tier 3 method:
https://docs.slack.dev/apis/web-api/rate-limits). Private answers (`/ask private …`) are ephemeral.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict, dataclass

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot import slack_render as render
from core.events import (
    AnswerReady,
    ArtifactReady,
    StepFinished,
    StepRecord,
    StepStarted,
    Thinking,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)

log = logging.getLogger("datathread.slack")

UPLOAD_LIMIT_BYTES = 200 * 1024 * 1024  # well under Slack's 1 GB; bigger results belong in the warehouse


@dataclass(frozen=True)
class SlackTarget:
    """Where a turn answers: the channel and thread, and who asked (recipient of the stream)."""

    channel: str
    thread_ts: str
    team_id: str
    user_id: str
    private: bool = False
    # A slash command's response_url: answers the person even where the bot is not a member
    # (https://docs.slack.dev/interactivity/handling-user-interaction#message_responses).
    response_url: str = ""


class SlackProgress:
    """An EventSink for one turn in one Slack thread."""

    def __init__(self, client: AsyncWebClient, target: SlackTarget, read_file, *, min_update_s: float = 1.0):
        self.client = client
        self.target = target
        self.read_file = read_file  # async (ArtifactReady) -> bytes
        self.min_update_s = min_update_s
        self.mode = "ephemeral" if target.private else "stream"
        self.stream_ts: str | None = None
        self.status_ts: str | None = None
        self.lines: dict[str, str] = {}
        self.titles: dict[str, str] = {}
        self.notes: list[str] = []
        self.answer = ""
        self.failure: TurnFailed | None = None
        self._last_update = 0.0
        self._pending: asyncio.Task | None = None

    async def __call__(self, event: TurnEvent) -> None:
        try:
            await self._on(event)
        except SlackClientError as exc:  # Slack trouble must not abort the turn; the log says why
            log.warning("slack progress: %s failed: %s", event.kind, exc)

    async def _on(self, event: TurnEvent) -> None:
        if isinstance(event, TurnStarted):
            await self._start()
        elif isinstance(event, Thinking) and event.text != "Thinking…":
            self.lines.setdefault(f"say-{len(self.lines)}", f"_{render.inert(event.text)}_")
        elif isinstance(event, StepStarted):
            self.titles[event.step_id] = event.title
            await self._step(event.step_id, event.title, "in_progress", details=_brief(event.detail))
        elif isinstance(event, StepFinished):
            rec = event.record
            title = self.titles.get(rec.step_id) or _title(rec)
            await self._step(rec.step_id, title, "complete" if rec.ok else "error", output=step_outcome(rec))
        elif isinstance(event, ArtifactReady):
            await self._upload(event)
        elif isinstance(event, AnswerReady):
            self.answer = event.text
        elif isinstance(event, TurnFailed):
            self.failure = event
        elif isinstance(event, TurnFinished):
            await self._finish(event)

    # --- progress ------------------------------------------------------------------------------
    async def _start(self) -> None:
        t = self.target
        with contextlib.suppress(SlackClientError):  # only AI-app threads accept a status
            await self.client.assistant_threads_setStatus(
                channel_id=t.channel, thread_ts=t.thread_ts, status="is thinking…"
            )
        if self.mode != "stream":
            return
        try:
            resp = await self.client.chat_startStream(
                channel=t.channel,
                thread_ts=t.thread_ts,
                recipient_team_id=t.team_id,
                recipient_user_id=t.user_id,
                task_display_mode="timeline",
            )
            self.stream_ts = resp["ts"]
        except SlackApiError as exc:
            log.info("streaming refused (%s); falling back to chat.update", exc.response.get("error"))
            self.mode = "update"
            resp = await self.client.chat_postMessage(
                channel=t.channel, thread_ts=t.thread_ts, text=":hourglass_flowing_sand: Working on it…"
            )
            self.status_ts = resp["ts"]

    async def _step(
        self, step_id: str, title: str, status: str, *, details: str = "", output: str = ""
    ) -> None:
        title, details, output = render.inert(title), render.inert(details), render.inert(output)
        if self.mode == "stream" and self.stream_ts:
            chunk = {"type": "task_update", "id": step_id, "title": title, "status": status}
            chunk.update({k: v for k, v in (("details", details), ("output", output)) if v})
            try:
                await self.client.chat_appendStream(
                    channel=self.target.channel, ts=self.stream_ts, chunks=[chunk]
                )
            except SlackApiError as exc:
                log.info("stream append refused (%s); switching to chat.update", exc.response.get("error"))
                await self._abandon_stream()
        icon = {"in_progress": ":hourglass_flowing_sand:", "complete": ":white_check_mark:", "error": ":x:"}[
            status
        ]
        self.lines[step_id] = f"{icon} {title}" + (f" — {output}" if output else "")
        if self.mode == "update":
            self._schedule_update()

    async def _abandon_stream(self) -> None:
        self.mode, self.stream_ts = "update", None
        resp = await self.client.chat_postMessage(
            channel=self.target.channel,
            thread_ts=self.target.thread_ts,
            text=":hourglass_flowing_sand: Working on it…",
        )
        self.status_ts = resp["ts"]

    def _schedule_update(self) -> None:
        if self._pending is None or self._pending.done():
            self._pending = asyncio.create_task(self._flush_status())

    async def _flush_status(self) -> None:
        wait = self._last_update + self.min_update_s - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last_update = time.monotonic()
        text = ":hourglass_flowing_sand: Working on it…\n" + "\n".join(self.lines.values())
        with contextlib.suppress(SlackClientError):
            await self.client.chat_update(channel=self.target.channel, ts=self.status_ts, text=text[:3000])

    # --- files ---------------------------------------------------------------------------------
    async def _upload(self, artifact: ArtifactReady) -> None:
        if self.target.private:
            self.notes.append(
                f"`{artifact.name}` isn't shared in private answers; ask without `private` to get it."
            )
            return
        if artifact.size > UPLOAD_LIMIT_BYTES:
            self.notes.append(
                f"`{artifact.name}` is {render.format_bytes(artifact.size)}, too large to upload "
                f"(limit {render.format_bytes(UPLOAD_LIMIT_BYTES)}). Ask for a smaller extract."
            )
            return
        try:
            # Uploaded as is: any conversion (parquet -> CSV) happens inside the sandbox (core/tools.py attach_file).
            await self.client.files_upload_v2(
                channel=self.target.channel,
                thread_ts=self.target.thread_ts,
                file=await self.read_file(artifact),
                filename=artifact.name,
                title=artifact.title or artifact.name,
            )
        except (SlackClientError, OSError, ValueError) as exc:
            log.warning("upload of %s failed: %s", artifact.name, exc)
            self.notes.append(f"I couldn't upload `{artifact.name}` ({_why(exc)}).")

    # --- the end -------------------------------------------------------------------------------
    async def _finish(self, done: TurnFinished) -> None:
        if self._pending and not self._pending.done():
            self._pending.cancel()
        body = self.answer
        if self.notes:
            body = f"{body}\n\n" + "\n".join(f"_{n}_" for n in self.notes)
        # No "Export notebook" on private answers: the export would upload the private session in the channel.
        with_export = not self.target.private
        footer = (
            render.footer_blocks(done.turn_id, asdict(done.stats), with_export=with_export) if done.ok else []
        )
        if self.failure is not None:
            body = render.failure_text(self.failure.message, self.failure.error_id)
        if self.mode == "stream" and self.stream_ts:
            try:
                return await self._finish_stream(body, footer)
            except SlackApiError as exc:
                log.info("stream finish refused (%s); posting the answer instead", exc.response.get("error"))
                self.mode, self.status_ts = "update", None
        await self._finish_messages(body, footer)

    async def _finish_stream(self, body: str, footer: list[dict]) -> None:
        for chunk in render.stream_chunks(body):
            await self.client.chat_appendStream(
                channel=self.target.channel, ts=self.stream_ts, markdown_text=chunk
            )
        await self.client.chat_stopStream(
            channel=self.target.channel, ts=self.stream_ts, blocks=footer or None
        )

    async def _finish_messages(self, body: str, footer: list[dict]) -> None:
        t = self.target
        for n, msg in enumerate(render.answer_messages(body, footer)):
            if self.mode == "ephemeral" and t.response_url:
                await AsyncWebhookClient(t.response_url, session=self.client.session).send(
                    response_type="ephemeral",
                    replace_original=False,
                    text=msg.get("text", ""),
                    blocks=msg.get("blocks"),
                )
            elif self.mode == "ephemeral":
                await self.client.chat_postEphemeral(channel=t.channel, user=t.user_id, **msg)
            elif n == 0 and self.status_ts:
                await self.client.chat_update(channel=t.channel, ts=self.status_ts, **msg)
            else:
                await self.client.chat_postMessage(channel=t.channel, thread_ts=t.thread_ts, **msg)


def step_outcome(record: StepRecord) -> str:
    """One line per finished step: rows, bytes scanned and time, or the error in brief."""
    if not record.ok:
        return _brief(record.error or record.summary, 150) or "failed"
    parts = []
    if record.rows is not None:
        parts.append(f"{record.rows:,} rows")
    if record.bytes_scanned:
        parts.append(f"{render.format_bytes(record.bytes_scanned)} scanned")
    parts.append(f"{record.duration_s:.1f} s")
    return " · ".join(parts)


def _title(record: StepRecord) -> str:
    return {
        "list_tables": "Listing tables",
        "describe_table": "Reading a table's schema",
        "query_warehouse": "Querying the warehouse",
        "run_sql": "Running SQL on saved results",
        "run_python": "Running Python",
        "attach_file": "Attaching a file",
    }.get(record.tool, record.tool)


def _brief(text: str, limit: int = 180) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _why(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error", "Slack refused it"))
    return type(exc).__name__
