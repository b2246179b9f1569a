"""A real `datathread serve` subprocess for tests: started in a session of its own (its process group
is what a terminal, `timeout` or systemd would signal), its output in a log file, ready when
`/healthz` says 200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.bot.slack_harness import SECRET, sign
from tests.fakes.redis_server import free_port

CLI = Path(sys.executable).with_name("datathread")


def serve_env(home: Path, model_url: str, slack_url: str, **extra: str) -> dict[str, str]:
    """A replica's environment: this one's without its datathread, Slack and cloud settings, plus the
    scripted model, the fake Slack Web API and `home`; `extra` on top (REDIS_URL, DATATHREAD_LOCK_TTL)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DATATHREAD_", "AWS_", "REDIS_"))
    }
    env.update(
        ANTHROPIC_API_KEY="sk-ant-test-key-000000",
        ANTHROPIC_BASE_URL=model_url,
        DATATHREAD_MODEL="claude-test",
        DATATHREAD_MODEL_RETRIES="0",
        DATATHREAD_HOME=str(home),
        DATATHREAD_SLACK_API_URL=slack_url,
        SLACK_BOT_TOKEN="xoxb-test-token-000000",
        SLACK_SIGNING_SECRET=SECRET,
        **extra,
    )
    return env


def wait_for(predicate: Callable[[], object], timeout: float = 90, explain: Callable[[], str] = str) -> None:
    """Until `predicate` holds; timed out, the failure carries `explain()` (what the processes said)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out\n{explain()}"
        time.sleep(0.1)


class Replica:
    """One `datathread serve` subprocess."""

    def __init__(self, env: dict, workdir: Path, *, log_level: str = "WARNING"):
        self.port = free_port()
        self.log = workdir / f"replica-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(CLI),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    log_level,
                ],
                env=env,
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its turn workers share its process group: killpg kills the replica
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"replica not ready: {self.log.read_text()[-2000:]}")

    def tail(self, chars: int = 3000) -> str:
        """The end of its log (for a failure's message)."""
        return f"--- {self.log.name} ---\n{self.log.read_text(errors='replace')[-chars:]}"

    def post(self, body: dict) -> httpx.Response:
        raw = json.dumps(body)
        headers = {"content-type": "application/json", **sign(raw)}
        return httpx.post(f"{self.url}/slack/events", content=raw, headers=headers, timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
