"""The mark `reset` leaves on the conversation it deleted, which a turn of it still running reads
before it saves its history (core/turn_end.py).

`reset` deletes without waiting for that conversation's lock: the person typed it while an answer was
running, and is answered at once. The running turn then saved its history back when it ended, into
the conversation the person was told was deleted; a background task deleted it again once the turn
let the lock go, and a restart within its wait (up to 900 s) lost that task, and the history stayed.
The mark is in the store, so every process sees it: a turn that began before it does not save (and,
when the mark landed between its check and its save, deletes what it saved).
"""

from __future__ import annotations

import time

from core.sessions import SessionStore

KEY = "erased:"  # + session id, a value (`set_once`) that expires by itself
KEEP_S = 86_400.0  # longer than any turn: a lock wait (900 s) and the turn's own time


async def mark_erased(store: SessionStore, session_id: str) -> None:
    """Say in the store that this conversation was deleted now (the first mark stands: `reset`'s old
    conversation is never resumed, its session id is left behind)."""
    await store.set_once(KEY + session_id, repr(time.time()), ttl_s=KEEP_S)


async def erased_since(store: SessionStore, session_id: str, since: float) -> bool:
    """Whether the conversation was deleted at or after `since` (a turn's start)."""
    at = await store.get_value(KEY + session_id)
    try:
        return at is not None and float(at) >= since
    except ValueError:
        return False
