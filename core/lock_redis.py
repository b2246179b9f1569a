"""The session lock on Redis: redis-py's `Lock` (SET NX PX with an owner token; extend and release only
by the owner, each one atomic script), taken in the order turns asked (core/lock_queue.py), kept alive
from a thread (core/lock_keeper.py), and released without keeping the turn waiting on a Redis that
stopped answering (core/lock_release.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager

import redis
import redis.asyncio as aioredis
import redis.lock
from redis.asyncio.lock import Lock
from redis.exceptions import LockNotOwnedError, RedisError

from core.lock_keeper import LockKeeper
from core.lock_owner import new_owner
from core.lock_queue import OnWait, WaitNotice, left_behind, redis_give_up, redis_take
from core.lock_release import Releases
from core.redis_words import redis_reason
from core.store_base import HeldLock, LockTimeout, StoreUnavailable


class RedisLocks:
    """The session locks one `RedisStore` holds: their keepers and the releases still under way."""

    def __init__(self, client: aioredis.Redis, url: str):
        self.r = client
        self._url = url
        self.keepers: set[LockKeeper] = set()
        self.releases = Releases()

    @contextlib.asynccontextmanager
    async def hold(
        self,
        name: str,
        session_id: str,
        *,
        ttl_s: float,
        wait_s: float,
        on_wait: OnWait | None,
        errors: Callable[[], AbstractContextManager],
    ) -> AsyncIterator[HeldLock]:
        """The lock at key `name`. A holder that dies stops renewing, so its lock expires after `ttl_s`,
        or at once when it died on this host (core/lock_owner.py). `errors()` turns Redis errors into
        the store's."""
        token, notice = new_owner(), WaitNotice(on_wait)
        lock = Lock(self.r, name, timeout=ttl_s, sleep=0.05, thread_local=False)
        try:
            with errors():
                if not await redis_take(lock, token, wait_s=wait_s, notice=notice):
                    raise LockTimeout(session_id)
        except StoreUnavailable as exc:  # said at once; what the tries may have left is given back later
            if until_s := left_behind(exc, notice, ttl_s):
                self.releases.give_up(
                    lambda: redis_give_up(lock, token),
                    name=name,
                    until_s=until_s,
                    errors=(RedisError, OSError),
                    reason=redis_reason,
                )
            raise
        held = HeldLock(ttl_s, waited=notice.task)
        keeper = self._keeper(name, token, ttl_s, held).start()
        self.keepers.add(keeper)
        try:
            yield held
        finally:
            keeper.stop()
            self.keepers.discard(keeper)
            await self.releases.release(
                lambda: _free(lock, token),
                name=name,
                ttl_s=ttl_s,
                wait_s=held.release_wait(),
                errors=(RedisError, OSError),
                reason=redis_reason,
            )

    def _keeper(self, name: str, token: str, ttl_s: float, held: HeldLock) -> LockKeeper:
        """A keeper with its own (synchronous) client, so renewal never waits for the event loop."""
        client = redis.Redis.from_url(self._url, socket_connect_timeout=2, socket_timeout=max(1.0, ttl_s / 3))
        kept = redis.lock.Lock(client, name, timeout=ttl_s, thread_local=False)
        kept.local.token = token.encode()

        def renew() -> bool:
            try:
                return bool(kept.extend(ttl_s, replace_ttl=True))
            except LockNotOwnedError:
                return False

        return LockKeeper(name, renew, held, errors=(RedisError, OSError), close=client.close)

    def close(self) -> None:
        """Stop the keepers and the releases under way (their locks expire)."""
        for keeper in list(self.keepers):
            keeper.stop()
        self.releases.cancel()


async def _free(lock: Lock, token: str) -> None:
    """Free the lock if it is still ours (the library's atomic release script)."""
    with contextlib.suppress(LockNotOwnedError):  # expired or taken over (the turn knows: held.lost)
        await lock.do_release(token.encode())
