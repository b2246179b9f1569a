"""The runner is forked by the spare step child before it accepts the bot's connection, and waits on a
pipe for its step (`core/step_processes.py`): checked from the host, on every back end this test
process can run. The waiting runner holds no socket (neither the fork server's listening one nor,
never having been there when it was accepted, the bot's connection); a runner gone before its step
is a clear error for that step, and the next step runs."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import pytest_asyncio

from core import isolation, step_processes
from core.sandbox import StepRequest
from tests.core.sandbox_backends import BACKENDS, start_sandbox

SESSION = "prepared-1"


@pytest_asyncio.fixture(params=BACKENDS)
async def sandbox(request, tmp_path):
    home = tmp_path / "home"
    sb = await start_sandbox(request.param, workspaces=home / "workspaces", hidden=[home])
    yield sb
    await sb.close()


def step(code: str) -> StepRequest:
    return StepRequest(kind="python", session_id=SESSION, code=code, timeout_s=10, memory_mb=512)


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def descriptors(pid: int) -> dict[int, str] | None:
    """The process's open descriptors (what each points at), or None where this test process may
    not look (a non-dumpable process, and this test process not root)."""
    try:
        return {int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except PermissionError:
        return None
    except (FileNotFoundError, ProcessLookupError):
        return {}


async def waiting_runner(sandbox) -> int:
    """The spare's runner, once it has closed what it inherited: the child of the spare that is a
    fork of the fork server (the init is a `python -S -I` of its own)."""
    zygote = sandbox._proc.pid
    for _ in range(200):
        for spare in children(zygote):
            for child in children(spare):
                if cmdline(child) == cmdline(zygote):
                    fds = descriptors(child)
                    if fds is None or len(fds) <= 5:  # 0-2 and its two pipes
                        return child
        await asyncio.sleep(0.05)
    raise AssertionError("no waiting runner found under the fork server")


async def test_the_waiting_runner_holds_no_socket(sandbox):
    assert (await sandbox.run(step("print(1)"))).ok  # the spare serving the next step is a new one
    runner = await waiting_runner(sandbox)
    fds = descriptors(runner)
    if fds is None:  # an ordinary user: the runner is non-dumpable, its descriptors not ours to read
        assert not isolation.host_root()
        pytest.skip("the waiting runner's descriptors are readable by root only (it is non-dumpable)")
    assert not [t for t in fds.values() if t.startswith("socket:")], fds
    pipes = [fd for fd, t in fds.items() if t.startswith("pipe:")]
    assert len(pipes) >= 2 and set(fds) <= {0, 1, 2, *pipes}, fds
    # stdin as the fork server was started (/dev/null); stdout and stderr pointed at /dev/null, not the log
    assert all(fds[fd] == "/dev/null" for fd in (0, 1, 2) if fd in fds), fds


async def test_a_runner_gone_before_its_step_is_a_clear_error_and_the_next_step_runs(sandbox):
    runner = await waiting_runner(sandbox)
    os.kill(runner, signal.SIGKILL)
    for _ in range(200):  # dead (a zombie its spare has not reaped), not merely signalled
        if "\nState:\tZ" in Path(f"/proc/{runner}/status").read_text():
            break
        await asyncio.sleep(0.01)
    result = await sandbox.run(step("print('ran')"))
    assert not result.ok and result.error == step_processes.GONE, result
    assert "ran" not in result.output
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42", after
