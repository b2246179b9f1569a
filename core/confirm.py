"""Asking a person before an expensive step, across processes.

The turn that asks and the click that answers may run in different processes or containers (the web
endpoint receives the click; a turn worker waits on Modal), so the answer travels through the session
store: the click writes it once (first click wins), the waiting turn polls for it.
"""

from __future__ import annotations

import asyncio
import time

from core.sessions import SessionStore

ANSWER_TTL_S = 3600.0
CONFIRM_TIMEOUT_S = 300.0  # how long a Run/Cancel question waits, on every surface; then it means no


def _key(token: str) -> str:
    return f"confirm:{token}"


async def ask(store: SessionStore, token: str, *, asker: str) -> None:
    """Record who asked the question, so only they (or an admin) can answer it."""
    await store.set_once(f"{_key(token)}:asker", asker, ttl_s=ANSWER_TTL_S)


async def give_answer(
    store: SessionStore, token: str, *, run: bool, user_id: str = "", admin: bool = False
) -> str:
    """Record a click: "ok", "answered" (someone was first, or it timed out) or "not yours"."""
    asker = await store.get_value(f"{_key(token)}:asker")
    if asker and user_id and user_id != asker and not admin:
        return "not yours"
    written = await store.set_once(_key(token), "run" if run else "cancel", ttl_s=ANSWER_TTL_S)
    return "ok" if written else "answered"


async def wait_for_answer(
    store: SessionStore, token: str, *, timeout_s: float, poll_s: float = 0.25
) -> bool | None:
    """True (run) / False (cancel) once someone answers, None after `timeout_s` without an answer.

    A timeout also records "cancel", so a late click cannot start what the turn already skipped.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = await store.get_value(_key(token))
        if value is not None:
            return value == "run"
        if time.monotonic() >= deadline:
            if await store.set_once(_key(token), "cancel", ttl_s=ANSWER_TTL_S):
                return None
            return await store.get_value(_key(token)) == "run"  # a click landed just in time
        await asyncio.sleep(poll_s)
