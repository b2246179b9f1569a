"""The one way datathread opens a Redis connection, shared by the session store
(`core/store_redis.py`) and the job queue (`core/runner_redis.py`)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.redis_words import unanswered


def fail_fast_client(
    url: str, *, socket_timeout: float | None = None, retry_timeouts: bool = True
) -> aioredis.Redis:
    """An asyncio client that gives up on a Redis that is down after a few quick retries: redis-py's
    default retries back off for ~10 s, longer than a platform's ack or a person waits. The session
    store and the job queue (`core/runner_redis.py`) share it.

    `retry_timeouts=False`: a command sent and not answered within `socket_timeout` is not sent again
    (what never reached Redis still is: a refused connection, a connect that timed out). A Redis that
    froze takes every try and answers none, so each try cost the whole timeout — the session store's
    calls took three, 15 s — and a command that timed out may still be applied when it thaws, so
    sending it again could apply it twice."""
    backoff = ExponentialBackoff(cap=0.2, base=0.02)
    retry = Retry(backoff, retries=2) if retry_timeouts else UnsentOnly(backoff, retries=2)
    return aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=socket_timeout, retry=retry)


class UnsentOnly(Retry):
    """redis-py's retries, less a command whose answer timed out (it may have been applied)."""

    async def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        def retryable(error: Exception) -> bool:
            sent = isinstance(error, RedisTimeoutError) and unanswered(error)
            return not sent and (is_retryable is None or is_retryable(error))

        return await super().call_with_retry(do, fail, retryable, with_failure_count)
