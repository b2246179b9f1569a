"""Turn records and failure log lines: what the audit trail keeps and what the log says about a turn.

Every fault shown to people carries an `error_id`; the log line with the same id has the details. An
expected refusal (not allowed here, over an hourly limit: core/access.py) has none.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict

from core.events import IncomingMessage, TurnOutcome

log = logging.getLogger("datathread.turn")


# A turn's record until it settles: what the audit keeps of a turn whose process died under it.
UNFINISHED = "Not finished: still running, or its process ended first (steps it ran may be missing here)."


def turn_record(message: IncomingMessage, outcome: TurnOutcome, started: float, error: str | None) -> dict:
    """The audit record of one turn: who, where, question, steps, stats, outcome (not yet redacted)."""
    return {
        "turn_id": outcome.turn_id,
        "session_id": outcome.session_id,
        "surface": message.surface,
        "team_id": message.team_id,
        "channel_id": message.channel_id,
        "user_id": message.user_id,
        "question": message.text,
        "answer": outcome.answer,
        "ok": outcome.ok,
        "error": error or "",
        "error_id": outcome.error_id,  # the id the person was shown, and the log line's ("" for a refusal)
        "started": started,
        "finished": time.time(),
        "stats": asdict(outcome.stats),
        "steps": [asdict(s) for s in outcome.steps],
        "shared_files": list(outcome.shared_files),  # a schedule of this answer could never read them
        "artifacts": [a.path for a in outcome.artifacts],
        "feedback": {},
    }


class NothingToExport(LookupError):
    """The session has no recorded turns; the message is one sentence for a person. Beside the records,
    not in core/notebook.py, so `datathread export` can say it before importing the notebook stack."""

    def __init__(self, session_id: str, *, where: str = ""):
        if where:  # the command line, which may have looked in another folder's state than meant
            super().__init__(
                f"No questions recorded under session {session_id} in {where}: `datathread audit` lists "
                "the sessions there (run export where you chatted, or set DATATHREAD_HOME)."
            )
        else:
            super().__init__(f"Session {session_id} has no recorded questions to export.")


def is_model_error(exc: Exception) -> bool:
    """An error of the model API (after the SDK's retries), as opposed to a bug of ours."""
    import anthropic

    return isinstance(exc, anthropic.AnthropicError)


def log_failure(
    exc: BaseException | None,
    message: IncomingMessage,
    turn_id: str,
    session_id: str,
    *,
    level: int = logging.ERROR,
    text: str = "",
    detail: str = "",
) -> str:
    """Log a failed turn under a fresh error id (with the traceback only for errors); returns the id.
    `detail` is what people were not shown (where the store lives): on this line, beside the id they
    were shown, so the message in a thread leads to its reason."""
    error_id = uuid.uuid4().hex[:8]
    log.log(
        level,
        "turn failed error_id=%s turn=%s session=%s surface=%s user=%s: %s%s",
        error_id,
        turn_id,
        session_id,
        message.surface,
        message.user_id,
        text or type(exc).__name__,
        f" ({detail})" if detail else "",
        exc_info=exc if exc is not None and level >= logging.ERROR else None,
    )
    return error_id


def in_words(seconds: float) -> str:
    """'45 seconds' / '12 minutes', for 'try again in …'."""
    seconds = max(1, round(seconds))
    if seconds < 90:
        return f"{seconds} seconds"
    return f"{round(seconds / 60)} minutes"
