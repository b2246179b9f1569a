"""The Redis session store: one truth shared by many replicas (serve processes or Modal containers).

Same behaviour as the SQLite store (one test suite runs against both). Session locks are redis-py's
`Lock` (owner token; atomic extend and release; core/lock_redis.py), renewed by a `LockKeeper` thread. Every write is one
atomic Redis command, script or MULTI, so a replica that dies — or a Redis that goes away — mid-turn never
leaves a half-written history. Keys (all under `dt:`):

    h:<session>  history JSON (TTL)        m:<session>  metadata JSON (TTL)
    l:<session>  lock owner token (PX)     s:<key>      de-dup marker (EX)
    l:<session>:queue, :beats  the lock's waiters in order (zsets; core/lock_queue.py)
    r:<key>      sliding-window hits (zset) u:<key>     usage counter (expires once, from creation)
    t:<turn>     turn record JSON (EXAT)   ti:<index>   turn ids scored by start time (zsets)
    d:<kind>:<id> record JSON (no TTL)     di:<kind>    ids of a kind's records (set)
    schema       what layout the keys are in, and which release last started (hash; core/store_schema.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core import store_base
from core.lock_queue import OnWait
from core.lock_redis import RedisLocks
from core.redis_client import fail_fast_client
from core.redis_words import (  # noqa: F401  (re-exported: the runners and doctor import them from here)
    PING_DEADLINE_S,
    is_missing_database,
    missing_database,
    redis_address,
    redis_failure,
    redis_reason,
    redis_where,
    tls_hint,
    unanswered,
)
from core.store_base import HISTORY_VERSION, HeldLock, StoreUnavailable, loaded
from core.store_erase_redis import (
    redis_erase_sessions,
    redis_erase_user_turns,
    redis_erase_values,
    redis_threads,
)
from core.store_retention_redis import age_unexpiring_turns
from core.store_schema import REDIS_CLAIM, STORE_SCHEMA, HistoryNotes, too_new
from core.store_sqlite import merge_meta

T = TypeVar("T")

# Sliding windows on the server's clock (replicas' clocks may differ), several at once: prune and
# count each; the first that is full refuses ({its 1-based index, milliseconds until its oldest hit
# leaves it}) and none is counted; otherwise every one counts the hit ({0, -1}).
_HIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, member = tonumber(ARGV[1]), ARGV[2]
for i, key in ipairs(KEYS) do
  local limit = tonumber(ARGV[i + 2])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= limit then
    local oldest = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
    return {i, math.max(0, tonumber(oldest[2]) + window - now)}
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window)
end
return {0, -1}
"""
_TURN_INDEXES = (("session_id", "s"), ("user_id", "u"), ("channel_id", "c"))


class RedisStore:
    """SessionStore on Redis (redis-py asyncio). Construct cheaply; `ping()` proves it is reachable."""

    def __init__(
        self,
        url: str,
        *,
        history_ttl_s: float = 30 * 86400,
        turn_ttl_s: float | None = None,
        prefix: str = "dt:",
    ):
        self.where = redis_where(url)
        self.history_ttl_s = history_ttl_s
        self.turn_ttl_s = turn_ttl_s  # None: turn records are kept for ever
        self.prefix = prefix
        # One try of store_base.ANSWER_S per call, then StoreUnavailable (it was three tries of 5 s).
        self.r = fail_fast_client(url, socket_timeout=store_base.ANSWER_S, retry_timeouts=False)
        self._url = url
        self._hit = self.r.register_script(_HIT)
        self._claim = self.r.register_script(REDIS_CLAIM)
        self._history_notes = HistoryNotes()
        self._locks = RedisLocks(self.r, url)
        self._keepers = self._locks.keepers

    def _k(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:  # a command that may have reached Redis may still be applied
            raise StoreUnavailable(self._failure(exc), may_have_written=unanswered(exc)) from None

    def _failure(self, exc: RedisError) -> str:
        """The sentence for a failed call; one that got no answer says within how long, as a ping and a
        turn's end say it (one try of `store_base.ANSWER_S`, the same 3 s)."""
        sent = isinstance(exc, RedisTimeoutError) and unanswered(exc)
        return redis_failure(self._url, None if sent else exc)

    async def _call(self, awaitable: Awaitable[T]) -> T:
        with self._errors():
            return await awaitable

    async def ping(self) -> None:
        """Prove Redis answers (at start, and for health checks), within `PING_DEADLINE_S` in all: a port
        that takes connections and never answers (a proxy, a firewall, the wrong service) was three
        tries × the 5 s read timeout, 17 s of silence, before its sentence."""
        try:
            await asyncio.wait_for(self.r.ping(), PING_DEADLINE_S)
        except TimeoutError:
            raise StoreUnavailable(redis_failure(self._url, None)) from None
        except RedisError as exc:
            if is_missing_database(exc):  # the sentence says which numbers it has
                raise StoreUnavailable(missing_database(self._url, await self._databases())) from None
            raise StoreUnavailable(self._failure(exc)) from None

    async def _databases(self) -> int | None:
        """How many databases this Redis has (`CONFIG GET databases`, asked on database 0), for the
        sentence about one it lacks; None where CONFIG is not allowed (managed Redis often renames it)."""
        pool = self.r.connection_pool
        probe = aioredis.Redis.from_pool(
            type(pool)(connection_class=pool.connection_class, **{**pool.connection_kwargs, "db": 0})
        )
        try:
            async with asyncio.timeout(1):
                return int((await probe.config_get("databases"))["databases"])
        except (RedisError, OSError, TimeoutError, KeyError, ValueError):
            return None
        finally:
            with contextlib.suppress(RedisError, OSError):
                await probe.aclose()

    async def claim_schema(self, release: str, *, write: bool = True) -> None:
        """Refuse a store a newer release marked; else mark it ours (core/store_schema.py)."""
        self._history_notes.release = release
        claim = self._claim(
            keys=[f"{self.prefix}schema"], args=[STORE_SCHEMA, release, time.time(), int(write)]
        )
        found = int(await self._call(claim))
        if found > STORE_SCHEMA:
            raise too_new(f"the Redis at {redis_address(self._url)}", found, release)

    async def close(self) -> None:
        """Stop lock keepers and pending lock releases, and release the connection pool."""
        self._locks.close()
        with contextlib.suppress(RedisError, OSError):
            await self.r.aclose()

    async def _update_json(self, key: str, change: Callable[[dict | None], dict | None], ttl_s=None):
        """Read-modify-write one JSON value atomically (WATCH/MULTI, retried on conflict)."""
        with self._errors():
            async with self.r.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        await pipe.watch(key)
                        raw = await pipe.get(key)
                        new = change(loaded(raw) if raw else None)  # rewritten readable too
                        if new is None:
                            await pipe.unwatch()
                            return None
                        pipe.multi()
                        blob = json.dumps(new, default=str)  # without a TTL of its own it keeps the key's
                        pipe.set(key, blob, px=_ms(ttl_s)) if ttl_s else pipe.set(key, blob, keepttl=True)
                        await pipe.execute()
                        return new
                    except WatchError:
                        continue

    # --- history and metadata ------------------------------------------------------------------
    async def load_history(self, session_id: str) -> list[dict]:
        """Messages in Anthropic format; [] for a new, expired or old-format session."""
        raw = await self._call(self.r.get(self._k("h", session_id)))
        if not raw:
            return []
        data = json.loads(raw)
        if data.get("version") != HISTORY_VERSION:
            self._history_notes.unknown(session_id, data.get("version"), HISTORY_VERSION)
            return []
        return data["messages"]

    async def save_history(self, session_id: str, messages: list[dict]) -> None:
        """Replace the history with one SET (atomic) and restart its TTL."""
        blob = json.dumps({"version": HISTORY_VERSION, "messages": messages}, default=str)
        await self._call(self.r.set(self._k("h", session_id), blob, px=_ms(self.history_ttl_s)))

    async def get_meta(self, session_id: str) -> dict | None:
        """Session metadata, or None for an unknown session."""
        raw = await self._call(self.r.get(self._k("m", session_id)))
        return loaded(raw) if raw else None

    async def update_meta(self, session_id: str, **fields: object) -> dict:
        """Merge fields into metadata (see `merge_meta`), atomically across replicas."""
        return await self._update_json(
            self._k("m", session_id),
            lambda old: merge_meta(old, session_id, fields),
            ttl_s=self.history_ttl_s,
        )

    # --- locks ---------------------------------------------------------------------------------
    def lock(
        self, session_id: str, *, ttl_s: float = 60.0, wait_s: float = 900.0, on_wait: OnWait | None = None
    ) -> AbstractAsyncContextManager[HeldLock]:
        """Exclusive per-session lock (core/lock_redis.py): an owner token, renewed from a thread, taken
        in the order waiters asked, released without holding the turn past `HeldLock.release_wait()`."""
        return self._locks.hold(
            self._k("l", session_id),
            session_id,
            ttl_s=ttl_s,
            wait_s=wait_s,
            on_wait=on_wait,
            errors=self._errors,
        )

    # --- de-dup, rate limits, budgets ----------------------------------------------------------
    async def first_seen(self, key: str, ttl_s: float = 3600.0) -> bool:
        """SET NX EX: exactly one replica wins for a given event key within the TTL."""
        return bool(await self._call(self.r.set(self._k("s", key), b"1", nx=True, px=_ms(ttl_s))))

    async def set_once(self, key: str, value: str, *, ttl_s: float) -> bool:
        """SET NX PX: the first writer wins for the key's lifetime."""
        return bool(await self._call(self.r.set(self._k("v", key), value.encode(), nx=True, px=_ms(ttl_s))))

    async def get_value(self, key: str) -> str | None:
        raw = await self._call(self.r.get(self._k("v", key)))
        return raw.decode() if raw is not None else None

    async def hit_rates(
        self, limits: Sequence[tuple[str, int]], *, window_s: float
    ) -> tuple[int, float] | None:
        """One hit in several sliding windows at once (one Lua script): counted in all or in none."""
        keys = [self._k("r", key) for key, _ in limits]
        args = [_ms(window_s), uuid.uuid4().hex, *(limit for _, limit in limits)]
        index, wait_ms = await self._call(self._hit(keys=keys, args=args))
        return None if int(index) == 0 else (int(index) - 1, int(wait_ms) / 1000)

    async def add_usage(self, key: str, amount: int, *, ttl_s: float) -> int:
        """INCRBY plus PEXPIRE NX in one MULTI: the expiry is set once, when the counter is created."""
        name = self._k("u", key)
        with self._errors():
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.incrby(name, amount)
                pipe.pexpire(name, _ms(ttl_s), nx=True)
                total, _ = await pipe.execute()
        return int(total)

    async def purge_expired(self) -> int:
        """Keys expire by themselves; turn records and index sets an older release wrote (before, or
        beside this one in a rolling deploy) did not, and get their expiry (core/store_retention_redis.py)."""
        with self._errors():
            return await age_unexpiring_turns(self.r, self.prefix, self.turn_ttl_s)

    # --- erasure on request (core/store_erase_redis.py: SCAN and index sets, never KEYS) --------
    async def find_threads(self, *, user_id=None, channel_id=None, team_id=None) -> dict[str, list[str]]:
        match = {"user_id": user_id, "channel_id": channel_id, "team_id": team_id}
        return await self._call(redis_threads(self.r, self.prefix, **match))

    async def erase_sessions(self, session_ids: Sequence[str], *, turns: bool = True) -> dict[str, int]:
        return await self._call(redis_erase_sessions(self.r, self.prefix, session_ids, turns))

    async def erase_user_turns(self, user_id: str, *, session_id: str | None = None) -> int:
        return await self._call(redis_erase_user_turns(self.r, self.prefix, user_id, session_id))

    async def erase_values(self, pattern: str) -> int:
        return await self._call(redis_erase_values(self.r, self.prefix, pattern))

    # --- turn records --------------------------------------------------------------------------
    async def record_turn(self, record: dict) -> None:
        """Store (or replace) a turn record and index it by session, user, channel and time.

        With a turn TTL the record expires that long after it started, and each index it joins drops
        what is older and expires when nothing joined it for as long, so nothing grows for good."""
        turn_id = record["turn_id"]
        started = float(record.get("started") or time.time())
        record = {**record, "started": started}
        ttl = self.turn_ttl_s
        if ttl is not None and started + ttl <= time.time():
            return  # already past keeping
        indexes = [self._k("ti", "all")] + [
            self._k("ti", f"{tag}:{record[field]}")
            for field, tag in _TURN_INDEXES
            if record.get(field) is not None
        ]
        with self._errors():
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.set(self._k("t", turn_id), json.dumps(record, default=str), exat=_at(started, ttl))
                for index in indexes:
                    pipe.zadd(index, {turn_id: started})
                    if ttl is not None:
                        pipe.zremrangebyscore(index, "-inf", f"({time.time() - ttl}")
                        pipe.expire(index, int(ttl) + 1)
                await pipe.execute()

    async def get_turn(self, turn_id: str) -> dict | None:
        """One turn record, or None."""
        raw = await self._call(self.r.get(self._k("t", turn_id)))
        return loaded(raw) if raw else None

    async def set_feedback(self, turn_id: str, *, user_id: str, value: str) -> bool:
        """Record one person's 👍/👎 on a turn (read-modify-write under WATCH); False if unknown."""

        def change(data: dict | None) -> dict | None:
            if data is None:
                return None
            data.setdefault("feedback", {})[user_id] = value
            return data

        return await self._update_json(self._k("t", turn_id), change) is not None

    async def list_turns(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        channel_id: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[dict]:
        """Turn records matching every filter, newest last (the newest `limit` of them)."""
        wanted = {"session_id": session_id, "user_id": user_id, "channel_id": channel_id}
        index = next(
            (f"{tag}:{wanted[field]}" for field, tag in _TURN_INDEXES if wanted[field] is not None), "all"
        )
        low = since if since is not None else "-inf"
        with self._errors():
            ids = await self.r.zrangebyscore(self._k("ti", index), low, "+inf")
            raws = await self.r.mget([self._k("t", i.decode()) for i in ids]) if ids else []
        records = [loaded(raw) for raw in raws if raw]
        matching = [r for r in records if all(v is None or r.get(f) == v for f, v in wanted.items())]
        matching.sort(key=lambda r: r.get("started", 0))
        return matching[-limit:] if limit > 0 else []

    # --- records (small documents by collection: schedules) ------------------------------------
    async def put_record(self, kind: str, record_id: str, data: dict) -> None:
        """Store the document and index its id, in one MULTI."""
        with self._errors():
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.set(self._k("d", f"{kind}:{record_id}"), json.dumps(data, default=str))
                pipe.sadd(self._k("di", kind), record_id)
                await pipe.execute()

    async def get_record(self, kind: str, record_id: str) -> dict | None:
        raw = await self._call(self.r.get(self._k("d", f"{kind}:{record_id}")))
        return loaded(raw) if raw else None

    async def update_record(self, kind: str, record_id: str, fields: dict) -> dict | None:
        """Merge fields under WATCH; a document deleted meanwhile stays deleted."""
        return await self._update_json(
            self._k("d", f"{kind}:{record_id}"), lambda old: None if old is None else {**old, **fields}
        )

    async def list_records(self, kind: str) -> list[dict]:
        with self._errors():
            ids = sorted(i.decode() for i in await self.r.smembers(self._k("di", kind)))
            raws = await self.r.mget([self._k("d", f"{kind}:{i}") for i in ids]) if ids else []
        return [loaded(raw) for raw in raws if raw]

    async def delete_record(self, kind: str, record_id: str) -> bool:
        with self._errors():
            async with self.r.pipeline(transaction=True) as pipe:
                pipe.delete(self._k("d", f"{kind}:{record_id}"))
                pipe.srem(self._k("di", kind), record_id)
                deleted, _ = await pipe.execute()
        return bool(deleted)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _at(started: float, ttl_s: float | None) -> int | None:
    """The Unix time a record that started at `started` expires (None: never)."""
    return None if ttl_s is None else int(started + ttl_s) + 1
