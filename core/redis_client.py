"""The one way datathread opens a Redis connection, shared by the session store
(`core/store_redis.py`) and the job queue (`core/runner_redis.py`)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff


def fail_fast_client(url: str, *, socket_timeout: float | None = None) -> aioredis.Redis:
    """An asyncio client that gives up on a Redis that is down after a few quick retries: redis-py's
    default retries back off for ~10 s, longer than a platform's ack or a person waits. The session
    store and the job queue (`core/runner_redis.py`) share it."""
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=2,
        socket_timeout=socket_timeout,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), retries=2),
    )
