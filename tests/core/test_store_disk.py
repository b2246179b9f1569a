"""A full DATATHREAD_HOME: the SQLite session store and the demo database build fail in one sentence
naming the folder, leave nothing half-written behind, and the session stays as it was.

The full disk is a child process whose files may not grow past a size (tests/fakes/full_disk.py):
the real SQLite and DuckDB libraries meet a real EFBIG, for root and ordinary users alike.
"""

from __future__ import annotations

import json
import os
import textwrap

from core.store_sqlite import SqliteStore
from tests.fakes.full_disk import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(code: str, *, size: int) -> dict:
    """Run `code` (which sets `out`) in a child on a full disk; its `out` as JSON."""
    program = "import asyncio, json\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
    done = run_python(program, size=size, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def sizes(folder) -> int:
    return max((p.stat().st_size for p in folder.iterdir() if p.is_file()), default=0)


async def test_a_save_on_a_full_disk_fails_in_a_sentence_and_the_history_stays_valid(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite3")
    before = [{"role": "user", "content": [{"type": "text", "text": "how many flights?"}]}]
    await store.save_history("s1", before)
    await store.close()

    out = child(
        f"""
        from pathlib import Path
        from core.sessions import StoreUnavailable
        from core.store_sqlite import SqliteStore

        async def main():
            store = SqliteStore(Path({str(tmp_path / "state.sqlite3")!r}))
            big = [{{"role": "user", "content": [{{"type": "text", "text": "x" * 2_000_000}}]}}]
            try:
                await store.save_history("s1", big)
                return {{"saved": True}}
            except StoreUnavailable as exc:
                return {{"error": str(exc)}}
            finally:
                await store.close()

        out = asyncio.run(main())
        """,
        size=sizes(tmp_path) + 256 * 1024,
    )
    assert "error" in out, out
    assert out["error"].startswith(f"The session database in {tmp_path} cannot be written:")
    assert "DATATHREAD_HOME" in out["error"] and out["error"].count(". ") == 0  # one sentence

    store = SqliteStore(tmp_path / "state.sqlite3")  # room again: the session is as it was, and works
    try:
        assert await store.load_history("s1") == before
        after = [*before, {"role": "assistant", "content": [{"type": "text", "text": "336,776."}]}]
        await store.save_history("s1", after)
        assert await store.load_history("s1") == after
    finally:
        await store.close()


def test_a_session_database_that_cannot_be_created_is_one_sentence(tmp_path):
    home = tmp_path / "home"
    out = child(
        f"""
        from pathlib import Path
        from core.sessions import StoreUnavailable
        from core.store_sqlite import SqliteStore

        try:
            SqliteStore(Path({str(home / "state.sqlite3")!r}))
            out = {{"opened": True}}
        except StoreUnavailable as exc:
            out = {{"error": str(exc)}}
        """,
        size=0,  # not even a byte: SQLite cannot write its header
    )
    assert out.get("error", "").startswith(f"The session database in {home} cannot be written:"), out


def test_building_the_demo_database_on_a_full_disk_says_so_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "warehouse" / "nycflights13.duckdb"
    out = child(
        f"""
        from pathlib import Path
        from core.sessions import StoreUnavailable
        from core.warehouse import build_demo_database

        try:
            build_demo_database(Path({str(target)!r}))
            out = {{"built": True}}
        except StoreUnavailable as exc:
            out = {{"error": str(exc)}}
        """,
        size=2_000_000,  # the demo database is ~20 MB
    )
    assert out.get("error") == (
        f"Could not build the demo database in {target.parent}: the disk is full (or a file reached this "
        "process's size limit); free some space or set DATATHREAD_HOME to another folder."
    ), out
    assert list(target.parent.iterdir()) == []  # no nycflights13.tmp*, no .wal


def test_the_sentences_name_the_problem():
    import errno
    import sqlite3

    from core.disk_errors import disk_problem, write_failure

    full = "the disk is full (or a file reached this process's size limit)"
    cases = [
        (OSError(errno.ENOSPC, "No space left on device"), full),
        (OSError(errno.EFBIG, "File too large"), full),
        (sqlite3.OperationalError("database or disk is full"), full),
        (PermissionError(errno.EACCES, "Permission denied"), "it is read-only for this user"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "it is read-only for this user"),
        (
            sqlite3.OperationalError("disk I/O error"),
            "it could not be written (is the disk full or failing?)",
        ),
        (sqlite3.OperationalError("unable to open database file"), "unable to open database file"),
        (
            sqlite3.OperationalError("database is locked"),
            "another process has held it locked for longer than the busy wait",
        ),
    ]
    assert [disk_problem(exc) for exc, _ in cases] == [want for _, want in cases]
    assert write_failure(PermissionError(errno.EACCES, "Permission denied")) == (
        "it is read-only for this user; make it writable or set DATATHREAD_HOME to another folder"
    )
    assert "check the disk" not in write_failure(sqlite3.OperationalError("database is locked"))
