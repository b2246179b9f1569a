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


def waiting_to_read(pid: int) -> bool:
    """Whether the process sleeps in a pipe read (its request): past its set-up. Counting its
    descriptors to tell was a race — between closing what it inherited and pointing stdout and stderr
    at /dev/null it holds as few, and a test that looked then failed. A kernel that hides where a
    process sleeps (wchan "0") is taken at its descriptors, as before."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    if wchan in ("", "0"):
        return len(descriptors(pid) or {}) <= 5  # 0-2 and its two pipes
    return "pipe_read" in wchan


async def waiting_runner(sandbox) -> int:
    """The spare's runner, once it waits for its request: the child of the spare that is a fork of
    the fork server (the init is a `python -S -I` of its own)."""
    zygote = sandbox._proc.pid
    for _ in range(200):
        for spare in children(zygote):
            for child in children(spare):
                mine = cmdline(child) == cmdline(zygote)
                if mine and (descriptors(child) is None or waiting_to_read(child)):
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


def nspid(pid: int) -> list[int]:
    """The process's pid in each PID namespace it is in, the host's first (NSpid in its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(n) for n in line.split()[1:]]
    return []


def alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def init_of(runner: int) -> int | None:
    """The init its spare spawned beside the runner (a `python -S -I`, not a fork of the fork server)."""
    spare = int(Path(f"/proc/{runner}/stat").read_text().rsplit(")", 1)[1].split()[1])
    others = [c for c in children(spare) if c != runner and cmdline(c) != cmdline(runner)]
    return others[0] if others else None


async def test_the_waiting_runner_is_pid_2_under_its_init_pid_1(sandbox):
    assert (await sandbox.run(step("print(1)"))).ok
    runner = await waiting_runner(sandbox)
    init = init_of(runner)
    if init is None:  # a back end without a PID namespace has no init: the runner is in the host's
        assert len(nspid(runner)) == 1, nspid(runner)
        pytest.skip("this back end gives the step no PID namespace")
    assert nspid(runner)[1:] == [2] and nspid(init)[1:] == [1], (nspid(runner), nspid(init))


async def test_a_runner_gone_before_its_step_is_a_clear_error_and_the_next_step_runs(sandbox):
    runner = await waiting_runner(sandbox)
    init = init_of(runner)
    os.kill(runner, signal.SIGKILL)
    for _ in range(200):  # dead (a zombie its spare has not reaped), not merely signalled
        if "\nState:\tZ" in Path(f"/proc/{runner}/status").read_text():
            break
        await asyncio.sleep(0.01)
    result = await sandbox.run(step("print('ran')"))
    assert not result.ok and result.error == step_processes.GONE, result
    assert "ran" not in result.output
    if init is not None:  # the step's init went with it (not merely signalled: no zombie either)
        for _ in range(200):
            if not alive(init):
                break
            await asyncio.sleep(0.01)
        assert not alive(init), init
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42", after


def test_a_runner_the_supervisor_could_not_watch_is_reaped_before_its_init(monkeypatch, tmp_path):
    """`_watch` failing before it watches (pidfd_open refused, say) still kills and reaps the runner,
    and says so only then: `end()` would otherwise skip it and the init wait for its zombie for good."""
    from core import isolation_supervisor

    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        signal.pause()
        os._exit(0)
    os.close(result_w)
    prepared = step_processes.Prepared(runner=pid, order=-1, result=result_r)

    def refused(_pid):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(isolation_supervisor.os, "pidfd_open", refused)
    with pytest.raises(OSError):
        isolation_supervisor._watch(prepared, tmp_path, isolation_supervisor.Quota(1, 1))
    assert prepared.reaped
    with pytest.raises(ChildProcessError):  # reaped by `_watch`, not left for `end()`
        os.waitpid(pid, os.WNOHANG)
    prepared.end()
