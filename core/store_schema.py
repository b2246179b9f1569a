"""Which layout of stored state a session store holds, and which release last started on it.

Releases before this one left no mark: SQLite's `PRAGMA user_version` was 0 and Redis held nothing
saying what wrote it, so a release older than the state it met could only misread it silently — a
history row of a format it does not know read as an empty thread, every conversation started afresh
without a word. Now each release, as it opens a store, reads the store's schema number: one newer than
it understands is refused in one sentence (`StoreTooNew`, exit code 2 at the command line and for
`serve`); otherwise it raises the number to its own (never lowers it) and records its release. A
history of a format it does not read is still not misread, but said in the log (`HistoryNotes`).

SQLite keeps the number in `PRAGMA user_version` and the release in `store_info`; Redis in the hash
`dt:schema` (fields `schema`, `release`).
"""

from __future__ import annotations

import logging
import sqlite3
import time

from core.store_base import StoreUnavailable

log = logging.getLogger("datathread.store")

# The layout this release writes and reads: its tables and keys, and the formats in them (the history's
# is core/store_base.HISTORY_VERSION). Raise it with any change an older release would misread; an
# addition older releases ignore (a new table, a new key, a new field) needs none. 0: before the mark.
STORE_SCHEMA = 1

SQLITE_TABLE = "CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT);"

# The number found; unless it is newer (refused) or this is a look only (ARGV[4] not 1), raised to ours
# with the release recorded.
REDIS_CLAIM = """
local found = tonumber(redis.call('HGET', KEYS[1], 'schema') or '0') or 0
if found > tonumber(ARGV[1]) or ARGV[4] ~= '1' then return found end
redis.call('HSET', KEYS[1], 'schema', ARGV[1], 'release', ARGV[2], 'started', ARGV[3])
return found
"""


class StoreTooNew(StoreUnavailable):
    """The store was written by a newer release than this one, in a layout this one may misread."""


def too_new(where: str, found: int, release: str) -> StoreTooNew:
    return StoreTooNew(
        f"The session store in {where} was written by a newer release of datathread (store schema {found};"
        f" this release, {release}, reads schema {STORE_SCHEMA} at most), so it is not opened: run that"
        " release or a newer one here (docs/OPERATIONS.md, Upgrades and rollbacks)."
    )


def claim_sqlite(con: sqlite3.Connection, release: str, write: bool) -> int:
    """In the store's transaction: the schema number found; raised to ours and the release recorded
    unless it is newer or `write` is False (a look only)."""
    found = con.execute("PRAGMA user_version").fetchone()[0]
    if found > STORE_SCHEMA or not write:
        return found
    if found < STORE_SCHEMA:
        con.execute(f"PRAGMA user_version = {STORE_SCHEMA}")
    con.execute(SQLITE_TABLE)
    con.executemany(
        "INSERT OR REPLACE INTO store_info VALUES (?, ?)",
        [("release", release), ("started", str(time.time()))],
    )
    return found


class HistoryNotes:
    """Says, once per session, that a thread's history is in a format this release does not read (and
    so the thread starts afresh here): after a rollback, every thread a newer release wrote would
    otherwise start fresh without a word. Held by one store instance; nothing global."""

    def __init__(self, release: str = ""):
        self.release = release
        self._told: set[str] = set()

    def unknown(self, session_id: str, version: object, known: int) -> None:
        if session_id in self._told:
            return
        self._told.add(session_id)
        log.warning(
            "session %s: its history is in format %s and this release (%s) reads format %s, so the thread"
            " starts afresh here, and its next answer replaces that history; run the release that wrote it"
            " to keep it (docs/OPERATIONS.md, Upgrades and rollbacks)",
            session_id,
            version,
            self.release or "unknown",
            known,
        )
