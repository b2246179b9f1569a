"""The session lock as a turn takes it: one turn of a session at a time, a `Waiting` event when this
one has to wait behind another (a second `datathread chat` on one session sat silent until the first
answered), and the sentence for a turn the session store could not carry."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from core.sessions import HeldLock, LockLost, LockTimeout, SessionStore, StoreUnavailable
from core.wording import embedded

# Stopped while it waited: it never ran, so — unlike a stopped answer — nothing of it is in the history.
NOT_STARTED = (
    "Stopped before it started: another conversation on this session was still answering, so this "
    "question was not kept. Ask it again when that one has answered."
)


class StoppedWaiting(Exception):
    """The turn was cancelled (Ctrl-C, a shutdown) while it waited for the session lock."""


@contextlib.asynccontextmanager
async def turn_lock(
    store: SessionStore, session_id: str, *, ttl_s: float, on_wait: Callable[[], Awaitable[None]]
) -> AsyncIterator[HeldLock]:
    """The session lock; `on_wait()` when another turn holds it (a free lock is taken at once, without a
    word), said while this turn keeps its place in the queue and finished before the turn goes on. A
    cancellation while waiting raises `StoppedWaiting`, so the caller can tell the person the question
    never ran."""
    waited = False

    async def notice() -> None:
        nonlocal waited
        waited = True
        await on_wait()

    async with contextlib.AsyncExitStack() as stack:
        try:
            held = await stack.enter_async_context(store.lock(session_id, ttl_s=ttl_s, on_wait=notice))
        except asyncio.CancelledError:
            if waited:
                raise StoppedWaiting(session_id) from None
            raise
        if held.waited is not None:
            await held.waited  # the Waiting event goes out before anything of the turn
        yield held


def store_failure(
    exc: LockLost | LockTimeout | StoreUnavailable, *, surface: str, ran: bool = False
) -> tuple[str, int, str]:
    """The sentence, log level and unshown detail for a turn the session store could not carry (`ran`:
    after the model answered, whose text a thread may show already: then it was not saved, or — when
    the write was sent and no answer came — may not be kept for follow-ups). Why
    the store failed (Redis host:port, the SQLite folder) is for whoever runs datathread: said at the
    terminal, which is theirs, but only logged for a chat thread, where everyone in the channel would
    read it: returned as the detail, for the turn's failure line, which carries the error id the
    thread is shown (on a line of its own, nothing matched the message to the reason)."""
    if isinstance(exc, LockLost):
        text = (
            "I lost track of this thread while answering (another request took it over), so this "
            "answer was not saved to the thread. Please ask again."
        )
        return text, logging.WARNING, ""
    if isinstance(exc, LockTimeout):
        return (
            "This thread is still busy with an earlier question. Try again when it has answered.",
            logging.ERROR,
            "",
        )
    why, detail = (f" ({embedded(str(exc))})", "") if surface == "terminal" else ("", str(exc))
    if not ran:
        what = ". Nothing was changed; please try again shortly."
    elif exc.may_have_written:  # sent, unanswered: a frozen Redis applies it when it thaws
        what = ", so this answer may not be kept for follow-ups; if a follow-up misses it, ask it again."
    else:  # refused outright: nothing of it is in the thread
        what = ", so this answer was not saved; please try again shortly."
    return f"I can't use my session store right now{why}{what}", logging.ERROR, detail
