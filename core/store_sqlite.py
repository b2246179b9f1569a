"""The embedded session store: one SQLite file under DATATHREAD_HOME, safe across local processes.

Same behaviour as the Redis store (one test suite runs against both). Locks are rows with an owner
token and an expiry: replicas sharing DATATHREAD_HOME serialise a session's turns in the order they
asked (core/lock_queue.py); a dead owner's lock expires, at once on this host (core/lock_owner.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from core.disk_errors import write_failure
from core.lock_keeper import LockKeeper
from core.lock_owner import holder_died, new_owner
from core.lock_queue import OnWait, WaitNotice, left_behind, sqlite_leave, sqlite_take
from core.lock_release import Releases
from core.sqlite_calls import SqliteCalls
from core.store_base import HISTORY_VERSION, HeldLock, StoreUnavailable, loaded
from core.store_erase import erase_sessions, erase_user_turns, sqlite_erase_values, sqlite_threads
from core.store_retention import purge_sqlite
from core.store_schema import STORE_SCHEMA, HistoryNotes, claim_sqlite, too_new

_SCHEMA = """
CREATE TABLE IF NOT EXISTS history (session_id TEXT PRIMARY KEY, version INTEGER, messages TEXT, expires REAL);
CREATE TABLE IF NOT EXISTS meta (session_id TEXT PRIMARY KEY, data TEXT);
CREATE TABLE IF NOT EXISTS locks (session_id TEXT PRIMARY KEY, owner TEXT, expires REAL);
CREATE TABLE IF NOT EXISTS waiting (session_id TEXT, owner TEXT, arrived REAL, expires REAL,
                                    PRIMARY KEY (session_id, owner));
CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, expires REAL);
CREATE TABLE IF NOT EXISTS hits (key TEXT, at REAL);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT, expires REAL);
CREATE TABLE IF NOT EXISTS usage (key TEXT PRIMARY KEY, total INTEGER, expires REAL);
CREATE INDEX IF NOT EXISTS hits_key ON hits (key, at);
CREATE TABLE IF NOT EXISTS turns (turn_id TEXT PRIMARY KEY, session_id TEXT, user_id TEXT, channel_id TEXT,
                                  started REAL, data TEXT);
CREATE INDEX IF NOT EXISTS turns_session ON turns (session_id, started);
CREATE INDEX IF NOT EXISTS turns_started ON turns (started);
CREATE TABLE IF NOT EXISTS records (kind TEXT, id TEXT, data TEXT, PRIMARY KEY (kind, id));
"""

SQLITE_MAX_INT = 2**63 - 1


class SqliteStore:
    """SessionStore on a local SQLite file (WAL mode; one short transaction per call)."""

    def __init__(self, path: Path, *, history_ttl_s: float = 30 * 86400, turn_ttl_s: float | None = None):
        self.path = path
        self.history_ttl_s = history_ttl_s
        self.turn_ttl_s = turn_ttl_s  # None: turn records are kept for ever
        self._calls = SqliteCalls(self._connect, self._unusable)
        self._run = self._calls.run  # each call one transaction in a worker thread (core/sqlite_calls.py)
        self._keepers: set[LockKeeper] = set()
        self._releases = Releases()
        self._history_notes = HistoryNotes()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(path.parent, 0o711)
            with contextlib.closing(self._connect()) as con:
                con.execute("PRAGMA journal_mode=WAL")  # persistent in the file: set once
                con.executescript(_SCHEMA)
            os.chmod(path, 0o600)  # sandboxed code must never read the conversations of others
        except (OSError, sqlite3.Error) as exc:  # a full or read-only DATATHREAD_HOME: one sentence
            raise self._unusable(exc) from None

    def _unusable(self, exc: BaseException) -> StoreUnavailable:
        folder = self.path.parent
        return StoreUnavailable(f"The session database in {folder} cannot be written: {write_failure(exc)}.")

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA busy_timeout=30000")
        con.create_function("holder_died", 1, holder_died)  # a lock's owner gone: free at once
        return con

    async def ping(self) -> None:
        await self._run(lambda con: con.execute("SELECT 1").fetchone())

    async def claim_schema(self, release: str, *, write: bool = True) -> None:
        """Refuse a store a newer release marked; else mark it ours (core/store_schema.py)."""
        self._history_notes.release = release
        found = await self._run(claim_sqlite, release, write)
        if found > STORE_SCHEMA:
            raise too_new(str(self.path), found, release)

    async def purge_expired(self) -> int:  # core/store_retention.py says why
        return await purge_sqlite(self._run, time.time(), self.history_ttl_s, self.turn_ttl_s)

    # --- erasure on request (core/store_erase.py) ----------------------------------------------
    async def find_threads(self, *, user_id=None, channel_id=None, team_id=None) -> dict[str, list[str]]:
        match = {"user_id": user_id, "channel_id": channel_id, "team_id": team_id}
        return await self._run(lambda con: sqlite_threads(con, **match))

    async def erase_sessions(self, session_ids: Sequence[str], *, turns: bool = True) -> dict[str, int]:
        return await erase_sessions(self._run, session_ids, turns)

    async def erase_user_turns(self, user_id: str, *, session_id: str | None = None) -> int:
        return await erase_user_turns(self._run, user_id, session_id)

    async def erase_values(self, pattern: str) -> int:
        return await self._run(sqlite_erase_values, pattern)

    async def close(self) -> None:
        """Stop lock keepers, then close every connection once no call is using it."""
        for keeper in list(self._keepers):
            keeper.stop()
        self._releases.cancel()
        await self._calls.close()

    # --- history and metadata ------------------------------------------------------------------
    async def load_history(self, session_id: str) -> list[dict]:
        def q(con):
            row = con.execute(
                "SELECT version, messages, expires FROM history WHERE session_id=?", (session_id,)
            ).fetchone()
            if not row or row[2] < time.time():
                return []
            if row[0] != HISTORY_VERSION:
                self._history_notes.unknown(session_id, row[0], HISTORY_VERSION)
                return []
            return json.loads(row[1])

        return await self._run(q)

    async def save_history(self, session_id: str, messages: list[dict]) -> None:
        blob = json.dumps(messages, default=str)
        await self._run(
            lambda con: con.execute(
                "INSERT OR REPLACE INTO history VALUES (?,?,?,?)",
                (session_id, HISTORY_VERSION, blob, time.time() + self.history_ttl_s),
            )
        )

    async def get_meta(self, session_id: str) -> dict | None:
        row = await self._run(
            lambda con: con.execute("SELECT data FROM meta WHERE session_id=?", (session_id,)).fetchone()
        )
        return loaded(row[0]) if row else None

    async def update_meta(self, session_id: str, **fields: object) -> dict:
        def q(con):
            row = con.execute("SELECT data FROM meta WHERE session_id=?", (session_id,)).fetchone()
            data = merge_meta(loaded(row[0]) if row else None, session_id, fields)
            con.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (session_id, json.dumps(data)))
            return data

        return await self._run(q)

    # --- locks ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def lock(
        self, session_id: str, *, ttl_s: float = 60.0, wait_s: float = 900.0, on_wait: OnWait | None = None
    ) -> AsyncIterator[HeldLock]:
        """Exclusive per-session lock: a row with an owner token and an expiry, renewed by a
        `LockKeeper` thread (its own connection) so an event-loop stall cannot let it expire."""
        owner = new_owner()

        notice = WaitNotice(on_wait)  # in the order turns asked (core/lock_queue.py)
        try:
            await sqlite_take(self._run, session_id, owner, ttl_s=ttl_s, wait_s=wait_s, notice=notice)
        except StoreUnavailable as exc:  # said at once; a place in the queue is left once the file is free
            if until_s := left_behind(exc, notice, ttl_s):
                self._releases.give_up(
                    lambda: self._run(sqlite_leave, session_id, owner),
                    name=f"sqlite:{session_id}",
                    until_s=until_s,
                    errors=(StoreUnavailable,),
                )
            raise
        held = HeldLock(ttl_s, waited=notice.task)
        keeper = self._keeper(session_id, owner, ttl_s, held).start()
        self._keepers.add(keeper)
        try:
            yield held
        finally:
            keeper.stop()
            self._keepers.discard(keeper)
            await self._releases.release(  # never masks the turn's own error, nor holds its end
                lambda: self._run(
                    lambda con: con.execute(
                        "DELETE FROM locks WHERE session_id=? AND owner=?", (session_id, owner)
                    )
                ),
                name=f"sqlite:{session_id}",
                ttl_s=ttl_s,
                wait_s=held.release_wait(),
                errors=(StoreUnavailable,),
            )

    def _keeper(self, session_id: str, owner: str, ttl_s: float, held: HeldLock) -> LockKeeper:
        connection: list[sqlite3.Connection] = []  # opened by the keeper's thread, on first use

        def renew() -> bool:
            if not connection:
                connection.append(self._connect())
            cur = connection[0].execute(
                "UPDATE locks SET expires=? WHERE session_id=? AND owner=?",
                (time.time() + ttl_s, session_id, owner),
            )
            return cur.rowcount == 1

        def close() -> None:
            for con in connection:
                con.close()

        return LockKeeper(f"sqlite:{session_id}", renew, held, errors=(sqlite3.Error,), close=close)

    # --- de-dup and rate limits ----------------------------------------------------------------
    async def first_seen(self, key: str, ttl_s: float = 3600.0) -> bool:
        def q(con):
            now = time.time()
            con.execute("DELETE FROM seen WHERE key=? AND expires<?", (key, now))
            return con.execute("INSERT OR IGNORE INTO seen VALUES (?,?)", (key, now + ttl_s)).rowcount == 1

        return await self._run(q)

    async def set_once(self, key: str, value: str, *, ttl_s: float) -> bool:
        def q(con):
            now = time.time()
            con.execute("DELETE FROM kv WHERE key=? AND expires<?", (key, now))
            return (
                con.execute("INSERT OR IGNORE INTO kv VALUES (?,?,?)", (key, value, now + ttl_s)).rowcount
                == 1
            )

        return await self._run(q)

    async def get_value(self, key: str) -> str | None:
        row = await self._run(
            lambda con: con.execute(
                "SELECT value FROM kv WHERE key=? AND expires>=?", (key, time.time())
            ).fetchone()
        )
        return row[0] if row else None

    async def hit_rates(
        self, limits: Sequence[tuple[str, int]], *, window_s: float
    ) -> tuple[int, float] | None:
        def q(con):
            now = time.time()
            for i, (key, limit) in enumerate(limits):
                con.execute("DELETE FROM hits WHERE key=? AND at<?", (key, now - window_s))
                rows = con.execute("SELECT at FROM hits WHERE key=? ORDER BY at", (key,)).fetchall()
                if len(rows) >= limit:
                    return i, max(0.0, rows[len(rows) - limit][0] + window_s - now)
            con.executemany("INSERT INTO hits VALUES (?,?)", [(key, now) for key, _ in limits])
            return None

        return await self._run(q)

    async def add_usage(self, key: str, amount: int, *, ttl_s: float) -> int:
        def q(con):
            now = time.time()
            con.execute("DELETE FROM usage WHERE key=? AND expires<?", (key, now))
            con.execute("INSERT OR IGNORE INTO usage VALUES (?,?,?)", (key, 0, now + ttl_s))
            con.execute("UPDATE usage SET total=total+? WHERE key=?", (amount, key))
            return con.execute("SELECT total FROM usage WHERE key=?", (key,)).fetchone()[0]

        return await self._run(q)

    # --- turn records --------------------------------------------------------------------------
    async def record_turn(self, record: dict) -> None:
        """Store (or replace) a turn record; records older than the turn TTL go at the same time."""

        def q(con):
            con.execute(  # a few at a time: the hourly sweep deletes the rest in batches
                "DELETE FROM turns WHERE rowid IN (SELECT rowid FROM turns WHERE started<? LIMIT 100)",
                (self._oldest_turn(),),
            )
            con.execute(
                "INSERT OR REPLACE INTO turns VALUES (?,?,?,?,?,?)",
                (
                    record["turn_id"],
                    record.get("session_id"),
                    record.get("user_id"),
                    record.get("channel_id"),
                    record.get("started", time.time()),
                    json.dumps(record, default=str),
                ),
            )

        await self._run(q)

    def _oldest_turn(self) -> float:
        """When the oldest turn record that is kept started (-inf: all are kept)."""
        return -math.inf if self.turn_ttl_s is None else time.time() - self.turn_ttl_s

    async def get_turn(self, turn_id: str) -> dict | None:
        row = await self._run(
            lambda con: con.execute(
                "SELECT data FROM turns WHERE turn_id=? AND started>=?", (turn_id, self._oldest_turn())
            ).fetchone()
        )
        return loaded(row[0]) if row else None

    async def set_feedback(self, turn_id: str, *, user_id: str, value: str) -> bool:
        def q(con):
            row = con.execute(
                "SELECT data FROM turns WHERE turn_id=? AND started>=?", (turn_id, self._oldest_turn())
            ).fetchone()
            if not row:
                return False
            data = loaded(row[0])  # rewritten readable too
            data.setdefault("feedback", {})[user_id] = value
            con.execute("UPDATE turns SET data=? WHERE turn_id=?", (json.dumps(data), turn_id))
            return True

        return await self._run(q)

    async def list_turns(
        self,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        channel_id: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[dict]:
        """As the Redis store: `limit` past SQLite's integers (`audit --limit 99999999999999999999`, an
        OverflowError) is all of them, and 0 or less none (LIMIT -1 was all)."""
        if limit <= 0:
            return []
        clauses, args = ["started>=?"], [self._oldest_turn()]
        for column, value in (("session_id", session_id), ("user_id", user_id), ("channel_id", channel_id)):
            if value is not None:
                clauses.append(f"{column}=?")
                args.append(value)
        if since is not None:
            clauses.append("started>=?")
            args.append(since)
        where = "WHERE " + " AND ".join(clauses)
        sql = f"SELECT data FROM (SELECT data, started FROM turns {where} ORDER BY started DESC LIMIT ?) ORDER BY started"
        rows = await self._run(lambda con: con.execute(sql, (*args, min(limit, SQLITE_MAX_INT))).fetchall())
        return [loaded(r[0]) for r in rows]

    # --- records (small documents by collection: schedules) ------------------------------------
    async def put_record(self, kind: str, record_id: str, data: dict) -> None:
        blob = json.dumps(data, default=str)
        await self._run(
            lambda con: con.execute("INSERT OR REPLACE INTO records VALUES (?,?,?)", (kind, record_id, blob))
        )

    async def get_record(self, kind: str, record_id: str) -> dict | None:
        row = await self._run(
            lambda con: con.execute(
                "SELECT data FROM records WHERE kind=? AND id=?", (kind, record_id)
            ).fetchone()
        )
        return loaded(row[0]) if row else None

    async def update_record(self, kind: str, record_id: str, fields: dict) -> dict | None:
        def q(con):
            row = con.execute("SELECT data FROM records WHERE kind=? AND id=?", (kind, record_id)).fetchone()
            if not row:
                return None
            data = {**loaded(row[0]), **fields}
            con.execute(
                "UPDATE records SET data=? WHERE kind=? AND id=?",
                (json.dumps(data, default=str), kind, record_id),
            )
            return data

        return await self._run(q)

    async def list_records(self, kind: str) -> list[dict]:
        rows = await self._run(
            lambda con: con.execute("SELECT data FROM records WHERE kind=? ORDER BY id", (kind,)).fetchall()
        )
        return [loaded(r[0]) for r in rows]

    async def delete_record(self, kind: str, record_id: str) -> bool:
        return await self._run(
            lambda con: (
                con.execute("DELETE FROM records WHERE kind=? AND id=?", (kind, record_id)).rowcount == 1
            )
        )


def merge_meta(old: dict | None, session_id: str, fields: dict) -> dict:
    """Shared by both stores: keep `created`, bump `updated`, union `participants`."""
    now = time.time()
    data = dict(old or {"session_id": session_id, "created": now, "participants": []})
    participants = set(data.get("participants", []))
    for key, value in fields.items():
        if key == "participant":
            if value:
                participants.add(str(value))
        else:
            data[key] = value
    data["participants"] = sorted(participants)
    data["updated"] = now
    return data
