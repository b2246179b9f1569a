"""The bot's state stays out of a step's fresh root even where it lies inside something the root binds
read-only: a DATATHREAD_HOME (sessions, logs, every workspace) placed inside the venv must show as an
empty directory, holding only the way to the step's own workspace (`core/isolation_root.py`)."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import pytest
import pytest_asyncio

from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from tests.core.sandbox_backends import BACKENDS, sandbox_options

module_loop = pytest.mark.asyncio(loop_scope="module")
SESSION = "hidden-1"


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def home_in_venv(request):
    home = Path(sys.prefix).resolve() / f"datathread-home-{uuid.uuid4().hex[:8]}"
    (home / "workspaces" / "other-session").mkdir(parents=True)
    (home / "workspaces" / "other-session" / "theirs.csv").write_text("OTHER-SESSION-ROW")
    (home / "sessions.db").write_text("STATE-ROW")
    (home / "logs").mkdir()
    sb = LocalSandbox(workspaces=home / "workspaces", hidden=[home], **sandbox_options(request.param))
    try:
        await sb.start()
    except RuntimeError as exc:
        await sb.close()
        shutil.rmtree(home)
        pytest.skip(str(exc))
    yield sb, home
    await sb.close()
    shutil.rmtree(home, ignore_errors=True)


@module_loop
async def test_state_inside_a_bound_path_does_not_show_through(home_in_venv):
    sb, home = home_in_venv
    if sb.backend not in ("root", "userns"):
        return  # no fresh root: Landlock allows reading the whole venv (docs/SECURITY.md says so)
    workspace = sb.workspace(SESSION)
    code = (
        "import json, os\n"
        f"home = {str(home)!r}\n"
        "seen = [os.path.join(r, n) for r, d, f in os.walk(home) for n in d + f]\n"
        "venv = sorted(os.listdir(os.path.dirname(home)))\n"
        "try:\n"
        "    open(os.path.join(home, 'planted'), 'w').write('x')\n"
        "    wrote = True\n"
        "except OSError:\n"
        "    wrote = False\n"
        "open('mine.txt', 'w').write('ok')\n"
        "print(json.dumps({'seen': seen, 'venv': venv, 'wrote': wrote}))\n"
    )
    result = await sb.run(StepRequest(kind="python", session_id=SESSION, code=code, timeout_s=20))
    assert result.ok, result
    view = json.loads(result.output)
    # only the way down to its own workspace (and what that holds)
    ws = str(workspace.resolve())
    assert [
        p for p in view["seen"] if not (ws == p or ws.startswith(p + "/") or p.startswith(ws + "/"))
    ] == []
    assert home.name in view["venv"]  # the venv itself is still there (the step needs it)
    assert view["wrote"] is False and not (home / "planted").exists()
    assert (workspace / "mine.txt").read_text() == "ok"  # its own workspace still works, and lands
