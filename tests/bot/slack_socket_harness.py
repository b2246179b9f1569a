"""A real `datathread slack --socket` process for tests, as a newcomer starts it: its own process group
(what a terminal's Ctrl-C reaches), the scripted model, the fake Slack Web API and the fake Socket Mode
server on loopback; what it prints read as it prints it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import demo_database
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.cli import spawn, terminal_signals
from tests.fakes.process_output import Output
from tests.fakes.slack_api import FakeSlackAPI

CONNECTED = "Slack: connected over Socket Mode as @datathread in Fake. Ctrl-C to stop."
START_S = 180  # a cold start builds the core and its sandbox fork server: seconds on a loaded 2-core host


def demo_home(root: Path) -> Path:
    """A DATATHREAD_HOME under `root` with the demo warehouse already in place (linked, not rebuilt)."""
    home = root / "home"
    target = home / "warehouse" / "nycflights13.duckdb"
    target.parent.mkdir(parents=True)
    os.link(demo_database(), target)
    return home


class SocketBot:
    """`datathread slack --socket`, started and connected."""

    def __init__(self, home: Path, model: FakeAnthropic, api: FakeSlackAPI) -> None:
        self.home = home
        env = {
            "SLACK_BOT_TOKEN": "xoxb-socket-000000",
            "SLACK_APP_TOKEN": "xapp-socket-000000",
            "DATATHREAD_SLACK_API_URL": api.url,
            "DATATHREAD_MODEL": "claude-test",
        }
        with terminal_signals():  # stopped with Ctrl-C, even when the suite runs as a background job
            self.proc = spawn(["slack", "--socket"], home, model.url, env=env)
        self.out, self.err = Output(self.proc.stdout), Output(self.proc.stderr)
        try:
            self.err.wait_for(CONNECTED, timeout=START_S)
        except AssertionError:
            self.stop()
            raise

    def lines(self) -> list[str]:
        """What it has printed to the terminal (stderr) so far, one line each."""
        return [line for line in self.err.text.splitlines() if line.strip()]

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C

    def log(self) -> str:
        path = self.home / "logs" / "datathread.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.ctrl_c()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.finished()
        self.err.finished()


def until(predicate, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)
