"""Sessions: thread → session id, and the store protocol for history, locks, de-dup and turn records.

Two stores implement `SessionStore` with the same behaviour and the same test suite: the embedded
SQLite file under `DATATHREAD_HOME` (`core/store_sqlite.py`) and Redis (`core/store_redis.py`), which
lets many replicas share one truth.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from core.config import Settings
from core.release import release_id
from core.sandbox import is_valid_session_id
from core.store_base import HISTORY_VERSION, HeldLock, LockLost, LockTimeout, StoreUnavailable

# What the store implementations share lives in core/store_base.py (so they never import this module,
# which opens them); re-exported here for everything that uses a store.
__all__ = ["HISTORY_VERSION", "HeldLock", "LockLost", "LockTimeout", "StoreUnavailable"]


def session_id_for(surface: str, thread_key: tuple[str, ...]) -> str:
    """A stable, path-safe session id from a surface's thread key (same thread → same session)."""
    digest = hashlib.sha256("\x1f".join((surface, *thread_key)).encode()).hexdigest()[:24]
    return f"{surface[:2]}-{digest}"


class SessionStore(Protocol):
    """Everything a replica must share with the others about conversations."""

    async def load_history(self, session_id: str) -> list[dict]:
        """Messages in Anthropic format; [] for a new session."""

    async def save_history(self, session_id: str, messages: list[dict]) -> None:
        """Replace the history atomically (never half-written)."""

    async def get_meta(self, session_id: str) -> dict | None:
        """Session metadata (surface, channel, thread, participants, created/updated)."""

    async def update_meta(self, session_id: str, **fields: object) -> dict:
        """Merge fields into metadata; keeps `created`, sets `updated`, unions `participants`."""

    async def claim_schema(self, release: str, *, write: bool = True) -> None:
        """Raise StoreTooNew for a store a newer release marked; otherwise (with `write`) mark it with
        this release's schema and name (core/store_schema.py)."""

    async def purge_expired(self) -> int:
        """Remove what has expired and does not go by itself (core/store_retention.py); how many."""

    def lock(
        self,
        session_id: str,
        *,
        ttl_s: float = 60.0,
        wait_s: float = 900.0,
        on_wait: Callable[[], Awaitable[None]] | None = None,
    ) -> AbstractAsyncContextManager:
        """Exclusive per-session lock with an owner token, expiry, and renewal while held; waiters take
        it in the order they asked, and `on_wait` starts once if this one has to wait."""

    async def first_seen(self, key: str, ttl_s: float = 3600.0) -> bool:
        """True the first time `key` is seen (within ttl) across all replicas; False for repeats."""

    async def set_once(self, key: str, value: str, *, ttl_s: float) -> bool:
        """Set `key` only if it has no value yet (first writer wins, across replicas); False otherwise."""

    async def get_value(self, key: str) -> str | None:
        """The value `set_once` stored under `key`, or None (unset or expired)."""

    async def hit_rates(
        self, limits: Sequence[tuple[str, int]], *, window_s: float
    ) -> tuple[int, float] | None:
        """One hit in several windows (key, limit), counted in all or none: None if every one admits
        it, else (index of the first that is full, seconds until it would admit it)."""

    async def add_usage(self, key: str, amount: int, *, ttl_s: float) -> int:
        """Add to a counter that expires `ttl_s` after it was created; returns the new total (budgets)."""

    async def record_turn(self, record: dict) -> None:
        """Store (or replace) a turn record: who, where, question, steps, stats, outcome."""

    async def get_turn(self, turn_id: str) -> dict | None:
        """One turn record, for 'Show SQL & code' and feedback."""

    async def set_feedback(self, turn_id: str, *, user_id: str, value: str) -> bool:
        """Record 👍/👎 (`value` "up"/"down") on a turn; False if the turn is unknown."""

    async def list_turns(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        channel_id: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[dict]:
        """Turn records, newest last, for the audit trail and exports."""

    async def put_record(self, kind: str, record_id: str, data: dict) -> None:
        """Store (or replace) a small JSON document of a collection (schedules, …), without expiry."""

    async def get_record(self, kind: str, record_id: str) -> dict | None:
        """One document of a collection, or None."""

    async def update_record(self, kind: str, record_id: str, fields: dict) -> dict | None:
        """Merge top-level fields into a document atomically; None (and nothing written) if it is gone."""

    async def list_records(self, kind: str) -> list[dict]:
        """Every document of a collection, in no particular order."""

    async def delete_record(self, kind: str, record_id: str) -> bool:
        """Remove a document; False if there was none."""

    async def find_threads(
        self, *, user_id: str | None = None, channel_id: str | None = None, team_id: str | None = None
    ) -> dict[str, list[str]]:
        """Session id → everyone who took part (metadata participants, turn-record users), for each
        thread whose metadata or a turn record matches every filter given (`datathread forget`)."""

    async def erase_sessions(self, session_ids: Sequence[str], *, turns: bool = True) -> dict[str, int]:
        """Delete these threads' history and metadata, and with `turns` their turn records (with their
        indexes), in bounded batches; counts by "history", "metadata", "turn records"."""

    async def erase_user_turns(self, user_id: str, *, session_id: str | None = None) -> int:
        """Delete this person's turn records in any thread, or in `session_id`'s alone (with their
        indexes); how many."""

    async def erase_values(self, pattern: str) -> int:
        """Delete the values `set_once` kept under keys matching the glob `pattern`; how many."""

    async def ping(self) -> None:
        """Raise StoreUnavailable when the store cannot be reached."""

    async def close(self) -> None:
        """Release connections."""


def store_place(settings: Settings) -> str:
    """Where the sessions are, for a sentence: the state folder, or the Redis (host:port/db, never its
    password) when REDIS_URL is set — "No session X in /path/home" sent people to a folder that was
    not where their sessions lived."""
    if settings.redis_url:
        from core.redis_words import redis_address

        return f"the Redis at {redis_address(settings.redis_url)}"
    return str(settings.home.resolve())


def store_exists(settings: Settings) -> bool:
    """Whether there can be sessions to read: a Redis, or a state home already made. Commands that only
    read (`audit`, `export`) look no further without one — opening the SQLite store would make an empty
    home in whatever folder they ran in."""
    return bool(settings.redis_url) or settings.home.exists()


def turn_ttl_s(settings: Settings) -> float | None:
    """How long turn records are kept after they started (None: for ever). Without a limit they
    grew for good — in Redis, in memory."""
    return settings.audit_ttl_days * 86400 or None


async def open_store(settings: Settings, *, mark: bool = True) -> SessionStore:
    """The store the settings ask for: Redis when REDIS_URL is set, else the embedded SQLite file;
    StoreTooNew (a StoreUnavailable) when a newer release's layout is in it. Without `mark` (`doctor`,
    which checks a deployment and changes nothing), the store is not marked with this release."""
    if settings.redis_url:
        from core.store_redis import RedisStore

        store: SessionStore = RedisStore(
            settings.redis_url,
            history_ttl_s=settings.history_ttl_days * 86400,
            turn_ttl_s=turn_ttl_s(settings),
        )
    else:
        from core.store_sqlite import SqliteStore

        store = SqliteStore(
            settings.home.resolve() / "state.sqlite3",
            history_ttl_s=settings.history_ttl_days * 86400,
            turn_ttl_s=turn_ttl_s(settings),
        )
    await store.ping()
    try:  # before anything is read: a newer release's layout is refused, never misread
        await store.claim_schema(release_id(settings.release), write=mark)
    except StoreUnavailable:
        await store.close()
        raise
    return store


async def resolve_session_id(store: SessionStore, given: str) -> str:
    """The session id `given` names: an id the store holds turns under (a full session id, or a schedule's
    `schedule:ID` that `audit` prints), else the terminal session of that `--session` key (`datathread
    chat`/`ask` print the key), so either works wherever an id is asked. Over the store alone: `export`
    and `audit --session` look a session up before they import the notebook and core stacks."""
    if await store.list_turns(session_id=given, limit=1):
        return given
    valid = is_valid_session_id(given)
    terminal = session_id_for("terminal", (given,))
    if not valid or await store.list_turns(session_id=terminal, limit=1):
        return terminal
    return given
