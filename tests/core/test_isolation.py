"""Sandbox isolation: what LocalSandbox reports, that a step breaking a limit is killed and reported
while the next step works, and the bot-side path checks (pure helpers, table-driven)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import pytest_asyncio

from core import isolation, isolation_backends, isolation_session
from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from core.workspace_paths import read_inside, resolve_in_workspace, write_inside
from tests.core.sandbox_backends import BACKENDS, EXPECTED, start_sandbox
from tests.core.sandbox_backends import holds as protections_hold

module_loop = pytest.mark.asyncio(loop_scope="module")
ROOT = isolation.host_root()


def holds(sandbox: LocalSandbox, protection: str) -> bool:
    return protections_hold(sandbox.protections(), protection)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandbox(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("iso") / "home"
    sb = await start_sandbox(request.param, workspaces=home / "workspaces", hidden=[home])
    sb.requested = request.param
    yield sb
    await sb.close()


def step(code: str, **kw) -> StepRequest:
    return StepRequest(
        kind="python", session_id="iso-1", code=code, **{"timeout_s": 3, "memory_mb": 512, **kw}
    )


@module_loop
async def test_protections_are_reported(sandbox):
    p = sandbox.protections()
    for name in (
        "back end",
        "network",
        "environment",
        "limits",
        "privileges",
        "wall time",
        "uid",
        "filesystem",
    ):
        assert name in p, name
    assert p["limits"].startswith("on") and p["environment"].startswith("on")
    assert sandbox.backend == EXPECTED[sandbox.requested]
    if sandbox.backend == "root":
        assert all(v.startswith("on") for v in p.values()), p
    else:
        assert p["uid"].startswith("OFF")
    if sandbox.backend == "none":
        assert p["back end"].startswith("OFF") and p["filesystem"].startswith("OFF")
    else:
        assert p["network"].startswith("on") and p["filesystem"].startswith("on")


@module_loop
async def test_network_is_unreachable_where_reported(sandbox):
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), 2)\nprint('in')"
        result = await sandbox.run(step(code))
        if holds(sandbox, "network"):
            assert not result.ok and "in" not in result.output
    finally:
        listener.close()


@module_loop
@pytest.mark.parametrize(
    ("code", "extra", "message"),
    [
        ("while True:\n    pass", {"timeout_s": 1}, "time limit"),  # only the clock ends it: 1 s
        ("x = bytearray(2 * 1024 ** 3)", {}, "MemoryError\n(The step's memory limit is 512 MB"),
        ("open('big.bin', 'wb').write(b'0' * 3 * 1024 * 1024)", {"file_mb": 1}, "File too large"),
        ("import os\nos.kill(os.getpid(), 9)", {}, "ended without a result"),
        # said as what it was, not "most likely it hit the memory limit … work on less data"
        ("import os\nprint('bye', flush=True)\nos._exit(0)", {}, "ended its own process (exit status 0"),
        ("fs = [open('f%d' % i, 'w') for i in range(1000)]", {}, "Too many open files"),
    ],
    ids=["wall-time", "memory", "file-size", "crash", "own-exit", "open-files"],
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
    result = await sandbox.run(step(code, timeout_s=15))  # the cap ends it; forks are slow on a busy host
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
        # one file stops at the room left (the kernel refuses the write), and the step is told why
        assert not over.ok and "past its limit (1 MB" in over.error and "written" not in over.output
        assert (sb.workspaces / "iso-1" / "big.bin").stat().st_size <= 2**20
        cleaned = await sb.run(step("import os\nos.remove('big.bin')\nprint('ok')"))
        assert cleaned.ok and cleaned.output.strip() == "ok"
        # files each under the room left but together over it: caught during the step or right after
        two = "for n in (1, 2):\n    open(f'part{n}.bin', 'wb').write(b'0' * 800_000)\nprint('written')"
        over = await sb.run(step(two))
        assert not over.ok and ("over its 1 MB limit" in over.error or "past its limit (1 MB" in over.error)
        cleaned = await sb.run(
            step("import glob, os\nfor p in glob.glob('part*'): os.remove(p)\nprint('ok')")
        )
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
async def test_sessions_cannot_see_each_other(sandbox):
    await sandbox.write_file("iso-2", "mine.csv", b"x\n1\n")
    other = str(sandbox.workspace("iso-2") / "mine.csv")
    seen = await sandbox.run(step(f"print(open({other!r}).read())"))
    if holds(sandbox, "filesystem"):
        assert not seen.ok and "1" not in seen.output


async def _attach_then_step(sandbox: LocalSandbox, session_id: str, code: str) -> Path:
    """`a/b/c.csv` written by the bot (an attachment), then a step running `code`, which must succeed;
    the workspace, whose owner every folder and file made for the attachment must have."""
    await sandbox.write_file(session_id, "a/b/c.csv", b"x\n1\n")
    await sandbox.start()  # a no-op when started
    wrote = await sandbox.run(
        StepRequest(kind="python", session_id=session_id, code=code, timeout_s=10, memory_mb=512)
    )
    assert wrote.ok and wrote.output.strip() == "ok", wrote.error
    workspace = sandbox.workspace(session_id)
    owner = workspace.stat()
    for made in (workspace / "a", workspace / "a" / "b", workspace / "a" / "b" / "c.csv"):
        st = made.lstat()
        assert (st.st_uid, st.st_gid) == (owner.st_uid, owner.st_gid), made
        assert st.st_mode & 0o777 == (0o700 if made.is_dir() else 0o600), made
    return workspace


@module_loop
async def test_a_file_written_into_new_directories_leaves_them_to_the_session(sandbox):
    """An attached `a/b/c.csv` creates `a/` and `a/b/` as the file is made: owned by the workspace's
    owner (the session's uid when the bot is root) and owner-only, so a later step can write into them."""
    code = "open('a/b/d.csv', 'w').write('y\\n2\\n')\nopen('a/e.csv', 'w').write('z\\n3\\n')\nprint('ok')"
    workspace = await _attach_then_step(sandbox, "iso-dirs", code)
    assert (workspace / "a" / "b" / "d.csv").read_text() == "y\n2\n"


async def test_a_file_written_before_the_sandbox_has_started_is_the_sessions_too(tmp_path):
    """A file can arrive before the fork server is up (an attachment in the first message while the
    bot starts): the back end is not known yet, so it and its folders get the owner the workspace got
    — on a root host the session's uid — and the first step can change them."""
    sb = LocalSandbox(workspaces=tmp_path / "home" / "workspaces", hidden=[tmp_path / "home"])
    try:
        assert not sb.backend  # not started: `_attach_then_step` writes, then starts it
        code = "open('a/b/c.csv', 'a').write('2\\n')\nopen('a/b/d.csv', 'w').write('y\\n')\nprint('ok')"
        workspace = await _attach_then_step(sb, "early", code)
        assert (workspace / "a" / "b" / "c.csv").read_text() == "x\n1\n2\n"
    finally:
        await sb.close()


async def test_the_fork_servers_private_directory_is_made_at_start_and_never_made_again(
    tmp_path, monkeypatch
):
    """The socket steps travel through sits in a directory of its own in the temp dir. None exists until
    the sandbox starts (a sandbox built and never started left an empty one behind), and after `close`
    the name is never used again: another user could make it first, and the bot would have put its
    socket in their directory."""
    import shutil
    import tempfile

    temp = Path(tempfile.mkdtemp(prefix="dtz-"))  # short: a Unix socket's path has at most 107 bytes
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    sb = LocalSandbox(workspaces=tmp_path / "home" / "workspaces", hidden=[tmp_path / "home"])
    assert list(temp.iterdir()) == []
    request = StepRequest(kind="python", session_id="dir-1", code="print(6 * 7)", timeout_s=10)
    try:
        await sb.start()
        (first,) = temp.iterdir()
        assert (first / "zygote.sock").is_socket() and first.stat().st_mode & 0o777 == 0o700
        await sb.close()
        assert list(temp.iterdir()) == []
        first.mkdir()  # someone else's now
        planted = first / "zygote.sock"
        planted.write_text("not the fork server")
        result = await sb.run(request)  # starts again
        assert result.ok and result.output.strip() == "42", result
        assert planted.read_text() == "not the fork server"
        assert [p for p in temp.iterdir() if p != first]  # a new directory of its own
        await sb.close()
        assert list(temp.iterdir()) == [first]
    finally:
        await sb.close()
        shutil.rmtree(temp)


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


@pytest.mark.parametrize("backend", ["root", "userns", "landlock", "seatbelt", "none"])
def test_every_backend_reports_every_protection_on_or_off(backend):
    report = isolation_backends.describe(backend, None, has_seccomp=True, landlock_abi=7, masked=["/x/.env"])
    rows = report.as_dict()
    assert {"back end", "network", "filesystem", "uid", "bot process", "cgroups", "limits"} <= set(rows)
    assert {"workspace quota", "result channel"} <= set(rows)
    assert all(v.startswith(("on — ", "OFF — ")) for v in rows.values())
    assert isolation_backends.unsatisfied_by(rows) == ([] if backend != "none" else ["filesystem"])
    if backend in ("root", "userns"):
        assert "/x/.env" in rows["filesystem"]


def test_strict_refuses_steps_without_network_and_filesystem_isolation(tmp_path):
    sb = LocalSandbox(workspaces=tmp_path / "ws", isolation_policy="strict")
    sb._zygote_protections = {"network": "on — x", "filesystem": "OFF — y"}
    assert "DATATHREAD_ISOLATION=strict" in sb.refused_reason() and "filesystem" in sb.refused_reason()
    sb._zygote_protections = {"network": "on — x", "filesystem": "on — y"}
    assert sb.refused_reason() == ""
    assert isolation_backends.default_policy("serve") == "strict"
    assert isolation_backends.default_policy("ask") == "best"


def test_kill_uid_processes_never_touches_ordinary_uids():
    assert (
        isolation_session.kill_uid_processes(0) == 0
        and isolation_session.kill_uid_processes(os.getuid()) == 0
    )


def test_scrubbed_env_drops_secrets(monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "a")
    env = isolation.scrubbed_env({"PYTHONPATH": "/code"})
    assert "SLACK_BOT_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["PYTHONPATH"] == "/code" and env["HOME"] == "/nonexistent"


def test_a_killed_bot_leaves_no_fork_server_or_step_behind(tmp_path, monkeypatch):
    """SIGKILL of the bot (no cleanup code runs) takes its fork server and running steps with it, and
    the next sandbox to start removes the fork server's folder it left (it stayed in /tmp for good)."""
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
    print(sb._proc.pid, sb._folder.path, flush=True)
    await sb.run(StepRequest(kind="python", session_id="orphan", code="import time; time.sleep(60)", timeout_s=60))
asyncio.run(main())
"""
    import tempfile

    # the bot's temp folder, where its fork server's folder goes (short: a socket's path must fit)
    temp = Path(tempfile.mkdtemp(prefix="dt-killed-", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(temp)}
    bot = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    pid, folder = bot.stdout.readline().split()
    zygote = int(pid)
    # Wait (not a fixed sleep: a loaded CI machine took over a second) until the step is running:
    # the fork server's children have children of their own (the step's supervisor, init, runner).
    deadline = time.monotonic() + 30
    while True:
        steps = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == zygote]
        family = _descendants(zygote)
        if (steps and len(family) > 2 * len(steps)) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert steps, "the step should be running"
    assert len(family) > 2 * len(steps), family  # more than the fork server's own children
    bot.send_signal(signal.SIGKILL)
    bot.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in [zygote, *family]):
        time.sleep(0.05)
    assert not [p for p in [zygote, *family] if _alive(p)]
    from core import zygote_folder

    assert Path(folder).parent == temp and Path(folder).is_dir()
    monkeypatch.setattr(zygote_folder, "GRACE_S", 0.0)  # it is seconds old
    assert zygote_folder.sweep_left_behind(temp) == 1 and not Path(folder).exists()
    temp.rmdir()


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == parent]
        found += kids
        frontier += kids
    return found


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


@module_loop
async def test_concurrent_steps_of_one_session_do_not_end_each_other(sandbox):
    """Parallel tool calls may send steps of one session at once: both finish, because the sandbox runs
    them one after the other (a step's end kills every process of the session's uid)."""
    import asyncio

    def request(code: str) -> StepRequest:
        return StepRequest(kind="python", session_id="iso-par", code=code, timeout_s=10, memory_mb=512)

    slow, quick = await asyncio.gather(
        sandbox.run(request("import time\ntime.sleep(1.0)\nprint('slow done')")),
        sandbox.run(request("print('quick done')")),
    )
    assert quick.ok and "quick done" in quick.output, quick.error
    assert slow.ok and "slow done" in slow.output, slow.error


def test_an_ordinary_users_ask_works_beside_a_root_created_cgroup(home, fake_model):
    """The bug of the first ordinary-user run: a `datathread` cgroup root made earlier (CI, a shared
    box) was taken for ours inside the user namespace, and every step died joining it."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from core import cgroups
    from tests.fakes.anthropic_api import text, tool

    groups = cgroups.parent_groups()
    if ROOT:
        for group in groups:  # the trigger: root's group exists
            with contextlib.suppress(OSError):
                group.mkdir(parents=True, exist_ok=True)
        uid = 65534
        try:
            usable = (
                subprocess.run([sys.executable, "-c", "pass"], user=uid, capture_output=True).returncode == 0
            )
        except OSError:
            usable = False
        if not usable:
            pytest.skip(
                "this interpreter is not usable by an ordinary uid (the unprivileged CI pass covers it)"
            )
        run_home = Path(tempfile.mkdtemp(prefix="dt-user-"))
        shutil.copytree(home, run_home / "home")
        subprocess.run(["chown", "-R", f"{uid}:{uid}", str(run_home)], check=True)
        os.chmod(run_home, 0o755)
    else:
        if not any(g.exists() and g.stat().st_uid == 0 for g in groups):
            pytest.skip("needs a root-made datathread cgroup here (.ci/run's root pass leaves one)")
        uid, run_home = None, home.parent
    fake_model.enqueue(
        tool("run_python", {"code": "print(6 * 7)"}),
        tool("run_sql", {"sql": "SELECT 40 + 2 AS answer"}),
        text("The answer is 42."),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env.update(
        DATATHREAD_HOME=str(run_home / "home"),
        ANTHROPIC_API_KEY="sk-ant-dummy-123456",
        ANTHROPIC_BASE_URL=fake_model.url,
        DATATHREAD_MODEL_RETRIES="0",
        HOME=str(run_home),
    )
    try:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "datathread"), "ask", "what is 6 * 7?"],
            env=env,
            cwd=run_home,
            user=uid,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        if uid is not None:
            shutil.rmtree(run_home, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert "The answer is 42." in done.stdout
    sent = str(fake_model.requests[-1]["messages"])
    assert "ended without a result" not in sent and sent.count("42") >= 2, sent
    assert "matplotlib" not in done.stderr and "Traceback" not in done.stderr


def test_the_seatbelt_profile_denies_what_it_must(tmp_path):
    """macOS is not exercised here (no runner): the profile text is, for a given workspace."""
    from core import seatbelt

    ws, home, other = tmp_path / "home" / "workspaces" / "s1", tmp_path / "home", tmp_path / "other"
    text = seatbelt.profile(
        workspace=str(ws), read=["/opt/venv", "/data/wh.duckdb"], deny=[str(home), "/x/.env"]
    )
    lines = text.splitlines()
    assert lines[:3] == ["(version 1)", "(deny default)", "(deny network*)"]
    deny = next(i for i, line in enumerate(lines) if line.startswith("(deny file-read* file-write*"))
    allow_ws = next(i for i, line in enumerate(lines) if f'(subpath "{ws}")' in line)
    assert f'(subpath "{home}")' in lines[deny] and '"/x/.env"' in lines[deny]
    assert allow_ws > deny and "file-write*" in lines[allow_ws]  # later rules win: the workspace stays
    writable = [line for line in lines if "file-write*" in line and line.startswith("(allow")]
    assert len(writable) == 1 and str(other) not in text
    assert '(subpath "/opt/venv")' in text and "network-outbound" not in text
    assert seatbelt.profile(workspace='/w/"x', read=[], deny=[]).count('\\"') == 1  # quoted, not injected


def test_the_seccomp_program_refuses_the_listed_calls_on_both_architectures():
    from core import seccomp

    # the socket calls by number, as the kernel's tables have them (x86_64, aarch64): a wrong aarch64
    # number would refuse some other call there and let this one through
    socket_calls = {"socket": (41, 198), "connect": (42, 203), "accept": (43, 202), "bind": (49, 200),
                    "listen": (50, 201), "sendmsg": (46, 211), "accept4": (288, 242), "sendmmsg": (307, 269)}  # fmt: skip
    assert {name: seccomp.SYSCALLS[name] for name in socket_calls} == socket_calls
    assert seccomp.SENDTO == (44, 206)

    for arch in ("x86_64", "aarch64"):
        program = seccomp.build_filter(seccomp.STEP_DENIED, arch=arch)
        assert len(program) % 8 == 0 and len(program) // 8 < 4096
    if seccomp.supported():
        code = (
            "import ctypes, os, socket\nfrom core import seccomp\nassert seccomp.install()\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "for fam in (socket.AF_INET, socket.AF_UNIX):\n"
            "    try:\n        socket.socket(fam); print('socket')\n    except PermissionError:\n        pass\n"
            "print(libc.unshare(0x10000000), libc.shmget(0, 4096, 0o1600), libc.ptrace(0, 0, 0, 0))\n"
            "socket.socketpair(); pid = os.fork()\nif pid == 0: os._exit(0)\nprint(os.waitpid(pid, 0)[1])\n"
            # a pair talks only to itself: no address for it to send to, connect to or bind
            "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            "aims = (lambda: a.sendto(b'x', '/dev/log'), lambda: a.connect('\\0x'), lambda: a.bind('\\0x'),\n"
            "        lambda: a.sendmsg([b'x'], [], 0, '/dev/log'), lambda: a.listen())\n"
            "for aim in aims:\n"
            "    try:\n        aim(); print('reached')\n    except PermissionError:\n        print('refused')\n"
            "a.send(b'y'); print(b.recv(1).decode())"
        )
        import subprocess
        import sys

        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.stdout.split() == ["-1", "-1", "-1", "0", *["refused"] * 5, "y"], out.stderr


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        (None, {"ok": False, "error": "The step returned no valid result."}),
        ([1, 2], {"ok": False}),
        ({"ok": "yes", "output": 5, "killed": 1}, {"ok": False, "output": "", "killed": False}),
        ({"ok": True, "rows": True, "bytes_scanned": -1}, {"rows": None, "bytes_scanned": None}),
        ({"ok": True, "rows": None, "saved_as": "r.parquet"}, {"rows": 0, "saved_as": "r.parquet"}),
        ({"ok": True, "saved_as": "../../etc/passwd"}, {"saved_as": None}),
        ({"ok": True, "duration_s": float("nan")}, {"duration_s": 0.0}),
        ({"ok": True, "output": "\ud800x"}, {"output": "?x"}),
        (
            {"ok": True, "files": [{"path": "/etc/passwd", "size": 1}, {"path": "a/../b", "size": 1}, "x"]},
            {"files": []},
        ),
        (
            {"ok": True, "files": [{"path": "a.csv", "size": 3, "kind": 7}]},
            {"files": [{"path": "a.csv", "size": 3, "kind": ""}]},
        ),
        (
            {"ok": True, "columns": [{"name": ["x"], "type": "INT"}, 3]},
            {"columns": [{"name": "", "type": "INT"}]},
        ),
    ],
)
def test_an_untrusted_result_is_validated_field_by_field(raw, expect):
    from core.sandbox import StepResult

    result = StepResult.untrusted(raw, step("x"))
    assert {k: getattr(result, k) for k in expect} == expect


def test_an_untrusted_result_is_clipped_to_the_requests_limits():
    from core.sandbox import StepResult

    request = step("x", output_bytes=1000, preview_bytes=500)
    flood = {
        "ok": True,
        "output": "é" * 10_000,
        "preview": "p" * 10_000,
        "error": "e" * 10_000,
        "columns": [{"name": "n" * 10_000, "type": "t" * 10_000}] * 10_000,
        "files": [{"path": "f" * 10_000, "size": 1}] + [{"path": f"f{i}", "size": i} for i in range(10_000)],
    }
    result = StepResult.untrusted(flood, request)
    assert len(result.output.encode()) <= 1000 and result.output.endswith("[cut at 1000 bytes]")
    assert len(result.preview.encode()) <= 500 and len(result.error.encode()) <= 4000
    assert len(result.columns) == 200 and {len(c["name"].encode()) for c in result.columns} == {120}
    assert [f["path"] for f in result.files[:2]] == ["f0", "f1"] and len(result.files) == 200
    assert len(json.dumps(result.to_dict())) < 100_000


async def test_two_bots_on_one_host_never_kill_each_others_steps(tmp_path):
    """The same thread in two installs (two checkouts, two test runs) is two sessions: a step of one
    survives the other's end-of-step cleanup, which kills everything its session's uid still runs."""
    a = LocalSandbox(workspaces=tmp_path / "a" / "workspaces")
    b = LocalSandbox(workspaces=tmp_path / "b" / "workspaces")
    assert isolation_session.sandbox_uid(a.workspaces / "same") != isolation_session.sandbox_uid(
        b.workspaces / "same"
    )
    await asyncio.gather(a.start(), b.start())
    try:
        slow = asyncio.create_task(
            a.run(
                StepRequest(kind="python", session_id="same", code="import time; time.sleep(2); print('ok')")
            )
        )
        await asyncio.sleep(0.8)  # a's step is running: b's steps for the same thread come and go
        for _ in range(3):
            quick = await b.run(StepRequest(kind="python", session_id="same", code="print(1)"))
            assert quick.ok, quick.error
        result = await slow
        assert result.ok and result.output.strip() == "ok", result.error
    finally:
        await asyncio.gather(a.close(), b.close())


async def test_a_sigterm_to_every_process_of_the_service_lets_the_step_finish(sandbox):
    """systemd's stop (KillMode=control-group) sends SIGTERM to every process of the service: the step's
    supervisor and runner died at once and the model was told the step had probably run out of memory.
    The bot ends its steps itself, in order; the step's processes ignore a SIGTERM meant for the bot."""
    fork_server = sandbox._proc.pid
    running = asyncio.create_task(
        sandbox.run(
            StepRequest(
                kind="python",
                session_id="sigterm",
                code="import time\nprint('started', flush=True)\ntime.sleep(2.5)\nprint('finished')",
                timeout_s=30,
            )
        )
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(_descendants(fork_server)) < 2 and not running.done():
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the step is under way
    signalled = [pid for pid in [fork_server, *_descendants(fork_server)] if _signal(pid, signal.SIGTERM)]
    assert len(signalled) >= 2, signalled  # the fork server, the step's supervisor and runner, …
    result = await running
    assert result.ok and "finished" in result.output, result


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
