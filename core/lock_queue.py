"""A session's turns take its lock in the order they asked for it. Waiters used to poll, and whichever
polled first after a release won: six follow-ups sent while an answer streamed were answered in a
shuffled order (and saved in it, so "now only June" could run before the question it refines).

Each waiter stands in a queue with its arrival time and a place it renews on every try; only the first
may take the lock. A waiter that gives up leaves the queue; one whose process died is dropped at once on
this host (core/lock_owner.py) and after WAIT_BEAT_S anywhere else. The SQLite try runs in the store's
transaction; the Redis one is one script (the server's clock orders arrivals from every replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from redis.asyncio.lock import Lock
from redis.exceptions import LockNotOwnedError, RedisError

from core.lock_owner import holder_died
from core.store_base import LockTimeout, StoreUnavailable

WAIT_BEAT_S = 15.0  # a waiter not heard from for this long has left (renewed every try, ~20 times a second)
TRY_EVERY_S = 0.05
OnWait = Callable[[], Awaitable[None]]


class WaitNotice:
    """`on_wait` (a turn's "Waiting…"), started once from the first failed try and run beside the
    waiting, so the waiter keeps the place it asked for. Before, a turn said so first and only then
    queued: the surface's latency (a Slack call) decided which follow-up went first."""

    def __init__(self, on_wait: OnWait | None):
        self.on_wait = on_wait
        self.task: asyncio.Task | None = None
        self.queued = False  # a try was applied and left this waiter a place in the queue

    def waiting(self) -> None:
        if self.on_wait is not None and self.task is None:
            self.task = asyncio.create_task(self.on_wait())

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def sqlite_take(
    run, session_id: str, owner: str, *, ttl_s: float, wait_s: float, notice: WaitNotice
) -> None:
    """Take the lock in queue order within `wait_s` (LockTimeout otherwise); `run` is the store's
    transaction. A waiter that gives up, or is cancelled, leaves the queue."""
    deadline = time.monotonic() + wait_s
    try:
        while not await run(sqlite_try, session_id, owner, ttl_s):
            notice.queued = True
            if time.monotonic() > deadline:
                raise LockTimeout(session_id)
            notice.waiting()
            await asyncio.sleep(TRY_EVERY_S)
    except StoreUnavailable:  # leaving would wait for the same store: the caller leaves later (`left_behind`)
        notice.cancel()
        raise
    except BaseException:  # cancelled (Ctrl-C, a shutdown), maybe while a try that took the lock ran
        notice.cancel()
        with contextlib.suppress(Exception):  # otherwise its place lapses after WAIT_BEAT_S, the lock its TTL
            await run(sqlite_give_back, session_id, owner)
        raise


def sqlite_try(con, session_id: str, owner: str, ttl_s: float) -> bool:
    """One try in the store's transaction: free a lock whose time ran out or whose holder died, drop
    waiters gone likewise, join the queue (or renew one's place), take the lock only when first."""
    now = time.time()
    for table in ("locks", "waiting"):
        con.execute(
            f"DELETE FROM {table} WHERE session_id=? AND (expires<? OR holder_died(owner))", (session_id, now)
        )
    con.execute(
        "INSERT INTO waiting VALUES (?,?,?,?) ON CONFLICT (session_id, owner) DO UPDATE SET expires=excluded.expires",
        (session_id, owner, now, now + WAIT_BEAT_S),
    )
    (first,) = con.execute(
        "SELECT owner FROM waiting WHERE session_id=? ORDER BY arrived, owner LIMIT 1", (session_id,)
    ).fetchone()
    if first != owner:
        return False
    took = con.execute("INSERT OR IGNORE INTO locks VALUES (?,?,?)", (session_id, owner, now + ttl_s))
    if took.rowcount != 1:
        return False
    sqlite_leave(con, session_id, owner)
    return True


def sqlite_leave(con, session_id: str, owner: str) -> None:
    con.execute("DELETE FROM waiting WHERE session_id=? AND owner=?", (session_id, owner))


def sqlite_give_back(con, session_id: str, owner: str) -> None:
    """Leave the queue and free the lock if `owner` holds it: a try cancelled after its thread began
    writing still commits (core/sqlite_calls.py), and this call's transaction waits for it, so a lock
    that try took is not left to its TTL (the session's next question waited 60 s for it). Not always:
    a try whose thread had passed its last look at the cancellation but not yet begun its transaction
    may still commit after this call; that lock lasts its TTL, as every such lock did before."""
    sqlite_leave(con, session_id, owner)
    con.execute("DELETE FROM locks WHERE session_id=? AND owner=?", (session_id, owner))


# KEYS: the lock, the queue (arrival, ms), the waiters' beats (expiry, ms). ARGV: token, lock ms, beat ms.
# Returns {1} when taken, else {0, the holder or '', the first waiter}.
_TRY = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
end
redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if first == ARGV[1] and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {1}
end
return {0, redis.call('GET', KEYS[1]) or '', first}
"""


async def redis_take(lock: Lock, token: str, *, wait_s: float, notice: WaitNotice) -> bool:
    """Take redis-py's `lock` with `token` in queue order within `wait_s`; between tries, a holder or a
    first waiter that died on this host is let go (the holder by the library's atomic release)."""
    client, name = lock.redis, lock.name
    queue, beats = f"{name}:queue", f"{name}:beats"
    script = client.register_script(_TRY)
    args = [token, int(lock.timeout * 1000), int(WAIT_BEAT_S * 1000)]
    deadline = time.monotonic() + wait_s
    try:
        while True:
            answer = await script(keys=[name, queue, beats], args=args)
            if int(answer[0]) == 1:
                lock.local.token = token.encode()
                return True
            notice.queued = True
            holder, first = (_text(v) for v in answer[1:])
            if holder and holder_died(holder):
                with contextlib.suppress(LockNotOwnedError):
                    await lock.do_release(holder.encode())
                continue
            if first != token and holder_died(first):
                await client.zrem(queue, first)
                continue
            if time.monotonic() >= deadline:
                break
            notice.waiting()
            await asyncio.sleep(TRY_EVERY_S)
    except RedisError:  # leaving would wait for the same Redis: the caller gives up later (`left_behind`)
        notice.cancel()
        raise
    except BaseException:  # cancelled (Ctrl-C, a shutdown), maybe after Redis applied a try that took it
        notice.cancel()
        await _leave(client, queue, beats, token, lock)
        raise
    notice.cancel()
    await _leave(client, queue, beats, token)
    return False


def left_behind(failure: StoreUnavailable, notice: WaitNotice, ttl_s: float) -> float:
    """How long what a lock try that failed with `failure` may have left in the store lasts, for its
    give-up (core/lock_release.py): the lock itself (`ttl_s`) when the try was sent and not answered (a
    frozen Redis applies it when it thaws); the place in the queue an earlier try took (WAIT_BEAT_S);
    else nothing (0: no give-up), as for a try refused outright (Redis down, a SQLite file held locked:
    SQLite rolls a failed call back)."""
    if failure.may_have_written:
        return ttl_s
    return WAIT_BEAT_S if notice.queued else 0.0


async def redis_give_up(lock: Lock, token: str) -> None:
    """After a failed try that may have left something (`left_behind`): leave the queue, and free the lock
    if that try took it (a Redis that froze applies it when it thaws, and the session would wait behind
    nobody for the lock's TTL).
    Raises the store's errors, for `Releases` to try again."""
    client, name = lock.redis, lock.name
    await client.zrem(f"{name}:queue", token)
    await client.zrem(f"{name}:beats", token)
    with contextlib.suppress(LockNotOwnedError):
        await lock.do_release(token.encode())


async def _leave(client, queue: str, beats: str, token: str, lock: Lock | None = None) -> None:
    """Leave the queue, and with `lock`, free it if this try holds it: the cancelled try was sent before
    these calls, so Redis almost always applies it first (the session's next question waited out the
    lock's TTL behind it). Not guaranteed: it went on a connection of its own, and across connections
    (a proxy, TLS, the order Redis reads its sockets) a later call may be applied first; then that
    lock lasts its TTL, as every such lock did before."""
    with contextlib.suppress(Exception):  # otherwise its place lapses after WAIT_BEAT_S
        await client.zrem(queue, token)
        await client.zrem(beats, token)
        if lock is not None:
            await lock.do_release(token.encode())


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode()
