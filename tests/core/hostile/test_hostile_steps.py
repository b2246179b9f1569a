"""Hostile steps beyond the corpus: symlinks planted for the bot, a background process outliving its
step, the bot's secrets in the step's environment, forged and flooded results, sockets held by the
step, SysV IPC and the host's namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.sandbox import StepRequest
from core.tools import call_tool
from core.workspace_paths import read_inside
from tests.core.hostile.corpus import (
    ATTACKER,
    BOT_SECRETS,
    VICTIM,
    Env,
    check_nothing_changed_outside_the_workspace,
    leaks,
)
from tests.core.sandbox_backends import holds

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.mark.parametrize(
    "raw",
    [
        "import os\nos.symlink('@VICTIM@/victim.csv', 'leak.csv')",
        "import os\nos.symlink('@HOME@/state.sqlite3', 'leak.csv')",
        "import os\nos.symlink('@VICTIM@', 'leakdir')",
        "import os\nos.symlink('/etc/passwd', 'leak.csv')",
    ],
    ids=["victim-file", "state-file", "victim-dir", "passwd"],
)
async def test_symlinks_planted_in_the_workspace_are_not_followed_by_the_bot(env: Env, raw: str):
    if not holds(env.ctx.sandbox.protections(), "filesystem"):
        return  # the bot-side checks hold everywhere, but DuckDB in the step would follow the link
    for name in ("leak.csv", "leakdir"):
        (env.ws / name).unlink(missing_ok=True)
    made = await call_tool("run_python", {"code": env.fill(raw)}, env.ctx)
    assert not made.is_error, made.content  # making a link is allowed; following it out is not
    for path in ("leak.csv", "leakdir/victim.csv"):
        attached = await call_tool("attach_file", {"path": path}, env.ctx)
        assert attached.is_error and attached.artifact is None, attached.content
        with pytest.raises((PermissionError, OSError)):
            await env.ctx.sandbox.read_file(ATTACKER, path)
    if (env.ws / "leak.csv").is_symlink():  # even a path that passed the check is opened link-safe
        with pytest.raises(OSError):
            read_inside(env.ws, env.ws / "leak.csv")
    # DuckDB follows the link inside the step, but the step's filesystem has no victim or state in it
    scanned = await call_tool("run_sql", {"sql": "SELECT * FROM read_text('leak.csv')"}, env.ctx)
    assert not leaks(scanned.content), scanned.content


async def test_background_process_does_not_outlive_its_step(env: Env):
    if not holds(env.ctx.sandbox.protections(), "leftover processes"):
        return
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(1.5)\n"
        "    open('late.txt', 'w').write('still here')\n"
        "    os._exit(0)\n"
        "print('parent done')"
    )
    first = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=daemon))
    assert first.ok and "parent done" in first.output
    await asyncio.sleep(2.5)
    assert not (env.ws / "late.txt").exists()


async def test_no_bot_secret_in_the_step_environment(env: Env):
    code = "import os\nfor k, v in sorted(os.environ.items()):\n    print(f'{k}={v}')"
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    assert result.ok and "PATH=" in result.output
    assert not leaks(result.output)
    names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert not names & set(BOT_SECRETS)
    # the fork server's real environment block (read by the bot, which may) holds none either
    block = Path(f"/proc/{env.ctx.sandbox._proc.pid}/environ").read_bytes().decode()
    assert "PATH=" in block and not leaks(block)
    # and the step cannot read its own /proc files at all (non-dumpable)
    own = await env.ctx.sandbox.run(
        StepRequest(kind="python", session_id=ATTACKER, code="open('/proc/self/environ').read()")
    )
    assert not own.ok and "Permission denied" in own.error


# A step that tries to forge its own result: the red team's `os.write(4, …)` on every descriptor it
# holds, with fields built to flood whatever handles them next. The runner holds no socket to the bot,
# only its own result pipe; what arrives there is validated and clipped like anything from a step.
_FLOOD = (
    "line = json.dumps({'ok': True, 'output': 'A' * 100_000, 'preview': 'P' * 100_000, 'error': 'E' * 100_000,"
    " 'columns': [{'name': 'N' * 100_000, 'type': 'T' * 1_000}] * 500,"
    " 'files': [{'path': '/etc/passwd', 'size': 1}, {'path': '../x', 'size': 1}]"
    " + [{'path': f'f{i}', 'size': i, 'kind': 'K' * 100} for i in range(5_000)],"
    " 'rows': 10 ** 30, 'saved_as': '../../etc/passwd', 'duration_s': 'soon', 'killed': 'yes'}).encode() + b'\\n'\n"
)
FORGERIES = {
    "every-fd": f"import os, json\n{_FLOOD}for fd in range(1024):\n    try:\n        os.write(fd, line)\n"
    "    except OSError:\n        pass\nos._exit(0)",
    "every-fd-then-print": f"import os, json\n{_FLOOD}for fd in range(3, 1024):\n    try:\n"
    "        os.write(fd, line * 3)\n    except OSError:\n        pass\nprint('B' * 100_000)",
    "oversized": "import os\nchunk = b'{' * 65_536\nfor fd in range(3, 64):\n    try:\n"
    "        for _ in range(160):\n            os.write(fd, chunk)\n    except OSError:\n        pass\nos._exit(0)",
    "garbage": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"ok\": tru')\n"
    "    except OSError:\n        pass\nos._exit(0)",
    "not-an-object": "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'[1, 2, 3]\\n')\n"
    "    except OSError:\n        pass\nos._exit(0)",
}


def _assert_bounded(result, request: StepRequest) -> None:
    assert len(result.output.encode()) <= request.output_bytes
    assert len(result.preview.encode()) <= request.preview_bytes
    assert len(result.error.encode()) <= 4_000 + 400  # the step's clip, and the bot's quota sentence
    assert len(result.columns) <= 200 and all(len(c["name"]) <= 120 for c in result.columns)
    assert len(result.files) <= 200
    assert all(not f["path"].startswith("/") and ".." not in f["path"] for f in result.files)
    assert result.saved_as is None and (result.rows is None or result.rows <= 2**62)
    assert len(json.dumps(result.to_dict())) < 150_000


@pytest.mark.parametrize("forgery", FORGERIES, ids=list(FORGERIES))
async def test_a_step_cannot_forge_or_flood_its_result(env: Env, forgery: str):
    code = FORGERIES[forgery]
    request = StepRequest(kind="python", session_id=ATTACKER, code=code, timeout_s=3, memory_mb=1024)
    result = await env.ctx.sandbox.run(request)
    _assert_bounded(result, request)
    if forgery in ("oversized", "garbage", "not-an-object"):
        assert not result.ok and result.error and "A" * 100 not in result.error
    outcome = await asyncio.wait_for(call_tool("run_python", {"code": code}, env.ctx), timeout=30)
    assert len(outcome.content) < 60_000 and "A" * 20_001 not in outcome.content


async def test_the_process_running_model_code_holds_no_socket(env: Env):
    code = (
        "import os, stat\nsocks, pipes = [], []\nfor fd in range(1024):\n    try:\n        mode = os.fstat(fd).st_mode\n"
        "    except OSError:\n        continue\n    (socks if stat.S_ISSOCK(mode) else pipes if stat.S_ISFIFO(mode) else []).append(fd)\n"
        "print('sockets', socks, 'pipes', len(pipes))"
    )
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    assert result.ok and "sockets [] pipes 1" in result.output, result.output + result.error


async def test_a_flooded_result_does_not_stall_the_event_loop(env: Env):
    """Everything the bot does with a flooded result (parse, clip, describe, redact) stays off the
    loop or bounded: a 10 ms ticker never waits 100 ms (what /healthz would show)."""
    lags: list[float] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - before - 0.01)

    ticking = asyncio.create_task(ticker())
    try:
        marker = "-----BEGIN PRIVATE KEY-----"
        flood = f"import os, json\nline = json.dumps({{'ok': True, 'output': '{marker}' * 4000, 'columns': [{{'name': '{marker}' * 400, 'type': 't'}}] * 200}}).encode()\n"
        flood += "for fd in range(3, 1024):\n    try:\n        os.write(fd, line)\n    except OSError:\n        pass\nos._exit(0)"
        for _ in range(3):
            await call_tool("run_python", {"code": flood}, env.ctx)
    finally:
        ticking.cancel()
    assert lags and max(lags) < 0.1, max(lags)


# SysV IPC and the host's name. Segments and queues live in an IPC namespace, not in any process: the
# red team's 64 MB segment outlived the step, the turn and the bot, and session B read session A's
# message. Seccomp refuses SysV IPC on every Linux back end; root and userns steps also get their own
# IPC and UTS namespaces, so even a call that got through would be private and gone with the step.
_LIBC = "import numpy\nc = numpy.ctypeslib.ctypes\nlibc = c.CDLL(None, use_errno=True)\n"
IPC_SEND = {
    "shm-64mb": _LIBC
    + "i = libc.shmget(@KEY@, 64 * 2 ** 20, 0o1666)\nprint('made', i, libc.shmat(i, None, 0))",
    "msg-queue": _LIBC
    + (
        "q = libc.msgget(@KEY@, 0o1666)\nbuf = c.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00A-SECRET', 16)\n"
        "print('made', q, libc.msgsnd(q, buf, 8, 0o4000))"
    ),
    "sem": _LIBC + "print('made', libc.semget(@KEY@, 4, 0o1666))",
}
IPC_RECEIVE = _LIBC + (
    "buf = c.create_string_buffer(64)\nq = libc.msgget(@KEY@, 0)\n"
    "print('got', q, libc.msgrcv(q, buf, 48, 0, 0o4000), buf.raw[8:16])"
)


def _host_ipc_keys() -> set[int]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]:
                keys.add(int(line.split()[0]))
    return keys


@pytest.mark.parametrize("path", ["tool", "raw"])
@pytest.mark.parametrize("what", IPC_SEND, ids=list(IPC_SEND))
async def test_sysv_ipc_is_refused_or_private_and_gone(env: Env, what: str, path: str):
    key = 0x5EED0000 + int(uuid.uuid4().hex[:4], 16)
    send, receive = (code.replace("@KEY@", str(key)) for code in (IPC_SEND[what], IPC_RECEIVE))
    # Steps that end at once, given room: the corpus's 3 s limit (for its hangs) was once not enough
    # for them while a fork bomb of another case loaded the machine.
    limit = 15
    if path == "tool":
        sent = (await call_tool("run_python", {"code": send}, replace(env.ctx, step_timeout_s=limit))).content
    else:
        step = StepRequest(kind="python", session_id=ATTACKER, code=send, timeout_s=limit, memory_mb=1024)
        sent = (await env.ctx.sandbox.run(step)).output
    got = await env.ctx.sandbox.run(
        StepRequest(kind="python", session_id=VICTIM, code=receive, timeout_s=limit)
    )
    assert "A-SECRET" not in got.output + got.error, got
    if holds(env.ctx.sandbox.protections(), "syscalls"):
        assert "made -1" in sent, sent  # refused outright
    if holds(env.ctx.sandbox.protections(), "syscalls") or env.backend in ("root", "userns"):
        assert key not in _host_ipc_keys()  # nothing left on the host, whatever the step managed


async def test_root_and_userns_steps_have_their_own_namespaces_hostname_and_run(env: Env):
    if env.backend not in ("root", "userns"):
        return  # landlock/none: no namespaces (the back end row says so); seccomp still refuses SysV IPC
    code = (
        "import os, socket\nprint(socket.gethostname())\nprint('run', len(os.listdir('/run')))\n"
        "for ns in ('ipc', 'uts', 'net', 'mnt'):\n    print(ns, os.readlink(f'/proc/self/ns/{ns}'))"
    )
    result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
    lines = result.output.split()
    assert result.ok and lines[0] == "datathread-step" != socket.gethostname(), result
    assert lines[1:3] == ["run", "0"]  # the host's /run (service sockets, lock files) is an empty cover
    for ns in ("ipc", "uts", "net", "mnt"):
        assert lines[lines.index(ns) + 1] != os.readlink(f"/proc/self/ns/{ns}"), ns


# seccomp refused socket(), but a socketpair's datagram socket can be aimed at any Unix socket path of
# the host by sendto or connect: on the Landlock and none back ends (the host's filesystem in view) a
# step delivered datagrams to a service's socket (syslog's /dev/log, journald's, any listener).
HOST_SOCKET_SEND = (
    "import socket\n"
    "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "for how in ('sendto', 'connect'):\n"
    "    try:\n"
    "        if how == 'sendto':\n            a.sendto(b'FROM-A-STEP', '@PATH@')\n"
    "        else:\n            a.connect('@PATH@'); a.send(b'FROM-A-STEP')\n"
    "        print(how, 'delivered')\n"
    "    except OSError as e:\n        print(how, 'refused', type(e).__name__)\n"
    "a.send(b'x'); print('pair', b.recv(1))\n"
)


async def test_a_step_cannot_send_to_a_unix_socket_of_the_host(env: Env):
    path = f"/tmp/datathread-hostile-{uuid.uuid4().hex[:8]}.sock"
    host = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    host.bind(path)
    os.chmod(path, 0o777)  # any uid may send: only the sandbox stands in the way
    host.settimeout(0.5)
    heard = []
    try:
        code = HOST_SOCKET_SEND.replace("@PATH@", path)
        result = await env.ctx.sandbox.run(StepRequest(kind="python", session_id=ATTACKER, code=code))
        with contextlib.suppress(TimeoutError):
            heard.append(host.recv(100))
    finally:
        host.close()
        os.unlink(path)
    assert result.ok, result
    assert not heard and "delivered" not in result.output, (heard, result.output)
    assert "pair b'x'" in result.output  # the pair itself still works (asyncio's self-pipe is one)


async def test_zz_nothing_changed_outside_the_workspace(env: Env):
    """Runs last (file order): this module's cases left the home, canary, victim and warehouse intact."""
    check_nothing_changed_outside_the_workspace(env)


# An abstract Unix socket name belongs to a network namespace, not to the filesystem: seccomp refuses
# socket(), but socketpair + bind + connect(AF_UNSPEC) gives a step an addressable datagram socket. The
# root back end's steps shared the fork server's network namespace, so a step of one session could hand
# data to a concurrent step of another (the red team's covert channel). Each step's own namespace
# (root, userns) or Landlock's scope (landlock, ABI ≥ 6) keeps the name to the step; and seccomp now
# refuses bind, connect and sendto with an address on every back end (none included).
ABSTRACT_LISTEN = (
    "import ctypes, socket\n"
    "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\nb.close()\n"
    "try:\n    a.bind('\\0@NAME@')\nexcept OSError as e:\n    print('nothing: bind', e)\n    raise SystemExit\n"
    "unspec = (ctypes.c_ushort * 8)(0)\n"
    "ctypes.CDLL(None, use_errno=True).connect(a.fileno(), ctypes.byref(unspec), 16)\n"
    "a.settimeout(4)\n"
    "try:\n    print('GOT', a.recvfrom(100)[0])\nexcept OSError as e:\n    print('nothing', e)\n"
)
ABSTRACT_SEND = (
    "import socket, time\n"
    "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "for _ in range(30):\n"
    "    try:\n        a.sendto(b'FROM-THE-OTHER-SESSION', '\\0@NAME@'); print('sent'); break\n"
    "    except OSError as e:\n        print('refused', e); time.sleep(0.1)\n"
)


async def test_steps_of_two_sessions_cannot_meet_on_an_abstract_unix_socket(env: Env):
    from core import seccomp

    if env.backend == "none" and not seccomp.supported():
        return  # nothing stands in the way there (its protections rows say so)
    name = f"datathread-test-{uuid.uuid4().hex[:8]}"
    listen = StepRequest(
        kind="python", session_id=VICTIM, code=ABSTRACT_LISTEN.replace("@NAME@", name), timeout_s=15
    )
    send = StepRequest(
        kind="python", session_id=ATTACKER, code=ABSTRACT_SEND.replace("@NAME@", name), timeout_s=15
    )
    listening = asyncio.create_task(env.ctx.sandbox.run(listen))
    await asyncio.sleep(0.5)  # the listener binds first (the sender retries for 3 s either way)
    sent = await env.ctx.sandbox.run(send)
    heard = await listening
    assert heard.ok and sent.ok, (heard, sent)
    assert "FROM-THE-OTHER-SESSION" not in heard.output and "nothing" in heard.output, heard.output
    assert "sent" not in sent.output.split(), sent.output


async def test_a_step_runs_at_most_64_processes_at_once_on_root(env: Env):
    """On root each session's steps run as its own uid, and RLIMIT_NPROC caps them at 64 (each may use
    the memory limit, so the cap bounds the step's memory too). Not on userns, landlock and none: every
    step shares one uid there, and the same cap would be one budget for all sessions (a review found
    one session's fork bomb leaving another's step unable to start a thread)."""
    if env.backend != "root":
        return
    code = (
        "import os, time\nkids = []\n"
        "try:\n    for _ in range(100):\n"
        "        pid = os.fork()\n        if pid == 0:\n            time.sleep(3)\n            os._exit(0)\n"
        "        kids.append(pid)\nexcept OSError as e:\n    print('refused', type(e).__name__)\n"
        "print('children', len(kids))\nfor k in kids:\n    os.waitpid(k, 0)\n"
    )
    result = await env.ctx.sandbox.run(
        StepRequest(kind="python", session_id=ATTACKER, code=code, timeout_s=30)
    )
    assert result.ok, result
    children = int(result.output.split("children")[1].split()[0])
    assert "refused BlockingIOError" in result.output and 50 <= children < 64, result.output
