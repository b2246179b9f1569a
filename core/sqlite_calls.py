"""How the SQLite session store runs a call: one connection per worker thread (opening one per call
costs more than the query), one short transaction per call, and a wait for a database another process
holds locked that ends as soon as nobody waits for the answer any more.

SQLite's own busy wait cannot be cut short (`sqlite3.Connection.interrupt` does not reach it): a turn
that stopped waiting for a locked database left a thread in that wait for up to 30 s, and closing the
store, or the process, waited for the thread — `datathread ask` with its answer in hand sat there. The
wait is taken in short tries instead, and a call whose caller was cancelled (a deadline passed, the
store closes) gives up before it writes anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable

from core.store_base import StoreUnavailable

TRY_MS = 100  # one try of the wait for a database another process holds locked
# That wait, per call. Longer than a Redis's (store_base.ANSWER_S): a SQLite file is shared by the
# turn workers, `audit` and the retention purge, which hold it for real work (every call takes the
# write lock), and a turn refused for a busy moment is worse than a few seconds' wait. It was 30 s,
# several calls before a turn's first word, when a process held the file for good.
BUSY_S = 10.0


class SqliteCalls:
    """Runs `fn(con, *args)` in a worker thread inside one `BEGIN IMMEDIATE` … `COMMIT`."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        unusable: Callable[[BaseException], StoreUnavailable],
    ):
        self._connect = connect
        self._unusable = unusable
        self._local = threading.local()
        self._opened: list[tuple[sqlite3.Connection, threading.Lock]] = []
        self._closing = threading.Event()

    def _thread_connection(self) -> tuple[sqlite3.Connection, threading.Lock]:
        pair = getattr(self._local, "con", None)
        if pair is None:
            pair = self._local.con = (self._connect(), threading.Lock())
            self._opened.append(pair)
        return pair

    async def run(self, fn, *args):
        gave_up = threading.Event()

        def call():
            con, busy = self._thread_connection()
            with busy:  # close() waits for a call in flight instead of closing under it (a crash)
                try:
                    _begin(con, gave_up, self._closing)
                    out = fn(con, *args)
                    con.execute("COMMIT")
                    return out
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        con.execute("ROLLBACK")
                    raise

        try:
            return await asyncio.to_thread(call)
        except (sqlite3.OperationalError, OSError) as exc:  # the transaction rolled back: nothing half-saved
            raise self._unusable(exc) from None
        except asyncio.CancelledError:
            gave_up.set()  # one still waiting for the database gives up; one already writing finishes
            raise

    async def close(self) -> None:
        """Close every connection once no call is using it; calls waiting for a lock give up first."""
        self._closing.set()
        opened, self._opened = self._opened, []
        await asyncio.to_thread(_close_connections, opened)


def _begin(con: sqlite3.Connection, *stops: threading.Event) -> None:
    """`BEGIN IMMEDIATE`, waiting up to BUSY_S for a database another process holds locked, in tries of
    TRY_MS, until one of `stops` is set — also when it is set as the lock comes free: then nothing is
    written (the caller has gone, and may have said so)."""
    busy_s = BUSY_S
    deadline = time.monotonic() + busy_s
    con.execute(f"PRAGMA busy_timeout={TRY_MS}")
    try:
        while True:
            try:
                con.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _locked(exc) or time.monotonic() >= deadline or any(s.is_set() for s in stops):
                    raise
                continue
            if any(s.is_set() for s in stops):
                con.execute("ROLLBACK")
                raise sqlite3.OperationalError("database is locked (the call was given up)")
            return
    finally:
        con.execute(f"PRAGMA busy_timeout={int(busy_s * 1000)}")  # for the statements of the call


def _locked(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in str(exc)


def _close_connections(opened: list[tuple[sqlite3.Connection, threading.Lock]]) -> None:
    for con, busy in opened:
        with busy, contextlib.suppress(sqlite3.Error):  # a worker thread may still be mid-call
            con.close()
