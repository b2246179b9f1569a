"""Redis turn records and their index sets that carry no expiry get the one they would have had.

This release writes every turn record (`dt:t:<turn>`) with its expiry and trims and expires each index
set (`dt:ti:<index>`) it joins. Older releases wrote both without one, and in a rolling deploy they go
on doing so beside this one, on the same Redis, for as long as they run. The first version of this pass
ran once and set a flag (`dt:v:aged`) so that it never looked again: whatever an old replica recorded
after that kept ttl=-1 for good, so DATATHREAD_AUDIT_TTL_DAYS silently failed and Redis grew. So every
hourly sweep looks: one SCAN over `dt:t*` in batches, a pipelined TTL per batch, and a GET and an
EXPIREAT only for the records found without an expiry; each index set is trimmed and its expiry
moved to its newest member's (an old release adds to a set without moving it).
"""

from __future__ import annotations

import json
import time

BATCH = 1000  # keys per SCAN call and per pipeline
OLD_FLAG = "v:aged"  # the once-only pass's flag (under the store's prefix): removed, it meant nothing


async def age_unexpiring_turns(client, prefix: str, turn_ttl_s: float | None) -> int:
    """Give each turn record and index set without an expiry its expiry (a record: its start plus the
    TTL, gone at once when that is past; an index: what is older than the TTL trimmed, then expiring
    with its newest member); returns how many keys were changed. Nothing with turn records kept for
    ever (`turn_ttl_s` None)."""
    if turn_ttl_s is None:
        return 0
    changed = 0
    await client.delete(prefix + OLD_FLAG)
    cursor = 0
    while True:
        cursor, keys = await client.scan(cursor, match=f"{prefix}t*", count=BATCH)
        changed += await _age_batch(client, prefix, keys, turn_ttl_s)
        if cursor == 0:
            return changed


async def _age_batch(client, prefix: str, keys: list[bytes], ttl_s: float) -> int:
    if not keys:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.ttl(key)
        ttls = await pipe.execute()
    records = [k for k, t in zip(keys, ttls, strict=True) if t == -1 and k.startswith(f"{prefix}t:".encode())]
    indexes = [(k, t) for k, t in zip(keys, ttls, strict=True) if k.startswith(f"{prefix}ti:".encode())]
    return await _age_records(client, records, ttl_s) + await _age_indexes(client, indexes, ttl_s)


async def _age_records(client, keys: list[bytes], ttl_s: float) -> int:
    if not keys:
        return 0
    raws = await client.mget(keys)
    async with client.pipeline(transaction=False) as pipe:
        for key, raw in zip(keys, raws, strict=True):
            if raw is not None and (started := _started(raw)) is not None:
                # NX: a record a newer release rewrote meanwhile keeps the expiry it was given
                pipe.expireat(key, int(started + ttl_s) + 1, nx=True)
        done = await pipe.execute()
    return sum(bool(d) for d in done)


async def _age_indexes(client, keys: list[tuple[bytes, int]], ttl_s: float) -> int:
    """As `RedisStore.record_turn` keeps an index: members older than the TTL dropped, and the set
    expiring a TTL after its newest member started. Every index, not only those without an expiry: an
    older release adds to a set without moving its expiry, which then came before its newest record's."""
    if not keys:
        return 0
    oldest = time.time() - ttl_s
    async with client.pipeline(transaction=False) as pipe:
        for key, _ in keys:
            pipe.zremrangebyscore(key, "-inf", f"({oldest}")
            pipe.zrange(key, -1, -1, withscores=True)
        answers = await pipe.execute()
    newest = answers[1::2]
    async with client.pipeline(transaction=False) as pipe:
        for (key, ttl), last in zip(keys, newest, strict=True):
            if last:  # NX gives one without an expiry its first; GT only ever lengthens one
                at = int(last[0][1] + ttl_s) + 1
                if ttl == -1:
                    pipe.expireat(key, at, nx=True)
                else:
                    pipe.expireat(key, at, gt=True)
        done = await pipe.execute()
    emptied = sum(1 for (_, ttl), last in zip(keys, newest, strict=True) if ttl == -1 and not last)
    return sum(bool(d) for d in done) + emptied


def _started(raw: bytes) -> float | None:
    """When a stored record's turn started (0 when it does not say: past keeping); None: not a record."""
    try:
        data = json.loads(raw)
        return float(data.get("started") or 0)
    except (ValueError, TypeError, AttributeError):
        return None
