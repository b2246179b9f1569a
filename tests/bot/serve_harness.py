"""A real `datathread serve` subprocess for tests: started in a session of its own (its process group
is what a terminal, `timeout` or systemd would signal), its output in a log file, ready when
`/healthz` says 200."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.bot.slack_harness import sign
from tests.fakes.redis_server import free_port

CLI = Path(sys.executable).with_name("datathread")


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
