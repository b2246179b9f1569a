"""A store a newer release wrote is refused at start, in one sentence and exit code 2, by every
command that opens it and by `serve` — never read by a release that may misread it (before, nothing
marked a store: a rollback read whatever it found)."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest

from core.store_schema import STORE_SCHEMA
from tests.fakes.cli import DATATHREAD, _env, invoke
from tests.fakes.redis_server import free_port

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}


@pytest.fixture
def newer_home(tmp_path):
    """A home whose store a later release, with a layout this one does not know, has marked."""
    home = tmp_path / "home"
    home.mkdir()
    with sqlite3.connect(home / "state.sqlite3") as con:
        con.execute(
            "CREATE TABLE history (session_id TEXT PRIMARY KEY, version INTEGER, messages TEXT, expires REAL)"
        )
        con.execute(f"PRAGMA user_version = {STORE_SCHEMA + 1}")
    return home


@pytest.mark.parametrize("args", [["ask", "how many flights?"], ["audit"], ["schedule", "list"]])
def test_each_command_refuses_a_store_of_a_newer_schema(newer_home, args):
    result = invoke(args, newer_home, env=KEY)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(lines) == 1 and "newer release of datathread" in lines[0], result.stderr
    assert f"store schema {STORE_SCHEMA + 1}" in lines[0]


def test_serve_refuses_a_store_of_a_newer_schema_before_it_listens(newer_home):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env = {**base, **_env(newer_home, KEY), "DATATHREAD_ISOLATION": "none"}
    result = subprocess.run(
        [DATATHREAD, "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=newer_home.parent,
    )
    assert result.returncode == 2, result.stderr
    assert "newer release of datathread" in result.stderr and "Traceback" not in result.stderr
