"""Sandbox isolation: what LocalSandbox reports, that a step breaking a limit is killed and reported
while the next step works, and the bot-side path checks (pure helpers, table-driven)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import pytest_asyncio

from core import isolation
from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox, read_inside, resolve_in_workspace, write_inside

module_loop = pytest.mark.asyncio(loop_scope="module")
ROOT = os.geteuid() == 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox(tmp_path_factory):
    home = tmp_path_factory.mktemp("iso") / "home"
    sb = LocalSandbox(workspaces=home / "workspaces", hidden=[home])
    await sb.start()
    yield sb
    await sb.close()


def step(code: str, **kw) -> StepRequest:
    return StepRequest(
        kind="python", session_id="iso-1", code=code, **{"timeout_s": 3, "memory_mb": 512, **kw}
    )


@module_loop
async def test_protections_are_reported(sandbox):
    p = sandbox.protections()
    for name in ("network", "environment", "limits", "privileges", "wall time", "uid", "filesystem"):
        assert name in p, name
    assert p["network"].startswith("on") and p["limits"].startswith("on")
    if ROOT:
        assert all(v.startswith("on") for v in p.values()), p
    else:
        assert p["uid"].startswith("OFF")


@module_loop
@pytest.mark.parametrize(
    ("code", "extra", "message"),
    [
        ("while True:\n    pass", {}, "time limit"),
        ("x = bytearray(2 * 1024 ** 3)", {}, "MemoryError"),
        ("open('big.bin', 'wb').write(b'0' * 3 * 1024 * 1024)", {"file_mb": 1}, "File too large"),
        ("import os\nos.kill(os.getpid(), 9)", {}, "ended without a result"),
        ("fs = [open('f%d' % i, 'w') for i in range(1000)]", {}, "Too many open files"),
    ],
    ids=["wall-time", "memory", "file-size", "crash", "open-files"],
)
async def test_a_step_that_breaks_a_limit_is_reported_and_the_next_works(sandbox, code, extra, message):
    broken = await sandbox.run(step(code, **extra))
    assert not broken.ok and message in broken.error, broken.error
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42"


@module_loop
@pytest.mark.skipif(not ROOT, reason="the per-session uid (and so the process cap) needs root")
async def test_process_count_is_capped(sandbox):
    code = (
        "import os, time\nn = 0\ntry:\n    for _ in range(200):\n        if os.fork() == 0:\n"
        "            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('capped', n, e)"
    )
    result = await sandbox.run(step(code))
    assert "capped" in result.output and int(result.output.split()[1]) < 200


@module_loop
@pytest.mark.skipif(not ROOT, reason="the chown attack needs the bot to run as root")
async def test_a_planted_tmp_symlink_does_not_make_the_bot_chown_a_host_directory(sandbox, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    planted = await sandbox.run(step(f"import os\nos.rmdir('.tmp')\nos.symlink({str(victim)!r}, '.tmp')"))
    assert planted.ok, planted.error
    after = await sandbox.run(step(f"open({str(victim / 'pwn')!r}, 'w').write('x')"))
    assert not after.ok and not (victim / "pwn").exists()
    assert victim.stat().st_uid == 0  # still root's: the bot never chowned through the link
    assert not (sandbox.workspace("iso-1") / ".tmp").is_symlink()


@module_loop
async def test_a_step_flooding_fd_1_and_2_does_not_block_later_steps(sandbox):
    flood = "import os\nfor _ in range(40):\n    os.write(1, b'x' * 10000)\n    os.write(2, b'y' * 10000)\nprint('ok')"
    first = await sandbox.run(step(flood, timeout_s=10))
    assert first.ok and first.output.strip() == "ok", first.error
    second = await sandbox.run(
        step("import os\nos.write(1, b'z' * 100000)\nprint('still fine')", timeout_s=10)
    )
    assert second.ok and second.output.strip() == "still fine", second.error


@module_loop
async def test_the_workspace_quota_is_reported_and_lifted_by_deleting(tmp_path):
    sb = LocalSandbox(workspaces=tmp_path / "ws", workspace_mb=1)
    await sb.start()
    try:
        over = await sb.run(step("open('big.bin', 'wb').write(b'0' * 1_500_000)\nprint('written')"))
        assert not over.ok and "over its 1 MB limit" in over.error and over.output.strip() == "written"
        cleaned = await sb.run(step("import os\nos.remove('big.bin')\nprint('ok')"))
        assert cleaned.ok and cleaned.output.strip() == "ok"
    finally:
        await sb.close()


@module_loop
async def test_a_step_can_wait_for_its_own_children(sandbox):
    """The fork server ignores SIGCHLD; a step must not inherit that (waitpid would fail)."""
    result = await sandbox.run(
        step("import os\npid = os.fork()\nif pid == 0: os._exit(3)\nprint(os.waitpid(pid, 0)[1] >> 8)")
    )
    assert result.ok and result.output.strip() == "3", result.error


@module_loop
async def test_memory_budget_is_shared_by_all_processes_of_a_step(sandbox):
    """rlimits cap each process; the session's cgroup caps them together (6 × 150 MB > 500 MB)."""
    if not sandbox.protections().get("cgroups", "").startswith("on"):
        pytest.skip("this host gives the sandbox no writable cgroup hierarchy (reported by doctor)")
    code = (
        "import os, time\npids = []\nfor _ in range(6):\n    pid = os.fork()\n    if pid == 0:\n"
        "        x = bytearray(150 * 2**20)\n        for i in range(0, len(x), 4096): x[i] = 1\n"
        "        time.sleep(1); os._exit(0)\n    pids.append(pid)\n"
        "print([os.waitpid(p, 0)[1] & 0x7f for p in pids])"
    )
    result = await sandbox.run(step(code, memory_mb=500, timeout_s=20))
    signals = eval(result.output.strip())  # a list of ints printed by the step
    assert 9 in signals and 0 in signals, signals  # some were OOM-killed, the rest finished


@module_loop
@pytest.mark.skipif(not ROOT, reason="needs the per-session uid and mount namespace")
async def test_sessions_cannot_see_each_other(sandbox):
    await sandbox.write_file("iso-2", "mine.csv", b"x\n1\n")
    other = str(sandbox.workspace("iso-2"))
    seen = await sandbox.run(step(f"import os\nprint(os.path.exists({other!r}))"))
    assert seen.ok and seen.output.strip() == "False"


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("a.csv", True),
        ("sub/a.csv", True),
        ("./a.csv", True),
        ("sub/../a.csv", True),
        ("../other/a.csv", False),
        ("/etc/passwd", False),
        ("~/x", False),
        ("", False),
        ("a\x00b", False),
        ("sub/../../x", False),
    ],
)
def test_resolve_in_workspace(tmp_path: Path, path: str, ok: bool):
    ws = tmp_path / "ws"
    ws.mkdir()
    if ok:
        assert ws.resolve() in resolve_in_workspace(ws, path).parents
    else:
        with pytest.raises(PermissionError):
            resolve_in_workspace(ws, path)


def test_symlinks_out_of_the_workspace_are_refused(tmp_path: Path):
    ws, outside = tmp_path / "ws", tmp_path / "secret.txt"
    ws.mkdir()
    outside.write_text("secret")
    (ws / "link.txt").symlink_to(outside)
    (ws / "dirlink").symlink_to(tmp_path)
    (ws / "inner.txt").write_text("fine")
    (ws / "inner-link.txt").symlink_to(ws / "inner.txt")
    for path in ("link.txt", "dirlink/secret.txt"):
        with pytest.raises(PermissionError):
            resolve_in_workspace(ws, path)
    assert read_inside(ws, resolve_in_workspace(ws, "inner-link.txt")) == b"fine"
    with pytest.raises(OSError):  # a link swapped in after the check is not followed
        read_inside(ws, ws / "link.txt")
    with pytest.raises(OSError):
        write_inside(ws, ws / "link.txt", b"pwned")
    with pytest.raises(OSError):  # the directory is pinned without following links
        write_inside(ws, ws / "dirlink" / "secret.txt", b"pwned")
    os.mkfifo(ws / "pipe")
    with pytest.raises(PermissionError):  # a FIFO would hang the bot's read
        read_inside(ws, ws / "pipe")
    assert outside.read_text() == "secret"
    write_inside(ws, ws / "new.txt", b"ok")
    assert (ws / "new.txt").read_bytes() == b"ok"


@pytest.mark.parametrize(
    ("root", "expected_on", "expected_off"),
    [
        (True, {"uid", "bot process", "filesystem", "leftover processes", "limits"}, set()),
        (False, {"bot process", "limits", "privileges"}, {"uid", "leftover processes"}),
    ],
)
def test_describe_step_protections(monkeypatch, root, expected_on, expected_off):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0 if root else 1000)
    report = isolation.describe_step_protections(["/x/.env"])
    assert expected_on <= set(report.active) and expected_off == set(report.missing)
    if root:
        assert "/x/.env" in report.active["filesystem"]


def test_kill_uid_processes_never_touches_ordinary_uids():
    assert isolation.kill_uid_processes(0) == 0 and isolation.kill_uid_processes(os.getuid()) == 0


def test_scrubbed_env_drops_secrets(monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a")
    env = isolation.scrubbed_env({"PYTHONPATH": "/code"})
    assert "SLACK_BOT_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PYTHONPATH"] == "/code" and env["HOME"] == "/nonexistent"


def test_a_killed_bot_leaves_no_fork_server_or_step_behind(tmp_path):
    """SIGKILL of the bot (no cleanup code runs) takes its fork server and running steps with it."""
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import asyncio, os, sys
from pathlib import Path
from core.sandbox_local import LocalSandbox
from core.sandbox import StepRequest
async def main():
    sb = LocalSandbox(workspaces=Path({str(tmp_path / "ws")!r}))
    await sb.start()
    print(sb._proc.pid, flush=True)
    await sb.run(StepRequest(kind="python", session_id="orphan", code="import time; time.sleep(60)", timeout_s=60))
asyncio.run(main())
"""
    bot = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    zygote = int(bot.stdout.readline())
    time.sleep(1.0)  # the step is running now
    steps = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == zygote]
    assert steps, "the step should be running"
    bot.send_signal(signal.SIGKILL)
    bot.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in [zygote, *map(int, steps)]):
        time.sleep(0.05)
    assert not any(_alive(p) for p in [zygote, *map(int, steps)])


def _ppid(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not ROOT, reason="the mount namespace needs root")
def test_a_checkout_under_tmp_with_its_home_inside_keeps_the_workspace_writable_and_the_home_hidden(tmp_path):
    """The quickstart from `git clone … /tmp/x`: /tmp is hidden, the code bound back read-only, and the
    bot's home (./.datathread, inside the checkout) must be hidden again with the workspace rw on top."""
    import shutil
    import subprocess
    import sys

    project = tmp_path / "checkout"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "core",
        project / "core",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    home = project / ".datathread"
    (home / "state").mkdir(parents=True)
    (home / "state" / "secret.txt").write_text("STATE")
    script = f"""
import asyncio, json
from pathlib import Path
from core.sandbox_local import LocalSandbox
from core.sandbox import StepRequest
async def main():
    sb = LocalSandbox(workspaces=Path({str(home / "workspaces")!r}), hidden=[Path({str(home)!r})])
    await sb.start()
    code = "open('out.txt', 'w').write('ok')\\nimport os\\nprint(sorted(os.listdir({str(home)!r})))"
    r = await sb.run(StepRequest(kind="python", session_id="q1", code=code, timeout_s=20))
    print(json.dumps([r.ok, r.output.strip(), r.error[-300:]]))
    await sb.close()
asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(project)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    ok, output, error = json.loads(done.stdout.strip().splitlines()[-1])
    assert ok, error
    assert output == "['workspaces']"  # the home is an empty tmpfs again but for the bound workspace
    assert (home / "workspaces" / "q1" / "out.txt").read_text() == "ok"
