"""How a turn ends: its history saved, its record written, the person told — what the session store
does after the answer is ready bounded as a whole.

A Redis that froze as a turn ended held the person for three store calls in a row, each redis-py's
three tries of the 5 s read timeout: the history, the lock's release, the failure's record — 45 s of
silence after the answer, then "this answer was not saved" (while the frozen Redis applied the history
once it thawed), and `datathread ask` never printed the answer it had. Now everything the store does
once the answer is ready shares one deadline, `SETTLE_S`: the history is saved within it, or the save
counts as failed with its outcome unknown; the lock's release and the turn record wait only for what
is left of it and go on in the background (the lock expires anyway); and a failure is told before its
record is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from core import history as hist
from core.access import Refusal, log_refusal
from core.background import Background
from core.config import Settings
from core.erase_mark import erased_since
from core.events import EventSink, IncomingMessage, TurnFailed, TurnFinished, TurnOutcome
from core.receipt import turn_receipt
from core.redact import Redactor
from core.sessions import HeldLock, SessionStore, StoreUnavailable
from core.shared_names import read_shared_file
from core.thread_files import remove_thread_files
from core.turn_records import log_failure, turn_record
from core.turn_state import TurnState
from core.verified import VerifiedQuery
from core.warehouse import Warehouse

log = logging.getLogger("datathread.turn")
SETTLE_S = 3.0  # from the answer ready to the person told, whatever the store does meanwhile
STOPPED = "This answer was stopped before it finished. Ask again to carry on."
KEEPING_STOPPED = "Stopped while this answer was being kept, so a follow-up may not see it; ask again if so."


def unanswered_store(settings: Settings) -> str:
    """The sentence for a session store that did not take a turn's history within `SETTLE_S`."""
    if settings.redis_url:
        from core.redis_words import redis_where

        return f"Redis at {redis_where(settings.redis_url)} is not reachable: it did not answer within {SETTLE_S:g} s."
    return (
        f"The session database in {settings.home.resolve()} could not be written within {SETTLE_S:g} s: "
        "another process may hold it locked."
    )


class Deadline:
    """A point in time (`time.monotonic`) several waits share."""

    def __init__(self, seconds: float):
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


@dataclass
class TurnEnds:
    """Ends the turns of one core: `settle` a turn that ran, `fail` one that could not."""

    store: SessionStore
    redactor: Redactor
    warehouse: Warehouse
    unanswered: str  # `unanswered_store(settings)`
    settings: Settings | None = None  # for the files of a conversation reset while a turn of it ran
    _records: Background = field(default_factory=Background, init=False, repr=False)

    def record_of(
        self, message: IncomingMessage, outcome: TurnOutcome, started: float, error: str | None
    ) -> dict:
        return self.redactor.data(turn_record(message, outcome, started, error))

    async def settle(
        self,
        state: TurnState,
        message: IncomingMessage,
        outcome: TurnOutcome,
        emit: EventSink,
        *,
        held: HeldLock,
        started: float,
        error: str | None,
        example: VerifiedQuery | None = None,
    ) -> None:
        """Save a valid history and the turn record, whatever happened, then tell the surface. Raises
        StoreUnavailable when the history could not be saved within the deadline."""
        ending = Deadline(SETTLE_S)
        held.release_by = ending.at  # leaving the lock waits for what is left of it, no more
        # What the person was given, before the save: the record of a failed save carries it too.
        outcome.steps, outcome.answer, outcome.stats = state.steps, state.answer, state.stats()
        note = f"(This turn failed: {error})" if error else None
        try:
            history = await self.save_history(
                outcome.session_id, state.messages, ending, failure_note=note, since=started
            )
        except asyncio.CancelledError:  # Ctrl-C at "Saving the answer…": it was given, and went unsaid
            if state.answer:
                await emit(TurnFailed(outcome.turn_id, "", KEEPING_STOPPED))
            raise
        outcome.ok, outcome.error = error is None, error or ""
        # The id before the record, which keeps it for `audit`. A stop is no error: no id without a log line.
        outcome.error_id = outcome.error_id or ("" if error in (None, STOPPED) else uuid.uuid4().hex[:8])
        on = (state.answer, state.steps, outcome.stats, history, self.warehouse, example)
        receipt = None if error else await turn_receipt(*on)
        record = self.record_of(message, outcome, started, error)
        if receipt is not None and receipt.unsupported:  # the exported notebook flags them as the receipt did
            record["unsupported"] = list(receipt.unsupported)
        await asyncio.wait({self._record(record, quiet=False)}, timeout=ending.left())
        if error:
            await emit(TurnFailed(outcome.turn_id, outcome.error_id, error, fault=outcome.fault))
        await emit(
            TurnFinished(
                turn_id=outcome.turn_id,
                session_id=outcome.session_id,
                ok=outcome.ok,
                stats=outcome.stats,
                steps=tuple(outcome.steps),
                receipt=receipt,
                schedulable=outcome.ok and not read_shared_file(record),  # as "Schedule…" decides
            )
        )

    async def save_history(
        self,
        session_id: str,
        messages: list[dict],
        ending: Deadline | None = None,
        *,
        failure_note: str | None = None,
        since: float | None = None,
    ) -> list[dict]:
        """The one way a turn's history is saved — an answered turn's and an export's alike: repaired,
        cut to what a later request can send (`hist.for_storage`) and redacted, within the deadline
        (SETTLE_S from now without one). Returns the repaired history, whole and unredacted, for the
        receipt. The export saved its own way: a thread's history grew past every bound, unredacted.
        With `since` (the turn's start), not saved when the conversation was reset since then
        (core/erase_mark.py): the person was told it was deleted."""
        history = hist.repair(hist.strip_cache_control(messages), failure_note=failure_note)
        kept = self.redactor.data(hist.for_storage(history))
        if not await self._save(session_id, kept, ending or Deadline(SETTLE_S), since):
            log.info(
                "turn of %s: its history was not saved, the conversation was reset meanwhile", session_id
            )
            if self.settings is not None:  # what the turn wrote after the reset's deletion goes too
                await remove_thread_files(self.settings, self.store, session_id)
        return history

    async def _save(
        self, session_id: str, messages: list[dict], ending: Deadline, since: float | None
    ) -> bool:
        """The history, within the deadline; past it the write may still land (a frozen Redis applies
        it when it thaws), so the failure says the outcome is unknown. False when the conversation was
        reset since `since`: what was saved is deleted again. The mark is read after the write (reset
        writes it before it deletes, so either the reset's deletion comes after this write or this
        read sees the mark), and the write is sent before any other call: a store that froze on that
        read would otherwise never get the write a thawed Redis applies."""
        timer = asyncio.timeout(ending.left())
        try:
            async with timer:
                await self.store.save_history(session_id, messages)  # sent first: see the docstring
                if since is None or not await erased_since(self.store, session_id, since):
                    return True
                # what the turn wrote since (its metadata, the history just saved) goes as well
                await self.store.erase_sessions([session_id], turns=False)
                return False
        except TimeoutError:
            if not timer.expired():
                raise
            raise StoreUnavailable(self.unanswered, may_have_written=True) from None

    async def fail(
        self,
        outcome: TurnOutcome,
        emit: EventSink,
        text: str,
        message: IncomingMessage,
        *,
        exc: BaseException | None = None,
        log_level: int = logging.ERROR,
        detail: str = "",
        refusal: Refusal | None = None,
        store_down: bool = False,
    ) -> TurnOutcome:
        """Tell the person `text` in a failed turn, then record it (refused and failed requests belong
        in the audit trail too): waited for up to SETTLE_S, or not at all when the store has just
        failed (`store_down`), whose record goes on in the background."""
        if refusal is not None:  # expected, not a fault: no error id (see core/access.py)
            log_refusal(message, outcome.turn_id, outcome.session_id, refusal)
        else:
            outcome.error_id = log_failure(
                exc, message, outcome.turn_id, outcome.session_id, level=log_level, text=text, detail=detail
            )
        outcome.error = text
        recording = self._record(self.record_of(message, outcome, time.time(), text), quiet=True)
        retry_after_s = refusal.retry_after_s if refusal else None
        await emit(TurnFailed(outcome.turn_id, outcome.error_id, text, retry_after_s=retry_after_s))
        await emit(
            TurnFinished(
                turn_id=outcome.turn_id, session_id=outcome.session_id, ok=False, stats=outcome.stats
            )
        )
        await asyncio.wait({recording}, timeout=0 if store_down else SETTLE_S)
        return outcome

    def _record(self, record: dict, *, quiet: bool) -> asyncio.Task:
        """Write a turn record in a task of its own, which outlives the wait for it (not `close`)."""

        async def write() -> None:
            try:
                await self.store.record_turn(record)
            except Exception as exc:  # the store may be what failed: the turn's own words said so
                if not quiet:
                    log.warning("turn %s: its record was not written: %s", record.get("turn_id"), exc)

        return self._records.start(write())

    def close(self) -> None:
        """Stop the records still waiting for the store (the core is closing)."""
        self._records.cancel()
