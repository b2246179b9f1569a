"""The fork server's start-up probe for the hard workspace quota (`isolation_backends.hard_quota_works`):
on this host's kernel it holds for the namespace back ends; where it fails (forced here, as on a kernel
without overlay in a user namespace or user xattrs on tmpfs), that back end falls back to the watchdog,
its protections row says so, and steps still run with the quota enforced."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from core import isolation_backends, isolation_supervisor, workspace_overlay
from core.sandbox import StepRequest, StepResult
from tests.core.sandbox_backends import BACKENDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
NAMESPACED = [b for b in BACKENDS if b in workspace_overlay.HARD_QUOTA_BACKENDS]


@pytest.mark.parametrize("backend", NAMESPACED)
def test_the_probe_finds_the_hard_quota_on_this_host(backend):
    assert isolation_backends.hard_quota_works(backend)
    row = isolation_backends.preview(backend, masked=[]).as_dict()["workspace quota"]
    assert row.startswith("on — hard limit"), row


@pytest.mark.parametrize("backend", NAMESPACED)
def test_a_failing_probe_falls_back_to_the_watchdog(backend, monkeypatch):
    monkeypatch.setenv(isolation_backends.OVERLAY_PROBE_HOOK, "fail")
    assert not isolation_backends.hard_quota_works(backend)
    row = isolation_backends.preview(backend, masked=[]).as_dict()["workspace quota"]
    assert row.startswith("on — watchdog") and "this kernel" in row, row


def _flood() -> StepResult:
    for i in range(40):
        with open(f"f{i}", "wb") as f:
            f.write(os.urandom(2**20))
        time.sleep(0.01)
    return StepResult(ok=True)


@pytest.mark.parametrize("backend", NAMESPACED)
def test_with_the_fallback_a_step_runs_under_the_watchdog(backend, monkeypatch, tmp_path):
    """The fork server's choice, made with the probe failing, in a child (it enters namespaces for good);
    a supervisor asked for the hard quota runs the step with the watchdog instead: the step runs (it is
    not refused), and is stopped once past the quota."""
    monkeypatch.setenv(isolation_backends.OVERLAY_PROBE_HOOK, "fail")
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o777)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            chosen = isolation_backends.choose(backend, masked=[])
            row = chosen.report.as_dict()["workspace quota"]
            os.chdir(ws)
            request = StepRequest(kind="python", session_id="probe", timeout_s=20, memory_mb=1024)
            result = isolation_supervisor.supervise(
                _flood,
                request=request,
                inherited=[],
                workspace=ws,
                quota=isolation_supervisor.Quota(8 * 2**20, 1000),
                hard_quota=True,
            )
            out = {
                "row": row,
                "available": workspace_overlay.AVAILABLE,
                "result": result and result.to_dict(),
            }
            os.write(write_end, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    out = json.loads(raw)
    assert out["row"].startswith("on — watchdog") and not out["available"], out
    result = out["result"]
    assert (
        result and not result["ok"] and "filled the thread's workspace past its limit" in result["error"]
    ), out
    landed = sum(p.stat().st_size for p in ws.iterdir())
    assert landed + 2**20 > 8 * 2**20 and landed < 40 * 2**20, landed  # written directly, stopped past it
