"""Rendering one turn's events into a Teams conversation: typing, one progress card updated in place,
charts and CSVs as they are made (bot/teams_files.py), then the answer with its actions — or a short failure message with an error id.
What it sends goes through `TeamsOut` (bot/teams_out.py).

The answer's text shows while Claude writes it. In a personal chat through Teams' streaming protocol
(typing activities with a `streaminfo` entity: `streamType` streaming, a growing `streamSequence`,
the `streamId` Teams gave the first one; each carries all the text so far, and the answer message
closes the stream as `final`). Teams streams only in one-on-one chats, so in channels and group chats
the text so far goes on the progress card, edited in place. Either way at most one update per
PROGRESS_MIN_INTERVAL_S: Teams throttles bots that post or edit faster.

A streamed answer has Teams' Stop button. Teams says it was pressed only by refusing the next update
(403 "Content stream was cancelled by user."): refused while the text streams, the model call ends
there and the turn keeps only the text the person saw; before each model call the text so far goes
out once more, so a Stop pressed while a step ran stops the turn before that call. Either way it is
saved as stopped and nothing more is posted — the person asked for no more of it. Teams' two-minute
streaming limit is not a Stop: the turn goes on without streaming and its answer comes as a message.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from bot import teams_render as render
from bot.files import FileLinks
from bot.teams_answer_cards import answer_cards, answer_messages
from bot.teams_connector import ConnectorFailed
from bot.teams_files import FileMessage, prepare, send_files
from bot.teams_later import AnswerCut, Rest, job_payload, lost_words, wait_s, waiting_words
from bot.teams_out import STOPPED_BY_PERSON, TIMED_OUT, StreamInfo, TeamsOut, stream_refusal
from bot.teams_votes import keep_answer_card
from bot.teams_words import receipt_lines
from bot.transcript import Change, StepLine, Throttle, Transcript
from core.analyst import STOPPED as TURN_STOPPED
from core.events import AnswerDelta, ArtifactReady, NobodyListening, Thinking, TurnEvent, TurnFinished
from core.thread import Threads

log = logging.getLogger("datathread.teams")

PROGRESS_MIN_INTERVAL_S = 1.0  # Teams throttles bots that edit a message many times a second
STOPPED_CARD = "⏹️ Stopped: you pressed Stop. Ask again to carry on."


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
    call_from: int = 0  # where the current call's text starts in `streamed`
    seen_to: int = 0  # how much of `streamed` the last streaming update that Teams took carried
    stream_id: str = ""
    sequence: int = 0
    no_stream: bool = False  # Teams refused a streaming update: stop trying for this turn
    # A progress call failed: no more this turn. Each waits up to PROGRESS_TIMEOUT_S on a silent Bot
    # Connector, and the turn waits with it; the answer is still sent.
    no_progress: bool = False
    notes: list[str] = field(default_factory=list)  # what the answer adds: files that did not arrive
    files: list[FileMessage] = field(default_factory=list)  # sent after the answer, which says "below"
    # Why nothing can reach this conversation (the bot was removed from it, or it was deleted): the
    # turn stops before its next model call instead of paying for an answer nobody will see.
    unheard: str = ""
    # The person pressed Teams' Stop on the streamed answer: the turn stops at its next model call and
    # nothing more is posted but the progress card saying so.
    stopped: bool = False
    # Hands the rest of an answer Teams throttled part-way to a `teams.rest` job (bot/teams_later.py),
    # which sends it once Teams allows, after the turn; without one, the card says what was lost.
    later: Callable[[dict], Awaitable[None]] | None = None

    @property
    def conversation(self) -> str:
        return self.out.reference.conversation.id

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, Thinking):
            await self._still_streaming()
            if self.stopped:  # saved as a turn stopped by Ctrl-C is
                raise NobodyListening(TURN_STOPPED)
            if self.unheard:
                raise NobodyListening(self.unheard)
        try:
            await self._on(event)
        except ConnectorFailed as exc:  # a file that did not arrive: said, the turn goes on
            log.warning("teams: %s did not reach conversation %s: %s", event.kind, self.conversation, exc)
            self._heard(exc)
        except Exception:  # rendering must never break the turn itself
            log.exception("teams: could not render %s", event.kind)
        if self.stopped and isinstance(event, AnswerDelta):  # Stop while this call streams: it ends here
            raise NobodyListening(TURN_STOPPED, shown=self._seen_of_call())

    async def typing(self) -> None:
        """'datathread is typing…' while the first step starts (decoration: a failure stops progress)."""
        try:
            await self.out.typing()
        except ConnectorFailed as exc:
            self._progress_failed(exc)

    def _progress_failed(self, exc: ConnectorFailed) -> None:
        if not self.no_progress:
            log.warning(
                "teams: no more progress updates this turn in conversation %s: %s", self.conversation, exc
            )
        self.no_progress = self.no_stream = True
        self._heard(exc)

    def _heard(self, exc: ConnectorFailed) -> None:
        """After a refusal that means the bot cannot post here at all (403/404: removed from the team or
        chat, the conversation deleted), nobody is listening: the turn stops at its next model call."""
        if exc.gone and not self.unheard:
            log.warning(
                "teams: stopping the turn in conversation %s: nothing reaches it (%s)", self.conversation, exc
            )
            self.unheard = f"Teams refuses my messages in this conversation ({exc.code or exc.why})."

    async def _on(self, event: TurnEvent) -> None:
        if isinstance(event, AnswerDelta):
            await self._stream(event)
            return
        change = self.transcript.apply(event)
        if change in (Change.THINKING, Change.STEP, Change.WAITING):
            await self._show_progress()
        elif change is Change.ARTIFACT:
            await self._deliver(event)  # type: ignore[arg-type]
        elif change is Change.FINISHED:
            await self._finish(event)  # type: ignore[arg-type]

    def _lines(self) -> list[str]:
        return [render.progress_line(row) for row in self.transcript.rows() if isinstance(row, StepLine)]

    async def _show_progress(self, *, force: bool = False, answer: str = "", status: str = "") -> None:
        if self.no_progress:
            return
        card = render.progress_card(self._lines(), status=status or self.transcript.status(), answer=answer)
        try:
            if not self.progress_id:
                self.progress_id = await self.out.send(attachments=[card], short=True)
            elif force or self.throttle.wait_s() == 0:
                await self.out.update(self.progress_id, attachments=[card])
            else:
                return
        except ConnectorFailed as exc:
            self._progress_failed(exc)
            return
        self.throttle.mark()

    async def _stream(self, delta: AnswerDelta) -> None:
        """Collect the text; show it when the throttle allows (the final answer shows all of it)."""
        if delta.call != self.call:
            self.streamed += "\n\n" if self.streamed else ""
            self.call_from = len(self.streamed)
        self.call, self.streamed = delta.call, self.streamed + delta.text
        if self.throttle.wait_s() > 0:  # before the escaping below, which reads the whole answer: per
            return  # token it was quadratic in the answer's length, on the serving event loop
        text = self._stream_text() if self.personal else render.inert(self.streamed)
        if text.strip() == self.shown.strip():
            return
        if self.personal and not self.no_stream:
            await self._send_stream(text)
            return
        if not self.personal:
            await self._show_progress(answer=text)
        self.shown = text

    def _stream_text(self) -> str:
        """The text so far for a streaming update: escaped per character (each update extends the
        last), within what one activity may carry (the Bot Connector caps its size)."""
        return render.stream_prefix(render.inert(self.streamed))

    async def _still_streaming(self) -> None:
        """Before a model call, the text so far once more: Teams tells of a Stop only by refusing an
        update, and one pressed while a step ran is heard now, before the call is paid for. After the
        throttle's wait (≤ 1 s): after a fast step it went out within a second of the last, and a 429
        on either ended streaming, and hearing Stop, for the rest of the turn."""
        if self.personal and self.stream_id and not (self.no_stream or self.stopped):
            await asyncio.sleep(self.throttle.wait_s())
            await self._send_stream(self._stream_text())

    async def _send_stream(self, text: str) -> None:
        self.sequence += 1
        self.throttle.mark()
        try:
            first = await self.out.stream(text, sequence=self.sequence, stream_id=self.stream_id)
        except ConnectorFailed as exc:  # the answer still comes whole, unless the person stopped it
            self._stream_refused(exc)
            return
        self.stream_id, self.shown, self.seen_to = self.stream_id or first, text, len(self.streamed)

    def _seen_of_call(self) -> str:
        """The current model call's text as far as the person saw it (the last update Teams took)."""
        return self.streamed[self.call_from : self.seen_to] if self.seen_to > self.call_from else ""

    def _stream_refused(self, exc: ConnectorFailed) -> None:
        self.no_stream = True
        if exc.status is None:  # no answer: the Bot Connector is slow or gone, not picky
            self._progress_failed(exc)
        elif (why := stream_refusal(exc)) == STOPPED_BY_PERSON:
            log.info("teams: the person pressed Stop in conversation %s: the turn stops", self.conversation)
            self.stopped = True
        elif why == TIMED_OUT:
            log.info("teams: the stream reached Teams' time limit; the answer comes when it is done")
        else:  # refused (tenant policy, an old client)
            log.info("teams: streaming refused (%s); the answer comes when it is done", exc)
            self._heard(exc)

    async def _deliver(self, artifact: ArtifactReady) -> None:
        made = await prepare(artifact, threads=self.threads, links=self.links, personal=self.personal)
        if isinstance(made, str):  # it cannot be sent: the answer says why
            self.notes.append(made)
        else:  # sent after the answer, which speaks of it as below
            self.files.append(made)

    async def _finish(self, event: TurnFinished) -> None:
        if self.unheard:  # said in the log when it was found; Teams would refuse this too
            return
        if self.stopped:  # found while it ran, or (below) by the refused end of the stream
            await self._say_stopped()
            return
        if self.progress_id:
            try:
                await self._show_progress(force=True)
            except Exception as exc:  # a last progress card that fails to render must not cost the answer
                log.warning("teams: could not draw the last progress card: %s", exc)
        failure = self.transcript.failure
        try:
            await self._send_answer(event)
            if self.stopped:  # Teams refused the stream's end: Stop was pressed after the last update
                await self._say_stopped()
                return
        except AnswerCut as cut:  # a message did not arrive: the first, for a while, or a later one
            await self._rest(cut, event)
            return
        except ConnectorFailed as exc:  # the one line that says a person got no answer, and why
            error_id = self._error_id()
            log.warning(
                "teams: the answer did not reach its conversation error_id=%s turn=%s conversation=%s: %s",
                error_id,
                event.turn_id,
                self.conversation,
                exc,
            )
            said = (
                f"⚠️ Teams did not confirm the answer, so it may not be here. If it is not, please ask "
                f"again (error id {error_id})."
                if exc.unsure  # no answer in time, or the connection closed: Teams may have posted it
                else f"⚠️ Teams did not take the answer, so it is not here. Please ask again (error id {error_id})."
            )
            await self._say_lost(said, exc)
            if exc.silent or exc.gone:  # the files would wait as long, or be refused as well
                return
        stopped = failure is not None and failure.message == TURN_STOPPED  # within the runner's grace
        await send_files(self.out, self.files, short=stopped)

    def _error_id(self) -> str:
        failure = self.transcript.failure
        return failure.error_id if failure is not None and failure.error_id else uuid.uuid4().hex[:8]

    async def _rest(self, cut: AnswerCut, event: TurnFinished) -> None:
        """Part of the answer arrived, or Teams throttled its first message: the rest (and the files)
        go to a `teams.rest` job when Teams throttled it for a while it names, and the card says it
        follows; else the card says what is missing, and the files follow as after an answer that did
        not arrive."""
        exc, error_id = cut.exc, self._error_id()
        reachable = not (exc.silent or exc.gone)  # else the files would wait as long, or be refused too
        wait = wait_s(exc) if reachable else None
        rest = Rest(cut.messages, tuple(self.files), whole=cut.whole)
        if wait is not None and self.later is not None:
            progress = (
                self.progress_id if not self.no_progress else "",
                self._lines(),
                self.transcript.status(),
            )
            try:
                await self.later(
                    job_payload(rest, turn_id=event.turn_id, wait=wait, error_id=error_id, progress=progress)
                )
            except Exception as failed:  # the store under the job queue: said as lost below
                log.warning("teams: could not hand the rest of an answer to a job: %s", failed)
            else:
                log.info(
                    "teams: Teams throttled the answer in conversation %s (%s): %s follows in %g s "
                    "error_id=%s turn=%s",
                    *(self.conversation, exc, rest.what(), wait, error_id, event.turn_id),
                )
                await self._say_lost(waiting_words(rest, wait), exc)
                return
        log.warning(
            "teams: %s did not reach its conversation error_id=%s turn=%s conversation=%s: %s",
            *(rest.what(), error_id, event.turn_id, self.conversation, exc),
        )
        await self._say_lost(
            lost_words(replace(rest, files=() if reachable else rest.files), exc, error_id), exc
        )
        if reachable:
            await send_files(self.out, self.files)

    async def _say_stopped(self) -> None:
        """The progress card says the person stopped the answer; nothing else is posted (not the rest of
        the answer, its card or its files): the stream keeps what it showed, as Teams does."""
        if self.progress_id and not self.no_progress:
            await self._show_progress(force=True, status=STOPPED_CARD)

    async def _say_lost(self, said: str, exc: ConnectorFailed) -> None:
        """The answer did not arrive: the progress card says so, where it said "Done" and nothing
        followed; without a card that can still be edited (none, or progress given up after a failed
        call), one short message does, unless the Bot Connector is silent (it would wait as long again)
        or the bot may not post here. Both failing, the log line above is all there is."""
        if self.progress_id and not self.no_progress:
            await self._show_progress(force=True, status=said)
            if not self.no_progress:
                return
        if exc.silent or exc.gone:
            return
        try:
            await self.out.send(said, short=True)
        except ConnectorFailed as exc:
            log.warning("teams: nor did the sentence saying so (conversation %s): %s", self.conversation, exc)

    async def _send_answer(self, event: TurnFinished) -> None:
        # The message that ends a turn also closes its stream, if one was started.
        final = [StreamInfo(stream_type="final", stream_id=self.stream_id)] if self.stream_id else None
        failure = self.transcript.failure
        if failure is not None and not self.transcript.answer:
            # A turn stopped by Ctrl-C or a shutdown says so within the runner's grace, short like progress
            short = failure.message == TURN_STOPPED
            said = render.failure_text(failure.message, failure.error_id) + self._notes()
            await self._send_final(final, said, short=short)
            return
        text, tables = render.to_teams_markdown(self.transcript.answer or "(no answer)")
        text += self._notes()
        receipt, receipt_words = receipt_lines(event)  # its time in each reader's own zone
        # Schedule… in channels and group chats, and only for an answer a schedule can repeat (the core
        # says: not one that read a shared file); help has no receipt, and no actions: they could
        # only say the answer is gone
        schedulable = event.schedulable and not self.personal
        cards = (
            answer_cards(event.turn_id, tables, receipt, schedulable=schedulable, receipt_words=receipt_words)
            if event.receipt is not None or tables
            else []
        )
        messages = answer_messages(text, cards)  # the first closes the stream
        if failure is not None:  # after the whole answer (its store failed): the answer stays, then why
            messages.append((render.failure_text(failure.message, failure.error_id), ()))
        (first, attachments), *rest = messages
        try:
            sent = await self._send_final(final, first, attachments=list(attachments) or None, answer=True)
        except ConnectorFailed as exc:  # throttled for a while it names: all of it follows, as a rest does
            if self.later is None or wait_s(exc) is None:
                raise
            raise AnswerCut(exc, tuple(messages), whole=True) from None
        if self.stopped:
            return
        await keep_answer_card(self.threads, event.turn_id, sent, first, attachments)  # for votes
        for i, (part, attachments) in enumerate(rest):
            try:
                sent = await self.out.send(part, attachments=list(attachments) or None, answer=True)
            except ConnectorFailed as exc:
                raise AnswerCut(exc, tuple(rest[i:])) from None
            await keep_answer_card(self.threads, event.turn_id, sent, part, attachments)

    def _notes(self) -> str:
        """The answer's notes (the core's, such as a shared file not read, made inert: they quote a
        file's name and a parser's error line, which quotes its cells; then files that did not arrive),
        in italics below it."""
        core = [render.inert(note) for note in self.transcript.notes]  # a file's name, a parser's error
        return "".join(f"\n\n_{note}_" for note in [*core, *self.notes])

    async def _send_final(self, final: list | None, text: str, **extra) -> str:
        """The answer (or failure) always arrives: if Teams refuses it as the stream's end (a stream
        open past Teams' two minutes, a throttled update), it is sent again as a plain message. Not
        when the Bot Connector did not answer: Teams may have posted it, and it would wait again; nor
        when the person pressed Stop: they asked for no more of it."""
        if final is None:
            return await self.out.send(text, **extra)
        try:
            return await self.out.send(text, entities=final, **extra)
        except ConnectorFailed as exc:
            if exc.status is None:
                raise
            if stream_refusal(exc) == STOPPED_BY_PERSON:
                log.info("teams: the person pressed Stop before the answer's end; nothing more is sent")
                self.stopped = True
                return ""
            log.warning("Teams refused the stream's final message (%s); sending it as a new message", exc)
            return await self.out.send(text, **extra)
