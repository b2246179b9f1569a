"""What the session stores forget on a schedule, beside what expires by itself.

Redis drops a key when its time is up; SQLite keeps an expiry beside each row, and only the paths that
read a row looked at it: nothing deleted an expired history, thread metadata, de-dup marker or counter.
So DATATHREAD_HISTORY_TTL_DAYS hid a thread's transcript without removing it (a team relying on it
for retention kept every conversation for good, and the file grew with every Slack event), and a
reply in a thread whose history had expired still counted as a follow-up there, unlike with Redis.
Turn records older than DATATHREAD_AUDIT_TTL_DAYS were hidden from every read but deleted only when a
new turn was recorded: a bot that stopped answering kept them for good. They go here too.
Redis turn records written without an expiry (DATATHREAD_AUDIT_TTL_DAYS), by releases before records
expired, stayed for good as well: core/store_retention_redis.py ages them. The hourly sweep
(bot/retention.py) calls `SessionStore.purge_expired`.

In batches of BATCH rows, one transaction each, with a pause between them: 50,000 expired threads deleted in one transaction held
the file for 4 s, and a turn ending in another process waited 3.5 s for it, past its 3 s deadline.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3

HITS_KEPT_S = 2 * 3600.0  # rate-limit hits are counted over the last hour
BATCH = 1000  # rows per transaction
# between two transactions: another process's waiting writer retries its lock every
# core/sqlite_calls.TRY_MS (100 ms), and batches back to back took the lock again before it woke
PAUSE_S = 0.05

# (table, which rows have expired); each takes `now` (and, for meta, the history TTL) as its arguments
_EXPIRED = (
    *((table, "expires < ?") for table in ("history", "seen", "kv", "usage", "locks", "waiting")),
    ("hits", f"at < ? - {HITS_KEPT_S}"),
    # metadata of threads whose history is gone and that nobody touched for a history TTL (what
    # Redis's expiry of both does)
    (
        "meta",
        "session_id NOT IN (SELECT session_id FROM history) AND coalesce(json_extract(data, '$.updated'), 0) < ? - ?",
    ),
    ("turns", "started < ? - ?"),
)


def purge_batch(
    con: sqlite3.Connection, table: str, where: str, args: tuple, after: float
) -> tuple[int, float | None]:
    """Delete up to BATCH expired rows of `table` past rowid `after`; (how many went, the last rowid
    deleted, or None when none was left). The rowid walks forward, so a batch never reads again what
    an earlier one kept."""
    rowids = [
        r[0]
        for r in con.execute(
            f"SELECT rowid FROM {table} WHERE rowid > ? AND ({where}) ORDER BY rowid LIMIT ?",
            (after, *args, BATCH),
        )
    ]
    if not rowids:
        return 0, None
    marks = ",".join("?" * len(rowids))
    return con.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", rowids).rowcount, rowids[-1]


async def purge_sqlite(run, now: float, history_ttl_s: float, turn_ttl_s: float | None) -> int:
    """Delete every expired row, BATCH rows a transaction (`run` is the store's `SqliteCalls.run`);
    returns how many rows went. Turn records with no TTL (`turn_ttl_s` None) are kept."""
    removed = 0
    for table, where in _EXPIRED:
        if table == "turns" and turn_ttl_s is None:
            continue
        args = {"meta": (now, history_ttl_s), "turns": (now, turn_ttl_s)}.get(table, (now,))
        after: float | None = -math.inf
        while after is not None:
            went, after = await run(purge_batch, table, where, args, after)
            removed += went
            if went:
                await asyncio.sleep(PAUSE_S)
    return removed
