"""The console script on a full DATATHREAD_HOME, as a newcomer meets it: a command that cannot start
says so in one sentence naming the folder (exit 2) and leaves no half-built demo database; a turn
whose history cannot be saved fails in a sentence, and the session goes on once there is room.

The full disk is the child's file-size limit (tests/fakes/full_disk.py), so root and ordinary users
meet the same EFBIG."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from core.config import load_settings
from core.sessions import open_store, session_id_for
from tests.fakes.anthropic_api import text
from tests.fakes.cli import DATATHREAD, run
from tests.fakes.full_disk import files_limited_to
from tests.fakes.redis_server import free_port

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}


def run_full(args: list[str], home: Path, *, size: int, env: dict) -> subprocess.CompletedProcess:
    """`tests.fakes.cli.run` in a child whose files may not grow past `size` bytes."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    return subprocess.run(
        [DATATHREAD, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "DATATHREAD_HOME": str(home), "DATATHREAD_MODEL_RETRIES": "0", **env},
        cwd=home.parent,
        preexec_fn=files_limited_to(size),
    )


def one_line(output: str) -> str:
    return " ".join(output.split())  # the terminal wraps a long sentence


def test_ask_on_a_full_home_says_so_in_one_sentence_and_leaves_no_half_built_database(tmp_path):
    home = tmp_path / "home"
    result = run_full(["ask", "how many flights?"], home, size=2_000_000, env=KEY)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    warehouse = home / "warehouse"
    assert one_line(result.stderr).startswith(
        f"error: Could not build the demo database in {warehouse}: the disk"
    )
    assert "DATATHREAD_HOME" in result.stderr
    assert list(warehouse.iterdir()) == []  # no nycflights13.tmp*, no .wal


def test_serve_on_a_full_home_stops_before_starting_in_one_sentence(tmp_path):
    home = tmp_path / "home"
    result = run_full(["serve", "--port", str(free_port())], home, size=2_000_000, env=KEY)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "startup failed" not in result.stderr
    assert one_line(result.stderr).startswith(
        f"error: Could not build the demo database in {home / 'warehouse'}"
    )
    assert list((home / "warehouse").iterdir()) == []


def test_a_turn_that_cannot_be_saved_fails_in_a_sentence_and_the_session_goes_on(home, fake_model):
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text("First answer."))
    first = run(["ask", "how many flights?", "--session", "full"], home, env=env)
    assert first.returncode == 0, first.stderr

    room = max(p.stat().st_size for p in home.iterdir() if p.is_file()) + 32 * 1024
    store_full = (
        f"error: I can't use my session store right now (The session database in {home} cannot be written:"
    )
    # A question too big to record: it fails before any model call (a turn is recorded as it starts).
    calls = len(fake_model.requests)
    big = "how many flights? " + "x" * 100_000
    early = run_full(["ask", big, "--session", "full"], home, size=room, env=env)
    assert early.returncode == 1 and "Traceback" not in early.stderr, early.stderr
    assert store_full in one_line(early.stderr) and "Nothing was changed" in one_line(early.stderr)
    assert len(fake_model.requests) == calls  # nothing spent on an answer that could not be kept

    # An answer too big to save: it ran, and it says so.
    fake_model.enqueue(text("An answer that cannot be kept. " + "x" * 100_000))
    full = run_full(["ask", "how many flights?", "--session", "full"], home, size=room, env=env)
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    said = one_line(full.stderr)
    assert store_full in said
    assert ", so this answer was not saved; please try again shortly." in said  # it ran

    fake_model.enqueue(text("Still here."))
    again = run(["ask", "and now?", "--session", "full"], home, env=env)
    assert again.returncode == 0 and "Still here." in again.stdout, again.stderr

    async def history() -> list[dict]:
        store = await open_store(load_settings(_env_file=None, home=home))
        try:
            return await store.load_history(session_id_for("terminal", ("full",)))
        finally:
            await store.close()

    said_in_thread = [
        b["text"] for m in asyncio.run(history()) for b in m["content"] if b.get("type") == "text"
    ]
    assert "First answer." in said_in_thread and "Still here." in said_in_thread
    assert not any("x" * 1000 in t for t in said_in_thread)  # the failed turn left nothing half-saved
