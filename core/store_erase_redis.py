"""Deleting on request from the Redis store, as core/store_erase.py does for SQLite: the threads a
person, channel or workspace took part in, their history (`h:`), metadata (`m:`), turn records (`t:`)
with their index entries (`ti:`), and cached look-ups (`v:`).

Never KEYS (it blocks Redis for as long as it walks every key): SCAN with a bounded COUNT, and
pipelines of at most BATCH keys, so another replica's turn waits for one batch at most. Turn records
are found through their index sets (by person, channel or session), not by scanning every record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from core.store_erase import json_dict, matches

BATCH = 1000  # keys per SCAN call, per MGET and per pipeline


async def scanned(r, match: str) -> AsyncIterator[list[bytes]]:
    """The keys matching `match`, a SCAN batch at a time (never KEYS)."""
    cursor = 0
    while True:
        cursor, keys = await r.scan(cursor, match=match, count=BATCH)
        if keys:
            yield keys
        if cursor == 0:
            return


async def _members(r, key: str) -> list[str]:
    """Every member of a sorted set (an index), read in slices of BATCH."""
    out: list[str] = []
    start = 0
    while chunk := await r.zrange(key, start, start + BATCH - 1):
        out += [m.decode() for m in chunk]
        start += BATCH
    return out


async def _records(r, prefix: str, turn_ids: Sequence[str]) -> list[tuple[str, dict]]:
    """(turn id, record) for the turn ids whose record is still there."""
    out = []
    for i in range(0, len(turn_ids), BATCH):
        ids = turn_ids[i : i + BATCH]
        for turn_id, raw in zip(ids, await r.mget([f"{prefix}t:{t}" for t in ids]), strict=True):
            if raw:
                out.append((turn_id, json_dict(raw)))
    return out


async def redis_threads(
    r, prefix: str, *, user_id: str | None, channel_id: str | None, team_id: str | None
) -> dict[str, list[str]]:
    """Session id → everyone who took part, for each thread whose metadata or a turn record matches."""
    found: dict[str, set[str]] = {}
    meta_at = len(f"{prefix}m:")
    async for keys in scanned(r, f"{prefix}m:*"):
        for key, raw in zip(keys, await r.mget(keys), strict=True):
            meta = json_dict(raw)
            people = {str(p) for p in meta.get("participants") or ()}
            if matches(meta, people, user_id=user_id, channel_id=channel_id, team_id=team_id):
                found.setdefault(key.decode()[meta_at:], set()).update(people)
    index = f"ti:u:{user_id}" if user_id else f"ti:c:{channel_id}" if channel_id else "ti:all"
    for _, record in await _records(r, prefix, await _members(r, prefix + index)):
        people = {record["user_id"]} if record.get("user_id") else set()
        if record.get("session_id") and matches(
            record, people, user_id=user_id, channel_id=channel_id, team_id=team_id
        ):
            found.setdefault(record["session_id"], set())
    for session_id, people in found.items():
        turns = await _records(r, prefix, await _members(r, f"{prefix}ti:s:{session_id}"))
        people.update(str(rec["user_id"]) for _, rec in turns if rec.get("user_id"))
    return {sid: sorted(people) for sid, people in found.items()}


async def _drop_turns(r, prefix: str, records: list[tuple[str, dict]]) -> int:
    """Delete these turn records and take them out of every index they joined; how many went."""
    deleted = 0
    for i in range(0, len(records), BATCH):
        chunk = records[i : i + BATCH]
        async with r.pipeline(transaction=True) as pipe:
            for turn_id, record in chunk:
                pipe.zrem(f"{prefix}ti:all", turn_id)
                for field, tag in (("session_id", "s"), ("user_id", "u"), ("channel_id", "c")):
                    if record.get(field) is not None:
                        pipe.zrem(f"{prefix}ti:{tag}:{record[field]}", turn_id)
            pipe.delete(*(f"{prefix}t:{turn_id}" for turn_id, _ in chunk))
            deleted += (await pipe.execute())[-1]
    return deleted


async def redis_erase_sessions(r, prefix: str, session_ids: Sequence[str], turns: bool) -> dict[str, int]:
    """Delete these sessions' history and metadata, and with `turns` their turn records and index."""
    counts = {"history": 0, "metadata": 0, "turn records": 0}
    for session_id in session_ids:
        if turns:
            index = f"{prefix}ti:s:{session_id}"
            counts["turn records"] += await _drop_turns(
                r, prefix, await _records(r, prefix, await _members(r, index))
            )
            await r.delete(index)
        async with r.pipeline(transaction=True) as pipe:
            pipe.delete(f"{prefix}h:{session_id}")
            pipe.delete(f"{prefix}m:{session_id}")
            history, meta = await pipe.execute()
        counts["history"] += history
        counts["metadata"] += meta
    return counts


async def redis_erase_user_turns(r, prefix: str, user_id: str, session_id: str | None = None) -> int:
    """Delete this person's turn records, in any thread (and their index) or in `session_id`'s."""
    index = f"{prefix}ti:u:{user_id}"
    records = await _records(r, prefix, await _members(r, index))
    if session_id is not None:
        return await _drop_turns(
            r, prefix, [(t, rec) for t, rec in records if rec.get("session_id") == session_id]
        )
    deleted = await _drop_turns(r, prefix, records)
    await r.delete(index)
    return deleted


async def redis_erase_values(r, prefix: str, pattern: str) -> int:
    """Delete the kept values (`set_once`, under `v:`) whose key matches the glob `pattern`."""
    deleted = 0
    async for keys in scanned(r, f"{prefix}v:{pattern}"):
        deleted += await r.delete(*keys)
    return deleted
