"""A follow-up in a thread whose history the store let go (DATATHREAD_HISTORY_TTL_DAYS after its last
turn): it is answered without the earlier messages, so the answer says so, once.

The history goes first; what outlives it tells such a thread from a new one: its metadata (SQLite keeps
it until the hourly purge, its `updated` then older than a history lasts) and its turn records (kept
DATATHREAD_AUDIT_TTL_DAYS, 90; Redis lets the metadata go with the history). The question then
carries one more text block telling Claude so, with the workspace files that are still there. The
model says it in its own answer, so Slack, Teams and the terminal show it as any answer, and the
turn after has a history again: nothing more is said.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from core.sessions import SessionStore
from core.wording import counted

log = logging.getLogger("datathread.history")
FILES_NAMED = 20  # workspace files the note names (then "and N more")


class FileLister(Protocol):
    async def list_files(self, session_id: str) -> list[dict]: ...


async def gap_note(store: SessionStore, files: FileLister, session_id: str, *, ttl_days: int) -> list[dict]:
    """For a thread with an empty history: [] if it is new, else the text block to add to its question.
    Call it before this turn updates the thread's metadata or records."""
    if not await history_expired(store, session_id, ttl_s=ttl_days * 86400):
        return []
    try:
        names = [f["path"] for f in await files.list_files(session_id)]
    except Exception:  # a hint, not the turn: without the listing the note names no files
        log.warning("could not list the files of session %s", session_id, exc_info=True)
        names = None
    days = counted(ttl_days, "day")
    lines = [
        "[Note from datathread, not the person: the earlier messages of this thread are no longer kept "
        f"(a thread's history is kept {days} after its last message, DATATHREAD_HISTORY_TTL_DAYS). "
        'Start your answer with one short sentence telling the person so, e.g. "I no longer have our '
        f'earlier messages in this thread (they are kept for {days}).", then answer as well as you can.'
    ]
    if names:
        more = f" and {len(names) - FILES_NAMED} more" if len(names) > FILES_NAMED else ""
        lines.append(
            f"Files from earlier in this thread still in the workspace: {', '.join(names[:FILES_NAMED])}{more}."
        )
    elif names is not None:
        lines.append("No files from earlier in this thread are left in the workspace.")
    return [{"type": "text", "text": " ".join(lines) + "]"}]


async def history_expired(store: SessionStore, session_id: str, *, ttl_s: float) -> bool:
    """The thread had a saved history that is gone: its metadata was last touched longer ago than a
    history is kept, or one of its turns called the model (every such turn saved a history)."""
    meta = await store.get_meta(session_id)
    if meta and meta.get("created"):
        last = float(meta.get("updated") or meta["created"])
        if time.time() - last >= ttl_s:
            return True
    turns = await store.list_turns(session_id=session_id, limit=20)
    return any(t.get("ok") or (t.get("stats") or {}).get("model_calls") for t in turns)
