"""The console script two ways: `run` starts `.venv/bin/datathread` as a user's shell does (a fresh
process, a clean environment, the home's parent as working directory); `invoke` calls the same typer
app in this process with the same environment and working directory — for the many calls of one
test after the entry point itself has been exercised, since each process start costs seconds.

Pipes are text with `surrogateescape`, as Python's own argv is: a test's "M\\udcfcnchen" on stdin is
the byte 0xFC a Latin-1 file would give the command, and a byte the command writes that is not UTF-8
reaches the test as the same escape instead of a UnicodeDecodeError in the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

DATATHREAD = str(Path(sys.executable).parent / "datathread")
_OURS = ("ANTHROPIC", "DATATHREAD", "SLACK")


def _env(home: Path, env: dict | None) -> dict:
    base = {"DATATHREAD_HOME": str(home), "DATATHREAD_STEP_TIMEOUT": "20", "DATATHREAD_MODEL_RETRIES": "0"}
    return {**base, **(env or {})}


@contextmanager
def terminal_signals():
    """Ctrl-C and a closing window as an interactive terminal has them, for this process and the
    subprocesses started meanwhile: Python's SIGINT handler here, the default SIGINT and SIGHUP after
    their exec. A suite started as a background job (`make test &`, `nohup`, a CI runner's) inherits
    SIGINT ignored, and under `nohup` SIGHUP too, which an exec keeps: the product then rightly
    ignores them (test_terminal_chat.py's nohup test), and a test that stops its process with Ctrl-C
    waits out its timeout for a reason that is not the product's."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGHUP, previous_hup)


def spawn(
    args: list[str], home: Path, fake_url: str, *, stdin: bool = False, env: dict | None = None
) -> subprocess.Popen:
    """`datathread ARGS` left running against the scripted model at `fake_url`, its pipes open, in a
    process group of its own as a terminal's foreground job is (so a test's signal reaches it alone)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    settings = base | {
        "DATATHREAD_HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "ANTHROPIC_BASE_URL": fake_url,
        "DATATHREAD_MODEL_RETRIES": "0",
    }
    return subprocess.Popen(
        [DATATHREAD, *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",
        env=settings | (env or {}),
        cwd=home.parent,
        start_new_session=True,
    )


def start_chat(home: Path, fake_url: str, session: str) -> subprocess.Popen:
    """`datathread chat --session SESSION` left running, reading questions from its stdin pipe."""
    return spawn(["chat", "--session", session], home, fake_url, stdin=True)


def run(
    args: list[str], home: Path, *, env: dict | None = None, stdin: str = "", merged: bool = False
) -> subprocess.CompletedProcess:
    """`datathread ARGS` to its end; `merged`: stderr into stdout, as `2>&1 | less` reads them."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    return subprocess.run(
        [DATATHREAD, *args],
        input=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        errors="surrogateescape",
        timeout=120,
        env={**base, **_env(home, env)},
        cwd=home.parent,
    )


def invoke(
    args: list[str], home: Path, *, env: dict | None = None, stdin: str = ""
) -> subprocess.CompletedProcess:
    """`run` without the process start: exit code, stdout and stderr of the typer app in process."""
    from typer.testing import CliRunner

    from bot.cli import app

    unset = {k: None for k in os.environ if k.startswith(_OURS)}  # as `run`'s clean environment
    cwd = os.getcwd()
    os.chdir(home.parent)
    try:
        result = CliRunner().invoke(app, args, env={**unset, **_env(home, env)}, input=stdin)
    finally:
        os.chdir(cwd)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


async def recorded_turns(home) -> list[dict]:
    """The audit trail the subprocess left in DATATHREAD_HOME (what `datathread audit` prints)."""
    from core.config import load_settings
    from core.sessions import open_store

    store = await open_store(load_settings(_env_file=None, home=home))
    try:
        return await store.list_turns(session_id=None, user_id=None, channel_id=None, since=None, limit=10)
    finally:
        await store.close()
