"""The `root` and `userns` back ends give each step a fresh root (`core/isolation_root.py`): an empty
tmpfs holding only the runtime, the venv, the `core` package, system libraries, a few device files,
its own /proc, a private /tmp, the workspace and (warehouse steps) the warehouse, then `pivot_root`.
Checked against what the host knows it bound; other back ends report what they do instead."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import pytest_asyncio

from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from tests.core.sandbox_backends import BACKENDS, start_sandbox

module_loop = pytest.mark.asyncio(loop_scope="module")
SESSION = "fresh-1"
SKELETON = {
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "usr",
    "etc",
    "dev",
    "proc",
    "run",
    "root",
    "tmp",
}
CORE = str(Path(__file__).resolve().parents[2] / "core")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandbox(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("fresh") / "home"
    (home / "workspaces" / "other-session").mkdir(parents=True)
    (home / "workspaces" / "other-session" / "theirs.csv").write_text("secret")
    (home / "state.db").write_text("state")
    sb = await start_sandbox(request.param, workspaces=home / "workspaces", hidden=[home])
    yield sb
    await sb.close()


def fresh(sandbox: LocalSandbox) -> bool:
    return sandbox.backend in ("root", "userns")


async def run(sandbox: LocalSandbox, code: str) -> str:
    result = await sandbox.run(StepRequest(kind="python", session_id=SESSION, code=code, timeout_s=20))
    assert result.ok, result
    return result.output


@module_loop
async def test_the_filesystem_row_says_what_each_back_end_does(sandbox):
    row = sandbox.protections()["filesystem"]
    if fresh(sandbox):
        assert row.startswith("on") and "fresh root" in row, row
    else:
        assert "fresh root" not in row, row


@module_loop
async def test_the_step_sees_only_what_it_was_given(sandbox):
    if not fresh(sandbox):
        return
    workspace = str(sandbox.workspace(SESSION).resolve())
    bound = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, CORE)} | {workspace})
    code = (
        "import json, os\n"
        f"bound = {bound!r}\n"
        "seen = []\n"
        "for top in sorted(os.listdir('/')):\n"
        "    if top in ('usr', 'proc', 'dev', 'etc', 'tmp') or os.path.islink('/' + top):\n"
        "        continue\n"
        "    for root, dirs, files in os.walk('/' + top):\n"
        "        seen += [os.path.join(root, n) for n in dirs + files]\n"
        "        dirs[:] = [d for d in dirs if os.path.join(root, d) not in bound]\n"
        "print(json.dumps({'top': sorted(os.listdir('/')), 'seen': seen, 'etc': sorted(os.listdir('/etc')),\n"
        "    'dev': sorted(os.listdir('/dev')), 'absent': [d for d in ('/home', '/srv', '/opt', '/var', '/root',\n"
        "    '/etc/shadow', '/etc/passwd', '/run/lock', '/var/run') if not os.path.lexists(d)]}))\n"
    )
    view = json.loads(await run(sandbox, code))
    tops = {p.split("/")[1] for p in bound}
    assert set(view["top"]) <= SKELETON | tops, view["top"]

    def on_the_way(path: str) -> bool:  # a directory leading to something bound, or bound itself
        return any(b == path or b.startswith(path + "/") for b in bound)

    assert [p for p in view["seen"] if not on_the_way(p)] == [], "the step sees more than it was given"
    assert set(view["etc"]) <= {"ld.so.cache", "localtime"}, view["etc"]
    assert set(view["dev"]) <= {
        "fd",
        "full",
        "null",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "urandom",
        "zero",
    }
    for path in ("/etc/shadow", "/etc/passwd", "/srv", "/opt", "/var"):
        assert path in view["absent"], path
    # /home: absent, unless the runtime or the checkout lives there; /root: always there, empty but for
    # the way to a runtime there (the walk above checked that it holds nothing else)
    assert "/home" in view["absent"] or any(b.startswith("/home/") for b in bound)
    assert "/root" not in view["absent"]


@module_loop
async def test_other_workspaces_and_the_state_are_not_there(sandbox):
    if not fresh(sandbox):
        return
    workspace = sandbox.workspace(SESSION).resolve()
    code = f"import os\nprint(sorted(os.listdir({str(workspace.parent)!r})), os.path.exists({str(workspace.parent.parent / 'state.db')!r}))"
    assert (await run(sandbox, code)).split("] ") == [f"[{SESSION!r}", "False\n"]


@module_loop
async def test_nothing_outside_the_workspace_and_tmp_is_writable(sandbox):
    if not fresh(sandbox):
        return
    code = (
        "import os\n"
        "for path in ('/x', '/usr/x', '/etc/x', '/run/x', '/dev/x', os.path.dirname(os.getcwd()) + '/x'):\n"
        "    try:\n"
        "        open(path, 'w').close()\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
        "open('/tmp/scratch', 'w').write('ok')\n"
        "open('here.txt', 'w').write('ok')\n"
        "print('done')\n"
    )
    out = await run(sandbox, code)
    if sandbox.workspace(SESSION).resolve().is_relative_to("/tmp"):
        # (a test's workspace under /tmp: its parent then lies in the step's own scratch /tmp, a
        # private tmpfs thrown away with the step — writable in a user namespace, and harmless)
        out = out.replace(f"wrote {sandbox.workspace(SESSION).resolve().parent}/x\n", "refused -\n")
    assert "wrote" not in out and out.count("refused") == 6 and out.strip().endswith("done"), out
    assert (sandbox.workspace(SESSION) / "here.txt").read_text() == "ok"


@module_loop
async def test_the_data_stack_works_in_it(sandbox):
    """matplotlib (fonts, Agg), pandas, numpy, pyarrow and DuckDB, each loading what it loads lazily."""
    code = (
        "import pandas as pd, numpy as np, duckdb, matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'a': np.arange(5), 'b': np.linspace(0, 1, 5)})\n"
        "df.plot.bar(x='a', y='b'); plt.title('Délais ✓'); plt.savefig('chart.png', dpi=50)\n"
        "df.to_parquet('t.parquet')\n"
        "print(duckdb.sql(\"SELECT count(*) FROM 't.parquet'\").fetchall()[0][0], pd.Timestamp('2024-01-01', tz='Europe/Berlin').utcoffset())\n"
    )
    assert (await run(sandbox, code)).split() == ["5", "1:00:00"]
    assert (sandbox.workspace(SESSION) / "chart.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_venv_reached_through_a_symlink_imports_in_the_step_as_on_the_host(
    backend, tmp_path, monkeypatch
):
    """The fork server started through a symlink to the venv (`/app/.venv -> /opt/venv`): what the
    step imports lazily lies under the link's path, which the fresh root must give it too."""
    link = tmp_path / "venv-link"
    link.symlink_to(os.path.realpath(sys.prefix), target_is_directory=True)
    monkeypatch.setattr(sys, "executable", str(link / "bin" / Path(sys.executable).name))
    sb = await start_sandbox(backend, workspaces=tmp_path / "workspaces")
    try:
        code = (
            "import sys, pandas as pd\n"
            "pd.DataFrame({'a': [1, 2]}).to_parquet('t.parquet')\n"
            "print(int(pd.read_parquet('t.parquet').a.sum()), sys.prefix)\n"
        )
        result = await sb.run(StepRequest(kind="python", session_id=SESSION, code=code, timeout_s=20))
        assert result.ok, result
        assert result.output.split() == ["3", str(link)]
    finally:
        await sb.close()
