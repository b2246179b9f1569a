"""Asking a person before an expensive step, across processes.

The turn that asks and the click that answers may run in different processes or containers (the web
endpoint receives the click; a turn worker waits on Modal), so the answer travels through the session
store: the click writes it once (first click wins), the waiting turn polls for it.

A click is taken only while a turn waits for it: the waiting turn renews a mark in the store every
BEAT_S (a key per time slot, as the store has no renewable keys), and the question counts as waited
for ASKING_S from being asked (while its card is being sent) unless its turn has begun waiting — then
only the marks count, so a click within a minute of asking, on a turn whose process has since died,
is not taken either. A click on a card nobody waits for any more — the process that asked was
restarted, or the question timed out longer ago than the answers are kept — was taken and said
"Running it.", and nothing ran.
"""

from __future__ import annotations

import asyncio
import time

from core.sessions import SessionStore

ANSWER_TTL_S = 3600.0
CONFIRM_TIMEOUT_S = 300.0  # how long a Run/Cancel question waits, on every surface; then it means no
BEAT_S = 5.0  # a waiting turn marks each slot of this length; a click looks at the last three
ASKING_S = 60.0  # from asking to waiting: sending the card (a slow Bot Connector, a retry)


def _key(token: str) -> str:
    return f"confirm:{token}"


async def ask(store: SessionStore, token: str, *, asker: str) -> None:
    """Record who asked the question, so only they (or an admin) can answer it."""
    await store.set_once(f"{_key(token)}:asker", asker, ttl_s=ANSWER_TTL_S)
    await store.set_once(f"{_key(token)}:asking", "1", ttl_s=ASKING_S)


def _slot(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // BEAT_S)


async def _beat(store: SessionStore, token: str, slot: int) -> None:
    """Mark that a turn waits for this answer now (kept for three slots: clocks of replicas differ)."""
    await store.set_once(f"{_key(token)}:waiting:{slot}", "1", ttl_s=3 * BEAT_S)


async def _waited_for(store: SessionStore, token: str) -> bool:
    """Whether a turn still waits for this answer (or is still showing the question)."""
    asking = await store.get_value(f"{_key(token)}:asking") is not None
    if asking and await store.get_value(f"{_key(token)}:began") is None:
        return True
    now = _slot()
    for slot in (now, now - 1, now - 2):
        if await store.get_value(f"{_key(token)}:waiting:{slot}") is not None:
            return True
    return False


async def give_answer(
    store: SessionStore, token: str, *, run: bool, user_id: str = "", admin: bool = False
) -> str:
    """Record a click: "ok", "answered" (someone was first, it timed out, or nobody waits for it any
    more) or "not yours"."""
    asker = await store.get_value(f"{_key(token)}:asker")
    if asker and user_id and user_id != asker and not admin:
        return "not yours"
    if not await _waited_for(store, token):
        return "answered"
    written = await store.set_once(_key(token), "run" if run else "cancel", ttl_s=ANSWER_TTL_S)
    return "ok" if written else "answered"


async def wait_for_answer(
    store: SessionStore, token: str, *, timeout_s: float, poll_s: float = 0.25
) -> bool | None:
    """True (run) / False (cancel) once someone answers, None after `timeout_s` without an answer.

    A timeout also records "cancel", so a late click cannot start what the turn already skipped.
    """
    deadline, beaten = time.monotonic() + timeout_s, None
    while True:
        if (slot := _slot()) != beaten:
            await _beat(store, token, slot)
            if beaten is None:  # from now on the marks alone say whether it still waits
                await store.set_once(f"{_key(token)}:began", "1", ttl_s=ANSWER_TTL_S)
            beaten = slot
        value = await store.get_value(_key(token))
        if value is not None:
            return value == "run"
        if time.monotonic() >= deadline:
            if await store.set_once(_key(token), "cancel", ttl_s=ANSWER_TTL_S):
                return None
            return await store.get_value(_key(token)) == "run"  # a click landed just in time
        await asyncio.sleep(poll_s)
