"""The fork server's start-up probe for the hard workspace quota (`isolation_backends.hard_quota_works`):
on this host's kernel it holds for the namespace back ends; where it fails (forced here, as on a kernel
without overlay in a user namespace or user xattrs on tmpfs), that back end falls back to the watchdog,
its protections row says so, and steps still run with the quota enforced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import isolation_backends, workspace_overlay
from tests.core.sandbox_backends import BACKENDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux namespaces")
NAMESPACED = [b for b in BACKENDS if b in workspace_overlay.HARD_QUOTA_BACKENDS]


def fresh(code: str, *, fail: bool) -> dict:
    """Run `code` (it prints JSON) in a fresh interpreter, as `datathread doctor` or the fork server
    start: a process that started a sandbox is no longer dumpable, and could not map a user namespace."""
    env = dict(os.environ)
    env.pop(isolation_backends.OVERLAY_PROBE_HOOK, None)
    if fail:
        env[isolation_backends.OVERLAY_PROBE_HOOK] = "fail"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


PROBE = (
    "import json, sys\nfrom core import isolation_backends as b\n"
    "row = b.preview(sys.argv[1], masked=[]).as_dict().get('workspace quota', '')\n"
    "print(json.dumps({'works': b.hard_quota_works(sys.argv[1]), 'row': row}))\n"
)


@pytest.mark.parametrize("backend", NAMESPACED)
def test_the_probe_finds_the_hard_quota_on_this_host(backend):
    out = fresh(PROBE.replace("sys.argv[1]", repr(backend)), fail=False)
    assert out["works"] and out["row"].startswith("on — hard limit"), out


@pytest.mark.parametrize("backend", NAMESPACED)
def test_a_failing_probe_falls_back_to_the_watchdog(backend):
    out = fresh(PROBE.replace("sys.argv[1]", repr(backend)), fail=True)
    assert not out["works"], out
    assert out["row"].startswith("on — watchdog") and "this kernel" in out["row"], out


FALLBACK = """
import json, os, sys, time
from pathlib import Path
from core import isolation_backends, isolation_supervisor, step_processes, workspace_overlay
from core.sandbox import StepRequest, StepResult

def flood(request, workspace):
    for i in range(40):
        with open(f"f{i}", "wb") as f:
            f.write(os.urandom(2**20))
        time.sleep(0.01)
    return StepResult(ok=True)

chosen = isolation_backends.choose(BACKEND, masked=[])
ws = Path(WS)
os.chdir(ws)
request = StepRequest(kind="python", session_id="probe", timeout_s=20, memory_mb=1024)
# As the fork server's spare prepares it: its own mount namespace only where the layer is available.
prepared = step_processes.prepare(flood, pid_namespace=False, own_mounts=workspace_overlay.AVAILABLE)
result = isolation_supervisor.supervise(
    prepared, request=request, stream=None, workspace=ws,
    quota=isolation_supervisor.Quota(8 * 2**20, 1000), hard_quota=True,
)
row = chosen.report.as_dict()["workspace quota"]
print(json.dumps({"row": row, "available": workspace_overlay.AVAILABLE, "result": result and result.to_dict()}))
"""


@pytest.mark.parametrize("backend", NAMESPACED)
def test_with_the_fallback_a_step_runs_under_the_watchdog(backend, tmp_path):
    """The fork server's choice, made with the probe failing (in a fresh process: it enters namespaces
    for good); a supervisor asked for the hard quota runs the step with the watchdog instead: the step
    runs (it is not refused), writes the workspace directly, and is stopped once past the quota."""
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o777)
    out = fresh(FALLBACK.replace("BACKEND", repr(backend)).replace("WS", repr(str(ws))), fail=True)
    assert out["row"].startswith("on — watchdog") and not out["available"], out
    result = out["result"]
    assert (
        result and not result["ok"] and "filled the thread's workspace past its limit" in result["error"]
    ), out
    landed = sum(p.stat().st_size for p in ws.iterdir())
    assert landed + 2**20 > 8 * 2**20 and landed < 40 * 2**20, landed  # written directly, stopped past it
