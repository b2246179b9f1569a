"""A step child in two processes: a supervisor that keeps the bot's connection, a runner that runs code.

Why two: the process that runs model code must hold nothing that reaches the bot. Had it the bot's
socket, it could write a forged result of any size (`os.write(4, …)`). So the step child forked by
the fork server becomes the supervisor: it keeps the connection, makes a pipe, forks the runner and
closes its own end of the pipe. The runner closes every descriptor it inherited except the pipe's
write end, confines itself (`core/isolation.py`) and runs the step; the supervisor reads at most
`MAX_RESULT_BYTES` from the pipe, and only once the runner is gone does it parse, validate and clip
what came (`StepResult.untrusted`) and answer the bot. Garbage, a partial line or an oversized one
is a failed step, never a forged one.

The disk quota. Where the back end gives the step a mount namespace (`root`, `userns`: `hard_quota`)
it is a hard limit: the step writes into a size- and inode-limited layer over its workspace, which
the supervisor lands once the runner is gone (`core/workspace_overlay.py`); the supervisor then also
stops the runner just past the step's time limit itself, so a step stopped there still lands what it wrote.
Elsewhere (`landlock`, `none`) it is a watchdog: every `TICK_S` (longer when the workspace is big
enough that measuring it takes a while) the supervisor measures the workspace and kills the runner
once it holds more bytes or files than the quota allows, so a burst can overshoot by what a step
writes in a tick. Either way one file cannot outgrow the room left (RLIMIT_FSIZE), and a workspace
already over quota may shrink but not grow.

Where the back end allows it (`root`, `userns`), the step gets its own PID namespace, so nothing it
starts outlives it: the supervisor unshares one and spawns a tiny init into it (pid 1: it only reaps
orphans) before it forks the runner (pid 2). When the step is over the supervisor kills that init,
and the kernel kills whatever is left in the namespace — a double-forked `setsid` daemon included —
before `waitpid` returns. The runner is not pid 1 itself, because pid 1 ignores signals from inside
its namespace that it has no handler for (a runner that kills itself would go on). The init is
spawned (vfork + exec of a few lines of Python), not forked: a fork of this big process (the data
stack is imported) costs tens of ms; the init's own start-up runs beside the step. It also exits on
its own when the supervisor is gone (end of file on a pipe only the supervisor holds).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core import isolation, workspace_overlay
from core.sandbox import StepRequest, StepResult
from core.workspace_overlay import Usage, measure

MAX_RESULT_BYTES = 4 * 2**20  # far above any honest result (tens of KB), far below trouble
TICK_S = 0.1
LANDING_S = 1.0  # a step runs this long past its limit, as before (the bot waits 2 s past it)
# Once the runner is gone the supervisor tells the bot it is landing the step's layer (`LANDING`); the
# bot then waits this much longer for the result, and the landing stops adding files `LANDING_STOP_S`
# before that, so deletions and the answer still come in time.
LANDING_GRACE_S, LANDING_STOP_S = 30.0, 8.0
LANDING = b'{"landing": true}\n'
HARD_QUOTA_BACKENDS = workspace_overlay.HARD_QUOTA_BACKENDS
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


@dataclass(frozen=True)
class Quota:
    """What the session's workspace may hold at most while a step runs."""

    max_bytes: int
    max_files: int


def quota_message(limit: Quota) -> str:
    return (
        f"The step was stopped: it filled the thread's workspace past its limit ({limit.max_bytes / 2**20:,.0f} MB "
        f"or {limit.max_files:,} files); write less, or delete files you no longer need."
    )


def room_message(limit: Quota, start: Usage, step_bytes: int) -> str:
    """What the model reads when a step hit the hard quota: what it had, and what to do."""
    files = max(limit.max_files - start.files, 0)
    capped = " (its memory limit: new files are held in memory until the step ends)"
    held = capped if step_bytes < limit.max_bytes - start.bytes else ""
    return (
        f"The step filled the thread's workspace past its limit ({limit.max_bytes / 2**20:,.0f} MB or "
        f"{limit.max_files:,} files): this step could add at most {step_bytes / 2**20:,.1f} MB{held} and "
        f"{files:,} files, and what did not fit was not saved. Delete files you no longer need in a step of "
        "their own (deleting frees room for the next step, not the one deleting), or write less."
    )


def changed_message(limit: Quota, start: Usage, step_bytes: int) -> str:
    """Hard quota: a step refused room while its own new writes left room most likely changed (appended
    to, chmod-ed) an existing file larger than its room (the layer needs a whole copy): it is told so."""
    return (
        f"The step could not save its writes: changing an existing file (appending to it, chmod, "
        f"rewriting it in place) needs room for a whole copy of it while the step runs, and this step "
        f"had {step_bytes / 2**20:,.1f} MB (the thread's workspace holds {start.bytes / 2**20:,.1f} MB of "
        f"its {limit.max_bytes / 2**20:,.0f} MB limit; its largest file is {start.largest / 2**20:,.1f} "
        "MB). Write a new file instead of changing a large one, or delete files you no longer need in a "
        "step of their own first."
    )


def supervise(
    run: Callable[[], StepResult],
    *,
    request: StepRequest,
    inherited: list,
    workspace: Path,
    quota: Quota,
    pid_namespace: bool = False,
    hard_quota: bool = False,
) -> StepResult | None:
    """Fork the runner (`run` confines and runs the step), watch it, return its validated result, or
    None when it ended without one (crash, kill: the bot says so). `inherited` are open objects (the
    bot's connection) the runner closes before anything else. With `pid_namespace` the runner is
    forked into a new PID namespace that ends with the step, with `hard_quota` it writes into a
    limited layer landed after it (this process serves one step only: both change it for good)."""
    hard_quota = hard_quota and workspace_overlay.AVAILABLE  # else this kernel's fallback: the watchdog
    with contextlib.suppress(ValueError, OSError):  # measuring and landing: a descriptor per level
        resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    limit = Quota(max(quota.max_bytes, 1), max(quota.max_files, 1))
    start = measure(workspace, stop=None)
    if start.unwalkable:  # a tree it cannot measure is charged as a full workspace: it may only shrink
        start = Usage(max(limit.max_bytes, start.bytes), start.files, start.unwalkable, start.largest)
    limit = Quota(max(limit.max_bytes, start.bytes), max(limit.max_files, start.files))
    # One file can never outgrow what is left of the quota: the kernel refuses the write (EFBIG), so
    # the most common flood — one growing file — stops exactly at the limit, not a tick or two past it.
    room = limit.max_bytes - start.bytes
    step_bytes = min(room, request.memory_mb * 2**20)  # the layer's pages are the step's memory too
    layer = None
    if hard_quota:
        try:
            layer = workspace_overlay.mount_over(
                workspace, add_bytes=step_bytes, add_files=limit.max_files - start.files, existing=start.files
            )
        except (RuntimeError, OSError) as exc:
            why = str(exc) if isinstance(exc, RuntimeError) else ""
            return StepResult(
                ok=False, error=why or "Refused: the step's workspace quota could not be set up."
            )
    try:
        init = _start_init() if pid_namespace else None
        if pid_namespace and init is None:
            return StepResult(
                ok=False, error="Refused: the step's own process namespace could not be set up."
            )
        data, stopped = _run(run, request, inherited, workspace, limit, room, init, layer)
        over, landing = _land(layer, limit, start, inherited) if layer is not None else (False, "")
        held = measure("upper", dir_fd=layer.scratch).bytes if layer is not None else 0  # new bytes
    finally:
        if layer is not None:
            layer.close()
    if stopped:
        return StepResult(ok=False, killed=True, error=stopped)
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    result = StepResult.untrusted(raw, request)
    no_room = not result.ok and any(os.strerror(e) in result.error for e in (errno.EFBIG, errno.ENOSPC))
    if hard_quota and no_room and not (landing or over) and start.largest > step_bytes > held + 2**16:
        return StepResult(ok=False, output=result.output, error=changed_message(limit, start, step_bytes))
    if landing or over:
        return StepResult(
            ok=False, output=result.output, error=landing or room_message(limit, start, step_bytes)
        )
    if not result.ok and room < request.file_mb * 2**20 and "File too large" in result.error:
        return StepResult(ok=False, output=result.output, error=quota_message(limit))
    return result


def _run(run, request, inherited, workspace, limit, room, init, layer) -> tuple[bytes, str]:
    """Fork the runner (pid 2 of the step's PID namespace when there is an `init`) and watch it until
    it and everything it started are gone; returns (its result's bytes, why it was stopped)."""
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()  # with an init: pid 2 of the step's namespace
        if pid == 0:
            _cap_file_size(room)
            _runner(run, request, inherited, read_end, write_end)
        os.close(write_end)
        try:
            if layer is None:
                return _watch(pid, read_end, workspace, limit)
            # The bot stops waiting at the limit plus 2 s: this leaves the step the time it had, and
            # the landing about a second.
            deadline = time.monotonic() + request.timeout_s + LANDING_S
            data, stopped = _watch(pid, read_end, workspace, limit, watchdog=False, deadline=deadline)
            if stopped == "time":
                stopped = (
                    f"The step was stopped after {request.timeout_s:g} s (the step time limit). "
                    "Try a smaller query, sample the data, or save intermediate results."
                )
            return data, stopped
        finally:
            os.close(read_end)
    finally:
        if init is not None:
            _kill(init)  # returns once the namespace is empty: nothing the step started is left


def _land(layer: workspace_overlay.Layer, limit: Quota, start: Usage, inherited: list) -> tuple[bool, str]:
    """Apply the step's layer to the workspace (only what fits the quota, within `LANDING_GRACE_S`);
    returns (whether something did not fit, or the layer filled up; a sentence if landing failed)."""
    with contextlib.suppress(OSError, ValueError):  # the bot now waits LANDING_GRACE_S more
        next(h for h in inherited if hasattr(h, "write")).write(LANDING)
    deadline = time.monotonic() + LANDING_GRACE_S - LANDING_STOP_S
    full = layer.full()
    budget = workspace_overlay.Budget(limit.max_bytes - start.bytes, limit.max_files - start.files)
    try:
        whole = workspace_overlay.land(layer, budget, deadline=deadline)
    except (OSError, RecursionError) as exc:
        why = getattr(exc, "strerror", None) or "too deeply nested"
        return full, f"The step's files could not all be saved to the thread's workspace ({why})."
    if not whole:
        return full, (
            f"The step's files took longer than {LANDING_GRACE_S - LANDING_STOP_S:g} s to save to the "
            "thread's workspace: some were not saved, and none of the step's deletions or renames were "
            "applied (the files it renamed are still there under their old names). Write fewer or "
            "smaller files per step."
        )
    return full or budget.refused > 0, ""


def _start_init() -> int | None:
    """A new PID namespace for this process's next children, and its init (pid 1) spawned into it;
    None where either fails (the step is then refused: the back end reported this protection on)."""
    if not isolation.unshare(isolation.CLONE_NEWPID):
        return None
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


def _cap_file_size(room: int) -> None:
    """RLIMIT_FSIZE at most `room` bytes (the step's own file limit, set later, only lowers it)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        cap = max(room, 0) if hard == resource.RLIM_INFINITY else min(max(room, 0), hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def _runner(run, request: StepRequest, inherited: list, read_end: int, write_end: int) -> None:
    """The runner's whole life: hold only the pipe's write end, run, write the result, exit."""
    code = 0
    try:
        for handle in inherited:
            handle.close()
        os.close(read_end)
        _close_all_but(write_end)
        # fd 1/2 are the fork server's stdout (a pipe the bot stops reading after "ready") and its log:
        # a step writing there directly could block every later step or flood the log.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
        try:
            result = run()
        except Exception as exc:  # confinement failed: the step did not run, and says why
            result = StepResult(ok=False, error=f"The sandbox could not set up this step ({exc}).")
        result = StepResult.untrusted(result.to_dict(), request)  # bounded before it is written
        view = memoryview(json.dumps(result.to_dict()).encode())
        while view:
            view = view[os.write(write_end, view) :]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _close_all_but(keep: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    top = limit if 0 < limit < 1 << 20 else 1 << 16
    os.closerange(3, keep)
    os.closerange(keep + 1, top)


def _watch(
    pid: int,
    read_end: int,
    workspace: Path,
    limit: Quota,
    *,
    watchdog: bool = True,
    deadline: float = float("inf"),
) -> tuple[bytes, str]:
    """Read the runner's result while it runs and (`watchdog`) police the workspace; returns (data,
    why stopped). Past `deadline` the runner is killed ("time")."""
    os.set_blocking(read_end, False)
    exited = os.pidfd_open(pid)
    data = bytearray()
    pipe_open = True
    interval = TICK_S
    next_tick = time.monotonic() + interval if watchdog else deadline
    reaped = False
    try:
        while True:
            if time.monotonic() >= deadline:
                _kill(pid)
                reaped = True
                return b"", "time"
            waiting = [exited, read_end] if pipe_open else [exited]
            wait = min(next_tick, deadline) - time.monotonic()
            ready, _, _ = select.select(waiting, [], [], None if wait == float("inf") else max(0.0, wait))
            if read_end in ready:
                pipe_open = _drain(read_end, data)
                if len(data) > MAX_RESULT_BYTES:
                    _kill(pid)
                    return (
                        b"",
                        f"The step's result was larger than {MAX_RESULT_BYTES // 2**20} MB and was refused.",
                    )
            if exited in ready:
                os.waitpid(pid, 0)
                reaped = True
                if pipe_open:
                    _drain(read_end, data)  # what is there now: a leftover holding the pipe is not waited for
                return bytes(data[: MAX_RESULT_BYTES + 1]), ""
            if watchdog and time.monotonic() >= next_tick:
                started = time.monotonic()
                if measure(workspace, stop=limit).over(limit):
                    _kill(pid)
                    return b"", quota_message(limit)
                interval = max(
                    TICK_S, 2 * (time.monotonic() - started)
                )  # a big workspace: measure less often
                next_tick = time.monotonic() + interval
    except BaseException:
        if not reaped:  # the runner goes first: the init waits for its namespace to empty
            _kill(pid)
        raise
    finally:
        os.close(exited)


def _drain(fd: int, into: bytearray) -> bool:
    """Read what the pipe holds now; False once it reached end of file."""
    while len(into) <= MAX_RESULT_BYTES:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        into += chunk
    return True


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
