"""Each step of the `root` and `userns` back ends runs in its own PID namespace under a tiny init:
a double-forked, `setsid` daemon dies with its step, and the step's /proc shows only its own
processes. `landlock` and `none` have no PID namespace; their step's supervisor is a child subreaper
that kills what the step left when it ends, so the daemon dies with its step there too. Checked from
the host (process names in the host's /proc, a marker file that stops growing), on every back end
this test process can run; where a back end reports leftover processes OFF, its report is checked
instead."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import pytest_asyncio

from core import landlock
from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from tests.core.sandbox_backends import BACKENDS, start_sandbox
from tests.core.sandbox_backends import holds as protections_hold

module_loop = pytest.mark.asyncio(loop_scope="module")
SESSION = "pidns-1"


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def sandbox(request, tmp_path_factory):
    home = tmp_path_factory.mktemp("pidns") / "home"
    sb = await start_sandbox(request.param, workspaces=home / "workspaces", hidden=[home])
    yield sb
    await sb.close()


def step(code: str, **kw) -> StepRequest:
    return StepRequest(
        kind="python", session_id=SESSION, code=code, **{"timeout_s": 10, "memory_mb": 512, **kw}
    )


def daemon_code(name: str, then: str) -> str:
    """A step that starts a daemon the classic way (fork, setsid, fork again) which appends to a
    marker file every 50 ms under the process name `name`, waits until it has written, then `then`."""
    return (
        "import ctypes, os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\n"
        "        while True:\n"
        "            with open('marker.txt', 'a') as f:\n"
        "                f.write('x')\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "while not os.path.exists('marker.txt'):\n"
        "    time.sleep(0.01)\n" + then
    )


def host_pids_named(name: str) -> list[int]:
    """Processes anywhere on the host whose name (comm) is `name`, from the host's /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    found.append(int(entry))
    return found


async def assert_daemon_gone(name: str, marker: Path) -> None:
    """No process of that name is left, and the marker stops growing."""
    try:
        for _ in range(50):  # SIGKILL of a namespace is asynchronous: allow it a moment
            if not host_pids_named(name):
                break
            await asyncio.sleep(0.05)
        assert host_pids_named(name) == [], "the step's daemon outlived it"
        size = _size(marker)
        await asyncio.sleep(0.5)  # ten of the daemon's writes
        assert _size(marker) == size, "something still writes the marker"
    finally:
        for pid in host_pids_named(name):  # a failing run leaves nothing behind either
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _size(marker: Path) -> int | None:
    """None where a stopped step's writes never landed (its layer is dropped: root, userns)."""
    return marker.stat().st_size if marker.exists() else None


def holds(sandbox: LocalSandbox, protection: str) -> bool:
    return protections_hold(sandbox.protections(), protection)


@module_loop
async def test_leftover_processes_are_reported_per_back_end(sandbox):
    row = sandbox.protections()["leftover processes"]
    if sandbox.backend in ("root", "userns"):
        assert row.startswith("on") and "PID namespace" in row, row
        assert "PID" in sandbox.protections()["back end"]
    elif sandbox.backend == "landlock" and landlock.abi_version() >= 6:  # subreaper, and scoped signals
        assert row.startswith("on") and "no PID namespace" in row and "subreaper" in row, row
    else:  # none, or a kernel without Landlock scopes: a step may kill its supervisor first
        assert row.startswith("OFF") and "subreaper" in row, row


@module_loop
async def test_a_step_cannot_kill_its_supervisor_to_keep_a_daemon(sandbox):
    """Without a PID namespace the supervisor is what kills a step's leftovers: a step that starts a
    daemon and then kills the supervisor (its parent) must fail at the second, or the row says OFF."""
    if sandbox.backend in ("root", "userns") or not holds(sandbox, "leftover processes"):
        return  # a PID namespace (the supervisor is outside it), or reported OFF
    name = "dts-" + uuid.uuid4().hex[:8]
    marker = sandbox.workspace(SESSION) / "marker.txt"
    marker.unlink(missing_ok=True)
    kill_parent = "try:\n    os.kill(os.getppid(), 9)\nexcept OSError as e:\n    print('refused', e.errno)\n"
    result = await sandbox.run(step(daemon_code(name, kill_parent)))
    assert result.ok and "refused" in result.output, result
    await assert_daemon_gone(name, marker)


@module_loop
async def test_a_setsid_daemon_dies_with_its_step(sandbox):
    if not holds(sandbox, "leftover processes"):
        return
    name = "dtd-" + uuid.uuid4().hex[:8]
    marker = sandbox.workspace(SESSION) / "marker.txt"
    marker.unlink(missing_ok=True)
    result = await sandbox.run(step(daemon_code(name, "time.sleep(0.2)\nprint('started')")))
    assert result.ok and "started" in result.output, result
    assert marker.stat().st_size > 0  # the daemon really ran and wrote
    await assert_daemon_gone(name, marker)


@module_loop
async def test_a_daemon_of_a_stopped_step_dies_too_on_every_back_end(sandbox):
    """The bot stops a step by killing its process group (a cancelled turn, Ctrl-C, the fallback kill
    of a step past its limit): the supervisor dies before it can kill what the step left. The fork
    server is a child subreaper too, and kills what it adopts — on `none` as well, where only a step
    that kills the supervisor itself keeps its daemon (the row says OFF)."""
    name = "dtc-" + uuid.uuid4().hex[:8]
    marker = sandbox.workspace(SESSION) / "marker.txt"
    marker.unlink(missing_ok=True)
    running = asyncio.ensure_future(sandbox.run(step(daemon_code(name, "time.sleep(60)"), timeout_s=30)))
    for _ in range(200):
        if host_pids_named(name):
            break
        await asyncio.sleep(0.05)
    assert host_pids_named(name), "the daemon never started"
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await assert_daemon_gone(name, marker)
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_daemon_of_a_running_step_dies_with_a_killed_bot(backend, tmp_path):
    """SIGKILL of the bot runs none of its code: the fork server dies with it (parent-death signal),
    and so does each step's supervisor — which, where it is the subreaper (`landlock`, `none`), kills
    what its step started first. A PID namespace ends with its init on `root` and `userns`."""
    name = "dtb-" + uuid.uuid4().hex[:8]
    script = f"""
import asyncio, sys
from pathlib import Path
from core.sandbox import StepRequest
from tests.core.sandbox_backends import sandbox_options
from tests.core.test_pid_namespace import daemon_code
from core.sandbox_local import LocalSandbox
async def main():
    sb = LocalSandbox(workspaces=Path({str(tmp_path / "ws")!r}), **sandbox_options({backend!r}))
    try:
        await sb.start()
    except RuntimeError as exc:
        print("unavailable", exc, flush=True)
        return
    print("started", flush=True)
    code = daemon_code({name!r}, "time.sleep(60)")
    await sb.run(StepRequest(kind="python", session_id={SESSION!r}, code=code, timeout_s=60))
asyncio.run(main())
"""
    bot = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        first = bot.stdout.readline()
        if first.startswith("unavailable"):
            pytest.skip(first)
        assert first.startswith("started"), first
        deadline = time.monotonic() + 30
        while not host_pids_named(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert host_pids_named(name), "the daemon never started"
    finally:
        bot.kill()
        bot.wait()
    asyncio.run(assert_daemon_gone(name, tmp_path / "ws" / SESSION / "marker.txt"))


@module_loop
async def test_a_daemon_of_a_step_killed_at_its_time_limit_dies_too(sandbox):
    if not holds(sandbox, "leftover processes"):
        return
    name = "dtk-" + uuid.uuid4().hex[:8]
    marker = sandbox.workspace(SESSION) / "marker.txt"
    marker.unlink(missing_ok=True)
    for limit in (2, 15):  # a loaded machine (CI) can take the first 2 s before the step's code runs
        result = await sandbox.run(step(daemon_code(name, "time.sleep(60)"), timeout_s=limit))
        if marker.exists() and marker.stat().st_size > 0:
            break
    assert not result.ok and "time limit" in result.error, result
    assert marker.stat().st_size > 0
    await assert_daemon_gone(name, marker)
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42"


@module_loop
async def test_the_steps_proc_lists_only_its_own_processes(sandbox):
    if sandbox.backend not in ("root", "userns"):
        return  # no PID namespace (its row says so)
    # The child makes itself dumpable, so hidepid=2 lets its parent see it: the listing then shows
    # everything the step may see of its own, and nothing else.
    code = (
        "import ctypes, os, time\n"
        "r, w = os.pipe()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
        "    os.write(w, b'.')\n"
        "    time.sleep(5)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)\n"
        "listed = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "try:\n"
        "    os.listdir('/proc/1/root')\n"
        "    print('init reachable')\n"
        "except OSError:\n"
        "    pass\n"
        "print(os.getpid(), os.getppid(), child, listed, os.readlink('/proc/self/ns/pid'))\n"
        "os.kill(child, 9)\n"
    )
    result = await sandbox.run(step(code))
    assert result.ok, result
    # the init's root is the fork server's view of the host: hidden (hidepid=2; Landlock's ptrace
    # scoping on userns, where the init has the step's uid)
    assert "init reachable" not in result.output
    me, parent, child, *rest = result.output.split(maxsplit=3)
    listed = [int(p) for p in rest[0].split("]")[0].strip("[").split(",")]
    namespace = rest[0].split("]")[1].strip()
    assert (int(me), int(parent)) == (2, 0)  # pid 2 after its init; its parent, the supervisor, is outside
    # its own processes, and the init where the same uid may see it (userns); nothing of the host's
    assert set(listed) <= {1, int(me), int(child)} and {int(me), int(child)} <= set(listed), listed
    assert namespace != os.readlink("/proc/self/ns/pid")
    assert str(os.getpid()) not in listed


@module_loop
async def test_a_step_cannot_kill_its_init_and_killing_itself_still_ends_it(sandbox):
    if sandbox.backend not in ("root", "userns"):
        return  # no PID namespace, no init
    code = (
        "import os, signal\n"
        "try:\n"
        "    os.kill(1, signal.SIGKILL)\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
        "print('still running')\n"
    )
    result = await sandbox.run(step(code))
    assert result.ok and "still running" in result.output, result  # init ignores it (or it is refused)
    crashed = await sandbox.run(step("import os\nos.kill(os.getpid(), 9)"))
    assert not crashed.ok and "ended without a result" in crashed.error, crashed
    after = await sandbox.run(step("print(6 * 7)"))
    assert after.ok and after.output.strip() == "42"


@module_loop
async def test_a_namespace_step_holds_no_capabilities(sandbox):
    """uid 0 of a user namespace holds every capability there, enough to open its init's /proc/1/root
    (the fork server's view of the host) where Landlock cannot scope ptrace: the runner keeps none,
    and none come back through exec (the bounding set is empty too)."""
    if sandbox.backend not in ("root", "userns"):
        return
    code = (
        "import os\n"
        "caps = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if l.startswith('Cap'))\n"
        "print(caps['CapEff'].strip(), caps['CapPrm'].strip(), caps['CapAmb'].strip())\n"
        "print(caps['CapBnd'].strip() if os.getuid() == 0 else '0' * 16)\n"
        "try:\n"
        "    os.open('/proc/1/root', os.O_PATH)\n"
        "    print('init reachable')\n"
        "except OSError:\n"
        "    print('init out of reach')\n"
    )
    result = await sandbox.run(step(code))
    assert result.ok, result
    effective, permitted, ambient, bounding = result.output.split()[:4]
    assert {effective, permitted, ambient, bounding} == {"0" * 16}, result.output
    assert "init out of reach" in result.output
