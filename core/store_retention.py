"""What the session stores forget on a schedule, beside what expires by itself.

Redis drops a key when its time is up; SQLite keeps an expiry beside each row, and only the paths that
read a row looked at it: nothing deleted an expired history, thread metadata, de-dup marker or counter.
So DATATHREAD_HISTORY_TTL_DAYS hid a thread's transcript without removing it (a team relying on it
for retention kept every conversation for good, and the file grew with every Slack event), and a
reply in a thread whose history had expired still counted as a follow-up there, unlike with Redis.
Redis turn records written before they expired (DATATHREAD_AUDIT_TTL_DAYS) carried no expiry: they
stayed for good as well. The hourly sweep (bot/retention.py) calls `SessionStore.purge_expired`.
"""

from __future__ import annotations

import json
import sqlite3

HITS_KEPT_S = 2 * 3600.0  # rate-limit hits are counted over the last hour


def purge_sqlite(con: sqlite3.Connection, now: float, history_ttl_s: float) -> int:
    """Delete every expired row, and the metadata of threads whose history is gone and that nobody
    touched for a history TTL (what Redis's expiry of both does); returns how many rows went."""
    removed = 0
    for table in ("history", "seen", "kv", "usage", "locks", "waiting"):
        removed += con.execute(f"DELETE FROM {table} WHERE expires < ?", (now,)).rowcount
    removed += con.execute("DELETE FROM hits WHERE at < ?", (now - HITS_KEPT_S,)).rowcount
    removed += con.execute(
        "DELETE FROM meta WHERE session_id NOT IN (SELECT session_id FROM history)"
        " AND coalesce(json_extract(data, '$.updated'), 0) < ?",
        (now - history_ttl_s,),
    ).rowcount
    return removed


async def expire_old_turns(client, pattern: str, turn_ttl_s: float | None, done_key: str) -> int:
    """Give every Redis turn record without an expiry the one it would have had (its start plus the
    TTL; already past: gone at once); returns how many were changed. Once per Redis: a finished pass
    sets `done_key` (records written since have their expiry), so the hourly sweep scans no more."""
    if turn_ttl_s is None or await client.exists(done_key):
        return 0
    changed = 0
    async for key in client.scan_iter(match=pattern, count=1000):
        if await client.ttl(key) != -1:
            continue
        raw = await client.get(key)
        try:
            started = float(json.loads(raw).get("started") or 0) if raw else 0.0
        except (ValueError, AttributeError):
            continue
        changed += bool(await client.expireat(key, int(started + turn_ttl_s)))
    await client.set(done_key, b"1")
    return changed
