"""What a user got wrong is said before the expensive work: the console script's `main` in a fresh
process, which reports at exit which of the heavy libraries it imported. A missing key, a port in use,
a host not of this machine, an unknown session each end in one sentence before the Claude SDK, Slack,
Teams, DuckDB or the notebook stack is imported (each seconds of CPU on a loaded host; the core's
sandbox and demo warehouse come after them), and no demo warehouse is built. Before, `serve` without
a key imported Slack and the core first (12.6 s), `schedule run-now` the scheduler's whole stack
(9 s), `eval --demo` the core (8.2 s), `export` of an unknown session the notebook and core stacks
(7.3 s), and a port in use was found after the app was built (14-15 s), where `ask` took 2.2 s. Later,
a half-set Slack or Teams pair (`serve`) and a missing Socket Mode token (`slack --socket`) were said
after Slack's, Teams' and the core's imports (~3 s; now ~0.4 s)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.cli import invoke

HEAVY = ("anthropic", "slack_bolt", "slack_sdk", "botbuilder", "duckdb", "pandas", "nbformat", "starlette")
KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}

# `datathread ARGS` as the console script runs it, then, at exit, the heavy top-level packages it had
# imported, written to the file named by the first argument (stderr stays the user's).
PROBE = """
import atexit, json, sys
report = sys.argv.pop(1)
heavy = json.loads(sys.argv.pop(1))
def write():
    with open(report, "w") as out:
        json.dump(sorted({m.split(".")[0] for m in sys.modules} & set(heavy)), out)
atexit.register(write)
sys.argv[0] = "datathread"
from bot.cli import main
main()
"""


def run_probed(
    args: list[str], home: Path, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, list]:
    """`datathread ARGS` in a fresh process with a clean environment (as tests/fakes/cli.run), and the
    heavy packages it imported."""
    report = home.parent / "imported.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), json.dumps(HEAVY), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "DATATHREAD_HOME": str(home), **(env or {})},
        cwd=home.parent,
    )
    return result, json.loads(report.read_text())


def one_sentence(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A DATATHREAD_HOME not made yet, as in a fresh clone (conftest's comes with the demo warehouse)."""
    return tmp_path / "home"


@pytest.fixture
def taken_port():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "env", "code", "words"),
    [
        (["ask", "hi"], {}, 2, "No Claude API key"),  # the reference: it always checked first
        (["serve"], {}, 2, "No Claude API key"),
        (["serve", "--host", "no-such-host.invalid"], KEY, 2, "is not a name or address"),
        (["eval", "--demo"], {}, 2, "No Claude API key"),
        (["export", "nosuch"], {}, 1, "No questions recorded under session nosuch in "),
        (["schedule", "run-now", "nosuch"], KEY, 2, "No schedule has the id 'nosuch'"),
        (["serve"], {**KEY, "SLACK_BOT_TOKEN": "xoxb-1"}, 2, "SLACK_SIGNING_SECRET is not"),
        (["serve"], {**KEY, "MICROSOFT_APP_PASSWORD": "pw"}, 2, "MICROSOFT_APP_ID is not"),
        (["slack", "--socket"], KEY, 2, "Set SLACK_BOT_TOKEN"),
        (["slack", "--socket"], {**KEY, "SLACK_BOT_TOKEN": "xoxb-1"}, 2, "Set SLACK_APP_TOKEN"),
    ],
    ids=[
        "ask",
        "serve-no-key",
        "serve-bad-host",
        "eval-demo-no-key",
        "export-unknown",
        "run-now-unknown",
        "serve-slack-half-set",
        "serve-teams-half-set",
        "socket-no-bot-token",
        "socket-no-app-token",
    ],
)
def test_a_mistake_is_said_before_the_heavy_work(args, env, code, words, home):
    result, imported = run_probed(args, home, env)
    assert result.returncode == code, result.stderr
    assert words in one_sentence(result)
    assert imported == [], f"imported {imported} before saying it"
    assert not (home / "warehouse").exists()  # the demo warehouse was not built


def test_export_where_nothing_was_asked_names_the_place_and_makes_no_state_there(home):
    """Run in another folder than the one chatted in: "Session s1 has no recorded questions" suggested a
    session that exists, and the look left an empty state home behind in that folder."""
    result, _ = run_probed(["export", "s1"], home, {})
    assert result.returncode == 1, result.stderr
    assert one_sentence(result) == (
        f"error: No questions recorded under session s1 in {home.resolve()}: `datathread audit` lists the "
        "sessions there (run export where you chatted, or set DATATHREAD_HOME)."
    )
    assert not home.exists()


def test_a_port_in_use_is_said_before_the_app_is_built(home, taken_port):
    result, imported = run_probed(["serve", "--port", str(taken_port)], home, KEY)
    assert result.returncode == 2, result.stderr
    assert f"port {taken_port} on 127.0.0.1 is in use" in one_sentence(result)
    assert imported == [] and not (home / "warehouse").exists()


def test_run_now_without_a_key_is_said_before_the_scheduler_stack(home):
    add = ["schedule", "add", "--cron", "0 9 * * mon", "--surface", "slack", "--channel", "C1", "q"]
    schedule_id = invoke(add, home).stdout.strip()
    result, imported = run_probed(["schedule", "run-now", schedule_id], home)
    assert result.returncode == 2, result.stderr
    assert "No Claude API key" in one_sentence(result)
    assert imported == [] and not (home / "warehouse").exists()


def test_serve_with_teams_warns_when_its_download_links_lead_to_this_machine(home, taken_port):
    """Teams' channel downloads are links signed with DATATHREAD_PUBLIC_URL; left at its default
    (http://localhost:3000) they lead every colleague to their own machine, and only teams-package
    said so."""
    teams = {
        "MICROSOFT_APP_ID": "00000000-0000-0000-0000-000000000001",
        "MICROSOFT_APP_PASSWORD": "pw",
        "MICROSOFT_APP_TENANT_ID": "00000000-0000-0000-0000-000000000002",
    }
    result, _ = run_probed(["serve", "--port", str(taken_port)], home, {**KEY, **teams})
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 2, result.stderr
    assert lines[0].startswith(
        "warning: DATATHREAD_PUBLIC_URL is http://localhost:3000, which only this machine"
    )
    public = {"DATATHREAD_PUBLIC_URL": "https://bot.example.com"}
    result, _ = run_probed(["serve", "--port", str(taken_port)], home, {**KEY, **teams, **public})
    assert "warning" not in result.stderr and f"port {taken_port}" in one_sentence(result)
