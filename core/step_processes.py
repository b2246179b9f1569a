"""A step's processes, made before its request arrives: the PID namespace's init and the runner.

Why in advance: a step child is a fork of the big fork server (the data stack is imported), and so is
its runner. Forking the runner once the request is in (page tables of a ~200 MB process copied) and
starting the namespace's init (a Python start-up) put both on every step's path, competing with it
for the host's cores. The spare step child waiting in `accept` (`core/zygote.py`) does both before it
waits, with nothing that depends on the request: this module's `prepare`. Once the request is in, the
supervisor mounts the workspace's layer and gives the runner its request (`Prepared.start`).

What the runner holds: it is forked before the spare accepts a connection, so it never has the bot's
connection at all; it closes everything it inherited at once (the listening socket among them) but a
pipe to read its request from and a pipe to write its result to (read, bounded and validated by the
supervisor, `core/isolation_supervisor.py`). It dies with the spare (parent-death signal), and the
spare dies with the fork server. A runner that is gone before its request (killed, out of memory) is
a clear error for that step; the next step has a new spare and runner.

The mount namespace. Where the step gets the hard quota (`core/workspace_overlay.py`), the spare
unshares its own mount namespace before it forks the runner; a fork shares its parent's mount
namespace, so the layer the supervisor mounts there once the workspace is known is what the runner
sees when it makes its own namespace and fresh root from it (`core/isolation.py`), after its request.

The PID namespace (`root`, `userns`): the spare unshares one and spawns the init into it (pid 1: it
only reaps orphans), then forks the runner (pid 2). When the step is over the supervisor kills the
init, and the kernel kills whatever is left in the namespace — a double-forked `setsid` daemon
included — before `waitpid` returns. The runner is not pid 1 itself, because pid 1 ignores signals
from inside its namespace that it has no handler for (a runner that kills itself would go on). The
init is spawned (vfork + exec of a few lines of Python), not forked: a fork of the big process would
cost as much again at its exit, which is on the step's path (the namespace must be empty before the
layer lands). It exits on its own when the spare is gone (end of file on a pipe only the spare holds).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import isolation, isolation_root
from core.sandbox import StepRequest, StepResult

# Pid 1 of a step's PID namespace (run with -S -I, so nothing but the standard library is imported):
# make itself non-dumpable, then reap orphans until the supervisor kills it or goes away (end of file
# on descriptor argv[1]). `_signal`, not `signal`: the latter imports `enum`, a third of this
# process's start-up (~12 of ~34 ms CPU), paid by every step.
_INIT = (
    "import ctypes, os, _signal as signal, sys\n"
    "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"  # not dumpable: a same-uid step cannot open /proc/1/*
    "def reap(*_):\n"
    "    try:\n"
    "        while os.waitpid(-1, os.WNOHANG)[0]:\n"
    "            pass\n"
    "    except ChildProcessError:\n"
    "        pass\n"
    "signal.signal(signal.SIGCHLD, reap)\n"
    "reap()\n"
    "while os.read(int(sys.argv[1]), 1):\n"
    "    pass\n"
)
GONE = (
    "The sandbox's step process ended before it was given this step (killed, or out of memory on the "
    "host), so the step did not run. Run it again: the next step gets a new one."
)
NO_PID_NAMESPACE = "Refused: the step's own process namespace could not be set up."
NO_MOUNT_NAMESPACE = "Refused: the step's workspace quota could not be set up (mount namespace)."
NOT_PREPARED = (
    "Refused: the sandbox could not start this step's processes (the host is out of processes or memory)"
)
# Tests only: "fail" makes every preparation fail, as at a process limit (the spare then refuses its step).
PREPARE_HOOK = "DATATHREAD_TEST_PREPARE"

Run = Callable[[StepRequest, Path], StepResult]
Prime = Callable[[], None]  # in the runner before its request: first-time costs off the step's path


@dataclass
class Prepared:
    """A spare's runner waiting for its request, and the init of its PID namespace (if any)."""

    runner: int  # pid, or 0 where it could not be forked
    order: int  # write end of the runner's request pipe (-1 once sent or closed)
    result: int  # read end of the runner's result pipe
    init: int | None = None
    subreaper: bool = False  # no PID namespace: this process collects what the step leaves (`end`)
    refusal: str = ""  # set where a protection the back end reported could not be prepared
    reaped: bool = False
    status: int | None = None  # the runner's wait status, once reaped by the supervisor's watch
    mounts: bool = False  # own mount namespace made (`prepare` makes each part once)
    pid_namespace: bool = False  # PID namespace unshared for this process's next children

    def start(self, request: StepRequest, workspace: Path, room: int) -> bool:
        """Give the runner its step: it confines itself and runs it. False where it is already gone."""
        if not self.runner or self.order < 0:
            return False
        message = json.dumps({"request": request.to_dict(), "workspace": str(workspace), "room": room})
        try:
            view = memoryview(message.encode())
            while view:
                view = view[os.write(self.order, view) :]
        except OSError:  # EPIPE: nothing reads the pipe any more, the runner is gone
            return False
        finally:
            self._close_order()
        return True

    def end(self) -> None:
        """Kill what is left: the runner (unless reaped), then the init, which returns once the
        namespace is empty — or, without a PID namespace, every process left under this one (a
        subreaper: detached daemons are its children) — nothing the step started is left. Idempotent."""
        self._close_order()
        if self.runner and not self.reaped:
            kill(self.runner)
            self.reaped = True
        if self.init is not None:
            kill(self.init)
            self.init = None
        elif self.subreaper:
            kill_descendants()
        with contextlib.suppress(OSError):
            os.close(self.result)
        self.result = -1

    def _close_order(self) -> None:
        if self.order >= 0:
            os.close(self.order)
            self.order = -1


def prepare(
    run: Run,
    *,
    pid_namespace: bool,
    own_mounts: bool,
    previous: Prepared | None = None,
    prime: Prime | None = None,
) -> Prepared:
    """In the spare, before it accepts a connection: its own mount namespace (`own_mounts`: the step
    gets the hard quota), the step's PID namespace and init (`pid_namespace`), and the runner forked,
    waiting for its request. Changes this process for good (it serves one step).

    Never raises: a failure (fork or spawn refused at a process limit, out of memory) is a `refusal`,
    one sentence for the step, so a spare that cannot prepare still serves its step rather than dying
    (the fork server would fork the next at once, and so on). Given the `previous` attempt, it does
    only what that one did not: the spare tries again once its request is in, so a passing failure
    minutes earlier does not refuse the step (a second `unshare` of a PID namespace would fail).

    `prime` runs in the runner while it waits (`core.steps.prime`): it must start no thread (the runner
    still enters its namespaces) and a failure there is ignored (the step pays the cost instead)."""
    done = previous or Prepared(runner=0, order=-1, result=-1)
    done.refusal = ""
    try:
        if os.environ.get(PREPARE_HOOK) == "fail":
            raise OSError(errno.EAGAIN, "test hook")
        if own_mounts and not done.mounts:
            if not isolation_root.own_mount_namespace():
                done.refusal = NO_MOUNT_NAMESPACE
                return done
            done.mounts = True
        if pid_namespace and done.init is None:
            done.init = _start_init(done)
            if done.init is None:
                done.refusal = NO_PID_NAMESPACE
                return done
        elif not pid_namespace and not done.subreaper:
            done.subreaper = isolation.become_subreaper()
            if done.subreaper:
                _end_with_parent()
        order_r, order_w = os.pipe()
        try:
            result_r, result_w = os.pipe()
        except OSError:
            os.close(order_r)
            os.close(order_w)
            raise
        try:
            pid = os.fork()  # with an init: pid 2 of the step's namespace
        except OSError:
            for fd in (order_r, order_w, result_r, result_w):
                os.close(fd)
            raise
        if pid == 0:
            _runner(run, order_r, result_w, prime)
        os.close(order_r)
        os.close(result_w)
        done.runner, done.order, done.result = pid, order_w, result_r
    except OSError as exc:
        done.refusal = f"{NOT_PREPARED} ({exc.strerror or exc})."
    return done


def _end_with_parent() -> None:
    """A subreaper supervisor whose fork server is gone (the bot killed with SIGKILL takes the fork
    server with it) kills what its step started before it goes: a SIGKILL would leave a detached
    daemon to init. The runner, forked after this, ignores SIGTERM.

    The same SIGTERM from anyone else — systemd's stop sends it to every process of the service — is
    ignored while the fork server lives: the bot ends its steps itself, in order (running answers get
    their grace). It killed the step at once, and the model was told the step ran out of memory."""
    parent = os.getppid()

    def end(*_):
        if os.getppid() == parent:  # not the parent's death (the kernel re-parents before it signals)
            return
        kill_descendants()
        os._exit(1)

    signal.signal(signal.SIGTERM, end)
    isolation.die_with_parent(signal.SIGTERM)


def _start_init(done: Prepared) -> int | None:
    """A new PID namespace for this process's next children (once: `done.pid_namespace`), and its
    init (pid 1) spawned into it; None where either fails (the step is then refused: the back end
    reported this protection on)."""
    if not done.pid_namespace:
        if not isolation.unshare(isolation.CLONE_NEWPID):
            return None
        done.pid_namespace = True
    alive_r, alive_w = os.pipe()  # the init's read end sees end of file once this process is gone
    try:
        os.set_inheritable(alive_r, True)
        argv = [sys.executable, "-S", "-I", "-c", _INIT, str(alive_r)]
        return os.posix_spawn(sys.executable, argv, dict(os.environ))
    except OSError:
        os.close(alive_w)
        return None
    finally:
        os.close(alive_r)  # alive_w stays open, unused, until this process exits


def _runner(run: Run, order: int, result_w: int, prime: Prime | None = None) -> None:
    """The runner's whole life: hold only its two pipes, wait for the request, run, write the result."""
    code = 0
    try:
        # Not the supervisor's handler (`_end_with_parent`), and not the default either: a service
        # manager's SIGTERM to every process is for the bot, which stops steps itself.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _close_all_but(order, result_w)  # the listening socket, the spare's pipes: at once
        # fd 1/2 are the fork server's stdout (a pipe the bot stops reading after "ready") and its log:
        # a step writing there directly could block every later step or flood the log.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
        isolation.die_with_parent()  # and the spare with the fork server
        if prime is not None:
            with contextlib.suppress(Exception):
                prime()
        message = _read_all(order)
        os.close(order)
        if not message:  # the supervisor refused the request (or is gone): nothing to run
            os._exit(0)
        given = json.loads(message)
        request = StepRequest(**given["request"])
        _cap_file_size(int(given["room"]))
        try:
            result = run(request, Path(given["workspace"]))
        except Exception as exc:  # confinement failed: the step did not run, and says why
            result = StepResult(ok=False, error=f"The sandbox could not set up this step ({exc}).")
        result = StepResult.untrusted(result.to_dict(), request)  # bounded before it is written
        view = memoryview(json.dumps(result.to_dict()).encode())
        while view:
            view = view[os.write(result_w, view) :]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _cap_file_size(room: int) -> None:
    """RLIMIT_FSIZE at most `room` bytes (the step's own file limit, set later, only lowers it)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        cap = max(room, 0) if hard == resource.RLIM_INFINITY else min(max(room, 0), hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def _close_all_but(*keep: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = limit if 0 < limit < 1 << 20 else 1 << 16
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, top)


def kill_descendants(rounds: int = 1000) -> None:
    """Kill and reap every child of this (subreaper) process, round after round: a killed child's own
    children become this process's as it exits, so each round reaches one generation deeper, and a
    SIGKILLed process forks no more. Bounded, for a tree that somehow keeps growing."""
    for _ in range(rounds):
        left = children()
        if not left:
            return
        for pid in left:
            kill(pid)


def children() -> list[int]:
    """This (single-threaded) process's children: the kernel's list, else a walk of /proc."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as listed:
            return [int(pid) for pid in listed.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN
        return [
            int(entry) for entry in os.listdir("/proc") if entry.isdigit() and parent_of(int(entry)) == me
        ]


def parent_of(pid: int) -> int | None:
    """A process's parent pid from /proc, None where it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
