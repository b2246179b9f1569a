"""A spare step child that cannot prepare its step's processes, or dies before it takes a step
(`core/zygote.py`, `core/step_processes.py`): the fork server must not fork the next at once, in a
loop (a core burned and the log flooded, as seen at a process limit); a step meets a clear sentence,
not a hang; and a spare waiting for minutes still sees what the host mounted meanwhile (its mount
namespace is a slave of the host's, not a private copy).

The failures are forced with test hooks (environment variables the fork server reads), added here to
the fork server's scrubbed environment; a lowered RLIMIT_NPROC would not bind root."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import pytest_asyncio

from core import isolation, step_processes, zygote
from core.sandbox import StepRequest
from tests.core.sandbox_backends import BACKENDS, start_sandbox

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
SESSION = "spare-1"


def step(code: str) -> StepRequest:
    return StepRequest(kind="python", session_id=SESSION, code=code, timeout_s=10, memory_mb=512)


def with_hook(monkeypatch, name: str, value: str) -> None:
    scrubbed = isolation.scrubbed_env
    monkeypatch.setattr(isolation, "scrubbed_env", lambda extra=None: {**scrubbed(extra), name: value})


def log_of(sb) -> str:
    return (sb._folder.path / "zygote.log").read_text(errors="replace")


@pytest_asyncio.fixture
async def failing(request, tmp_path, monkeypatch):
    """A sandbox whose fork server runs with the hook `request.param` = (name, value)."""
    with_hook(monkeypatch, *request.param)
    sb = await start_sandbox(BACKENDS[0], workspaces=tmp_path / "workspaces")
    yield sb
    await sb.close()


@pytest.mark.parametrize("failing", [(step_processes.PREPARE_HOOK, "fail")], indirect=True)
async def test_a_failing_preparation_refuses_the_step_with_a_sentence_and_does_not_spin(failing):
    await asyncio.sleep(2)
    assert len(log_of(failing)) < 2000, log_of(failing)[-3000:]
    # The spare that could not prepare waits for its step: one child, the same one, all along.
    spares = {p for _ in range(5) for p in children(failing._proc.pid) if not await asyncio.sleep(0.05)}
    assert len(spares) == 1, spares
    for _ in range(2):  # it tries again once the request is in; failing again, it refuses in a sentence
        result = await asyncio.wait_for(failing.run(step("print('ran')")), timeout=30)
        assert not result.ok and result.error.startswith(step_processes.NOT_PREPARED), result
        assert "ran" not in result.output
    assert "Traceback" not in log_of(failing), log_of(failing)[-3000:]


@pytest.mark.parametrize("failing", [(zygote.SPARE_HOOK, "die")], indirect=True)
async def test_spares_dying_before_their_step_are_forked_with_backoff_and_logged_once(failing):
    await asyncio.sleep(2.5)
    log = log_of(failing)
    lost = log.count("test hook: spare lost")
    # 0.05 s doubled up to 1.5 s: about seven in 2.5 s (a spin forked dozens)
    assert 1 <= lost <= 10, log[-3000:]
    assert log.count("fork server:") == 1, log[-3000:]
    assert log.count("Traceback") <= 1, log[-3000:]  # the first spare's only
    assert len(log) < 4000, log[-3000:]


def children(pid: int) -> list[int]:
    return [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]


@pytest.mark.skipif(not isolation.host_root(), reason="mounting a tmpfs on the host takes root")
async def test_a_waiting_spare_sees_what_the_host_mounted_after_it_was_prepared(tmp_path):
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    # Propagation needs the host's mount to be shared (systemd makes / shared; a container's / is
    # often private): a shared bind of the workspaces stands for such a host.
    subprocess.run(["mount", "--bind", str(workspaces), str(workspaces)], check=True)
    subprocess.run(["mount", "--make-shared", str(workspaces)], check=True)
    sb = await start_sandbox(BACKENDS[0], workspaces=workspaces)
    mounted = sb.workspace(SESSION)
    try:
        assert (await sb.run(step("print(1)"))).ok  # the next spare is prepared while the host mounts
        await asyncio.sleep(0.5)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0777", "tmpfs", str(mounted)], check=True)
        (mounted / "arrived.txt").write_text("after the spare\n")
        result = await sb.run(step("print(open('arrived.txt').read())"))
        assert result.ok and "after the spare" in result.output, result
    finally:
        await sb.close()
        subprocess.run(["umount", "-l", str(mounted)], check=False)
        subprocess.run(["umount", "-l", str(workspaces)], check=False)
