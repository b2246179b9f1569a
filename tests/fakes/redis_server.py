"""A throwaway, real `redis-server` on a free loopback port, for the store and replica tests.

Not a fake: the real server binary, started with no persistence (unless a test asks for an AOF to
survive a crash) in a temp directory, and stopped (or SIGKILLed) by the test. In CI (`CI=true`) a
missing binary fails the test — `.ci/run` installs Redis — while locally the test is skipped with
the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest


def redis_binary() -> str:
    """The redis-server path; an error in CI and a skip elsewhere when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return found
    reason = "redis-server is not installed (apt-get install redis-server) — the Redis store tests need it"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; in CI this is an error, not a skip.", pytrace=False)
    pytest.skip(reason)
    raise AssertionError("unreachable")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process. `persist=True` keeps an fsync-always AOF in its directory, so a
    SIGKILLed server restarted with `start()` comes back with what it had acknowledged. `password`:
    started with `--requirepass`, as a production Redis often is (`url` then leaves it out)."""

    def __init__(self, *, persist: bool = False, password: str | None = None) -> None:
        self.binary = redis_binary()
        self.port = free_port()
        self.persist = persist
        self.password = password
        self.dir = Path(tempfile.mkdtemp(prefix="datathread-redis-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start (or restart on the same port and directory) and wait until it answers PING."""
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        args += ["--save", "", "--daemonize", "no", "--loglevel", "warning"]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        args += ["--requirepass", self.password] if self.password else []
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"redis-server exited at start: {err.strip()[-500:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer on port {self.port} within 10 s")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                return self._say(s, b"PING").startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as in a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def flush(self) -> None:
        """Empty every database (between tests sharing one server)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            assert self._say(s, b"FLUSHALL").startswith(b"+OK")

    def _say(self, s: socket.socket, command: bytes) -> bytes:
        """`command`'s reply on connection `s`, after AUTH when the server wants a password."""
        if self.password:
            s.sendall(f"AUTH {self.password}\r\n".encode())
            if not s.recv(16).startswith(b"+OK"):
                return b""
        s.sendall(command + b"\r\n")
        return s.recv(16)

    def stop(self) -> None:
        """Terminate the server and remove its directory."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
