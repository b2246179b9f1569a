"""The core's front door: one incoming message → one turn, with events for the surface.

`Analyst.handle` maps the thread to a session, checks access and rate limits, takes the session lock,
runs the tool loop over the stored history, saves a valid history and the turn record, and turns every
failure into a short human message: a fault's with an error id matching the log line, an expected
refusal's (not allowed here, over an hourly limit) without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import replace

from core.access import AccessPolicy, Refusal, rate_limited
from core.agent import TurnAborted, build_system, build_tools, retention_note, run_loop
from core.asked_when import asked_block
from core.config import Settings
from core.events import (
    AnswerReady,
    ArtifactReady,
    Confirmer,
    EventSink,
    FileFetcher,
    IncomingMessage,
    TurnEvent,
    TurnFinished,
    TurnOutcome,
    TurnStarted,
    Waiting,
)
from core.file_deletions import FileDeletions
from core.file_fetch import fetch_now, may_read, question_of, say_unread
from core.file_intake import take_in
from core.help import is_local, local_answer
from core.model import ModelClient, describe_model_error, model_fault
from core.model_budget import ModelBudgets
from core.notebook_request import is_export_request
from core.redact import Redactor
from core.runner import TurnStopped
from core.s3 import S3Source
from core.sandbox_factory import Parts, build_parts, toolset
from core.schedules_store import ScheduleBook
from core.schedules_tool import ScheduleDesk
from core.sessions import HeldLock, LockLost, LockTimeout, StoreUnavailable, session_id_for
from core.shared_names import META_KEY, shared_in, used_by, with_names
from core.thread import Threads
from core.tools import ToolContext
from core.turn_end import STOPPED, TurnEnds, unanswered_store
from core.turn_lock import NOT_STARTED, StoppedWaiting, store_failure, turn_lock
from core.turn_records import UNFINISHED, is_model_error, log_failure
from core.turn_state import LoopLimits, TurnState
from core.verified import VerifiedLibrary, curated_path, load_curated
from core.warehouse import QueryContext

log = logging.getLogger("datathread.turn")


class Analyst:
    """Runs turns. Holds no per-conversation state: everything lives in the store and workspaces."""

    def __init__(self, parts: Parts):
        self.parts = parts
        self.settings = parts.settings
        self.store = parts.store
        self.access = AccessPolicy.from_settings(parts.settings)
        self.redactor = Redactor(parts.settings.secret_values())
        s = parts.settings
        days = {"history_days": s.history_ttl_days, "audit_days": s.audit_ttl_days, "log_days": s.log_days}
        self._system = build_system(parts.warehouse.prompt_notes(), retention_note(**days))
        self._toolset = toolset(parts.settings)  # built once: the specs' bytes never change
        self._tools = build_tools(self._toolset)
        self._tools_by_name = {t.name: t for t in self._toolset}
        self._s3 = S3Source.from_settings(parts.settings)
        self._slots = asyncio.Semaphore(parts.settings.max_concurrent_turns)  # turns running at once
        dialect = parts.warehouse.dialect
        curated = load_curated(curated_path(parts.settings.table_notes), dialect)
        self.verified = VerifiedLibrary(parts.store, dialect=dialect, curated=curated)
        # How turns end (core/turn_end.py): saved, recorded and told within one deadline.
        self.ends = TurnEnds(
            parts.store, self.redactor, parts.warehouse, unanswered_store(parts.settings), parts.settings
        )
        # Which threads hold a copy of a platform's file, and its deletion there (core/file_deletions.py).
        self.file_deletions = FileDeletions(parts.store, parts.sandbox)
        # The one way surfaces reach threads, files, votes and confirmations (core/thread.py).
        self.threads = Threads(
            settings=parts.settings,
            _store=parts.store,
            _files=parts.sandbox,
            _access=self.access,
            _verified=self.verified,
            _warehouse=parts.warehouse,
        )

    @classmethod
    async def create(
        cls, settings: Settings, *, model: ModelClient | None = None, start_sandbox: bool = True
    ) -> Analyst:
        """An Analyst with every part built from settings (`start_sandbox`: see `build_parts`)."""
        return cls(await build_parts(settings, model=model, start_sandbox=start_sandbox))

    async def close(self) -> None:
        self.ends.close()
        for part in (self.parts.sandbox, self.parts.warehouse, self.parts.store, self.parts.model):
            await part.close()

    def protections(self) -> dict[str, str]:
        """What the sandbox enforces on this host, for `/healthz` and `doctor`."""
        return self.parts.sandbox.protections()

    def session_id(self, message: IncomingMessage) -> str:
        return session_id_for(message.surface, message.thread_key)

    async def handle(
        self,
        message: IncomingMessage,
        sink: EventSink,
        *,
        confirm: Confirmer | None = None,
        turn_id: str | None = None,
        fetch_files: FileFetcher | None = None,
    ) -> TurnOutcome:
        """Answer one message in its session. Never raises: failures become a TurnFailed event. The
        outcome's answer and error are redacted as its events are (`ask` printed the answer from the
        outcome, and a key the model had repeated reached the terminal that chat masked).
        `fetch_files`: the files shared with it, fetched by the surface when this turn's turn has come
        (core/file_fetch.py); the message's `files` are files already in hand."""
        outcome = await self._handle(message, sink, confirm=confirm, turn_id=turn_id, fetch=fetch_files)
        outcome.answer, outcome.error = self.redactor.text(outcome.answer), self.redactor.text(outcome.error)
        return outcome

    async def _handle(
        self,
        message: IncomingMessage,
        sink: EventSink,
        *,
        confirm: Confirmer | None,
        turn_id: str | None,
        fetch: FileFetcher | None,
    ) -> TurnOutcome:
        session_id = self.session_id(message)
        turn_id = turn_id or uuid.uuid4().hex[:12]
        with_files = may_read(message, fetch)  # a screenshot alone makes no question of `help`
        message = question_of(message, readable=with_files)  # files without words are a question too
        outcome = TurnOutcome(turn_id=turn_id, session_id=session_id, ok=False)

        async def emit(event: TurnEvent) -> None:
            event = self.redactor.event(event)  # every event, the turn's own ones too
            if isinstance(event, ArtifactReady):
                outcome.artifacts.append(event)
            await sink(event)

        await emit(TurnStarted(turn_id=turn_id, session_id=session_id, question=message.text))
        denial = self.access.check(message)
        if denial:
            return await self.ends.fail(outcome, emit, denial, message, refusal=Refusal(denial))
        local = is_local(message.text) and not with_files  # help or an empty message: no model, no lock
        exporting = is_export_request(message.text) and not with_files  # files are for a question
        if local or exporting:
            await say_unread(message, turn_id, emit)  # files refused by name: no turn reads them
        if local:
            return await self._answer_locally(message, outcome, emit)
        try:
            admin = self.access.is_admin(message.user_id)
            budgets = ModelBudgets.for_message(self.store, self.settings, message, admin=admin)
            # A spent daily budget first (refused by it, a person keeps their hourly questions; a
            # schedule does not retry it at once); an export calls no model, so none stops it.
            spent = None if exporting else await budgets.refusal()
            if limited := spent or await rate_limited(self.store, self.settings, message, admin=admin):
                outcome.at_limit = outcome.limited = True  # the asker's limits, not the question's
                return await self.ends.fail(outcome, emit, limited.text, message, refusal=limited)

            async def waiting() -> None:
                await emit(Waiting(turn_id=turn_id))

            # Session lock first, then a turn slot: a follow-up queued behind its own thread's turn
            # holds no slot, so one busy thread cannot stall everybody else's questions. Shared files
            # are fetched only then (`_drive`): in the queue in arrival order, and refused people
            # download nothing.
            lock = turn_lock(self.store, session_id, ttl_s=self.settings.lock_ttl, on_wait=waiting)
            async with lock as held, self._slots:
                if exporting:
                    await self._export(message, session_id, outcome, emit)
                else:
                    await self._run(message, session_id, outcome, emit, confirm, held, budgets, fetch)
        except StoppedWaiting:  # it never ran: say so, then let the cancellation finish the task
            await self.ends.fail(outcome, emit, NOT_STARTED, message, log_level=logging.INFO)
            raise TurnStopped from None
        except (LockLost, LockTimeout, StoreUnavailable) as exc:
            text, level, detail = store_failure(
                exc, surface=message.surface, ran=outcome.stats.model_calls > 0
            )
            down = isinstance(exc, StoreUnavailable)  # its record is not waited for: the store just failed
            await self.ends.fail(
                outcome, emit, text, message, log_level=level, detail=detail, store_down=down
            )
        except Exception as exc:  # the last line of defence: a short message, never a traceback
            await self.ends.fail(
                outcome, emit, "Something went wrong on my side while answering.", message, exc=exc
            )
        return outcome

    async def _answer_locally(
        self, message: IncomingMessage, outcome: TurnOutcome, emit: EventSink
    ) -> TurnOutcome:
        allowlist = self.access.allowlist_for(message)
        outcome.answer = await local_answer(message.text, message.surface, self.parts.warehouse, allowlist)
        outcome.ok = True
        with contextlib.suppress(StoreUnavailable):  # a thread I answered: their follow-ups need no mention
            await self.store.update_meta(
                outcome.session_id, surface=message.surface, participant=message.user_id
            )
        await emit(AnswerReady(turn_id=outcome.turn_id, text=outcome.answer))
        await emit(
            TurnFinished(turn_id=outcome.turn_id, session_id=outcome.session_id, ok=True, stats=outcome.stats)
        )
        return outcome

    async def _run(
        self,
        message: IncomingMessage,
        session_id: str,
        outcome: TurnOutcome,
        emit: EventSink,
        confirm: Confirmer | None,
        held: HeldLock,
        budgets: ModelBudgets,
        fetch: FileFetcher | None,
    ) -> None:
        started = time.time()
        prior, gap = await self.threads.history(session_id)  # gap: a note if the store let it go
        # In the audit from now on: a turn whose process dies stays there, unfinished (replaced when it settles)
        await self.store.record_turn(self.ends.record_of(message, outcome, started, UNFINISHED))
        meta = await self.store.update_meta(
            session_id,
            surface=message.surface,
            channel_id=message.channel_id,
            team_id=message.team_id,
            thread_key=list(message.thread_key),
            participant=message.user_id,
        )
        ctx = self._tool_context(message, session_id, outcome.turn_id, confirm, shared=shared_in(meta))
        q, example = await self.verified.question_blocks(session_id, message, ctx.permits)  # its examples
        # "yesterday" on the asker's calendar, "this week" in their locale
        asked = asked_block(message.user_tz, self.settings.default_tz, locale=message.user_locale)
        gone = await self.file_deletions.tell(session_id, meta)  # files deleted where they were shared
        question = {"role": "user", "content": [*q, asked, *gap, *gone]}
        state = TurnState(turn_id=outcome.turn_id, messages=[*prior, question])
        error = await self._drive(state, ctx, message, outcome, emit, budgets, fetch)
        outcome.stats = state.stats()  # what ran, for the failure's words if saving it fails
        outcome.shared_files = used_by(state.steps, ctx.query.shared)  # its schedule could never run
        if held.lost:  # another turn may have saved this session meanwhile: never overwrite it
            raise LockLost(session_id)
        await self.ends.settle(
            state, message, outcome, emit, held=held, started=started, error=error, example=example
        )
        if error == STOPPED:  # saved, recorded and told: now let the cancellation finish the task
            raise TurnStopped

    def _tool_context(
        self,
        message: IncomingMessage,
        session_id: str,
        turn_id: str,
        confirm: Confirmer | None,
        *,
        shared: tuple[str, ...] = (),
    ) -> ToolContext:
        """What the tools of this turn may use, under this conversation's allowlist and limits;
        `shared`: the files people shared in it, which no result may take the name of."""
        s = self.settings
        allowlist = self.access.allowlist_for(message)
        query = QueryContext.for_message(
            message,
            s,
            session_id=session_id,
            turn_id=turn_id,
            allowlist=allowlist,
            store=self.store,
            confirm=confirm,
            shared=shared,
        )
        return ToolContext(
            session_id=session_id,
            turn_id=turn_id,
            sandbox=self.parts.sandbox,
            warehouse=self.parts.warehouse,
            query=query,
            allowlist=allowlist,
            confirm=confirm,
            step_timeout_s=s.step_timeout,
            step_memory_mb=s.step_memory_mb,
            step_file_mb=s.step_file_mb,
            step_output_bytes=s.step_output_bytes,
            s3=self._s3,
            tools=self._tools_by_name,
            redact=self.redactor.text,
            schedules=ScheduleDesk.for_message(ScheduleBook.from_settings(self.store, s), s, message),
        )

    async def _drive(
        self,
        state: TurnState,
        ctx: ToolContext,
        message: IncomingMessage,
        outcome: TurnOutcome,
        emit: EventSink,
        budgets: ModelBudgets,
        fetch: FileFetcher | None,
    ) -> str | None:
        """Run the tool loop; returns None on success or the sentence to show people."""
        s = self.settings
        try:
            files = message.files or (await fetch_now(fetch, state.turn_id, emit) if fetch else ())
            if files:  # into the workspace, read in the sandbox, told in the question
                taken = await take_in(
                    files,
                    ctx,
                    emit,
                    limit_mb=s.shared_file_mb,
                    total_mb=s.shared_files_mb,
                    first_step=len(state.steps),
                )
                files = ()  # in the workspace now: the fetched bytes are not held for the rest of the turn
                state.steps += taken.steps
                state.messages[-1]["content"] += [taken.block] if taken.block else []
                await self._keep_shared(ctx, [name for step in taken.steps for name in step.files])
            await run_loop(
                model=self.parts.model,
                model_name=s.model,
                state=state,
                system=self._system,
                tools=self._tools,
                ctx=ctx,
                sink=emit,  # redacts every event (see handle)
                limits=LoopLimits(s.max_steps, s.max_tokens, token_budget=s.turn_token_budget),
                charge=budgets.charge,
            )
            return None
        except TurnAborted as exc:
            outcome.at_limit = True
            return str(exc)
        except asyncio.CancelledError:  # the person stopped it (Ctrl-C): keep what we have, then re-raise
            return STOPPED
        except Exception as exc:
            if is_model_error(exc):  # expected operation, not a bug: log the sentence, not a traceback
                error, level = describe_model_error(exc, message.surface), logging.WARNING
                outcome.fault = model_fault(exc)
            else:  # a bug: log the traceback; the turn so far is still saved below
                error, level = "Something went wrong on my side while answering.", logging.ERROR
            outcome.error_id = log_failure(
                exc,
                message,
                outcome.turn_id,
                ctx.session_id,
                level=level,
                text=f"{type(exc).__name__}: {error}",
            )
            return error

    async def _keep_shared(self, ctx: ToolContext, names: list[str]) -> None:
        """The workspace names of the files just taken in, kept from results' names from now on: in
        this turn's tools, and in the thread's meta for its later turns (core/shared_names.py)."""
        if not names:
            return
        ctx.query = replace(ctx.query, shared=with_names(ctx.query.shared, names))
        try:
            await self.store.update_meta(ctx.session_id, **{META_KEY: list(ctx.query.shared)})
        except StoreUnavailable as exc:  # this turn keeps them still; the save of the turn will say it
            log.warning("shared file names of %s not kept for later turns: %s", ctx.session_id, exc)

    async def _export(
        self, message: IncomingMessage, session_id: str, outcome: TurnOutcome, emit: EventSink
    ) -> None:
        started = time.time()
        outcome.answer = await self.threads.export_turn(session_id, outcome.turn_id, emit)
        history = await self.store.load_history(session_id)
        asked = {"role": "user", "content": [{"type": "text", "text": message.text}]}
        answered = {"role": "assistant", "content": [{"type": "text", "text": outcome.answer}]}
        # as a turn's is saved, and not into a conversation reset meanwhile (core/erase_mark.py)
        await self.ends.save_history(session_id, [*history, asked, answered], since=started)
        outcome.ok = True
        await self.store.record_turn(self.ends.record_of(message, outcome, started, None))
        await emit(TurnFinished(turn_id=outcome.turn_id, session_id=session_id, ok=True, stats=outcome.stats))
