"""What the session stores forget on a schedule, beside what expires by itself.

Redis drops a key when its time is up; SQLite keeps an expiry beside each row, and only the paths that
read a row looked at it: nothing deleted an expired history, thread metadata, de-dup marker or counter.
So DATATHREAD_HISTORY_TTL_DAYS hid a thread's transcript without removing it (a team relying on it
for retention kept every conversation for good, and the file grew with every Slack event), and a
reply in a thread whose history had expired still counted as a follow-up there, unlike with Redis.
Redis turn records written without an expiry (DATATHREAD_AUDIT_TTL_DAYS), by releases before records
expired, stayed for good as well: core/store_retention_redis.py ages them. The hourly sweep
(bot/retention.py) calls `SessionStore.purge_expired`.
"""

from __future__ import annotations

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
