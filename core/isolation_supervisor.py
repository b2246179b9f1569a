"""A step child in two processes: a supervisor that keeps the bot's connection, a runner that runs code.

Why two: the process that runs model code must hold nothing that reaches the bot. Had it the bot's
socket, it could write a forged result of any size (`os.write(4, …)`). So the step child forked by
the fork server becomes the supervisor: it keeps the connection, makes a pipe, forks the runner and
closes its own end of the pipe. The runner closes every descriptor it inherited except the pipe's
write end, confines itself (`core/isolation.py`) and runs the step; the supervisor reads at most
`MAX_RESULT_BYTES` from the pipe, and only once the runner is gone does it parse, validate and clip
what came (`StepResult.untrusted`) and answer the bot. Garbage, a partial line or an oversized one
is a failed step, never a forged one.

While the runner works the supervisor is also its disk watchdog: every `TICK_S` (longer when the
workspace is big enough that measuring it takes a while) it measures the workspace and kills the
runner once it holds more bytes or files than the session's quota allows — a hard limit during the
step, not a report after it. A workspace already over quota may shrink but not grow.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.sandbox import StepRequest, StepResult

MAX_RESULT_BYTES = 4 * 2**20  # far above any honest result (tens of KB), far below trouble
TICK_S = 0.1


@dataclass(frozen=True)
class Quota:
    """What the session's workspace may hold at most while a step runs."""

    max_bytes: int
    max_files: int


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int

    def over(self, limit: Quota) -> bool:
        return self.bytes > limit.max_bytes or self.files > limit.max_files


def measure(root: Path, *, stop: Quota | None = None) -> Usage:
    """Bytes (apparent size) and entries under `root`, not following links; stops early once past
    `stop` (the watchdog needs to know "over", not by how much)."""
    total = files = 0
    pending = [str(root)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                files += 1
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_size
        if stop is not None and Usage(total, files).over(stop):
            break
    return Usage(total, files)


def quota_message(limit: Quota) -> str:
    return (
        f"The step was stopped: it filled the thread's workspace past its limit ({limit.max_bytes / 2**20:,.0f} MB "
        f"or {limit.max_files:,} files); write less, or delete files you no longer need."
    )


def supervise(
    run: Callable[[], StepResult],
    *,
    request: StepRequest,
    inherited: list,
    workspace: Path,
    quota: Quota,
) -> StepResult | None:
    """Fork the runner (`run` confines and runs the step), watch it, return its validated result, or
    None when it ended without one (crash, kill: the bot says so). `inherited` are open objects (the
    bot's connection) the runner closes before anything else."""
    limit = Quota(max(quota.max_bytes, 1), max(quota.max_files, 1))
    start = measure(workspace, stop=None)
    limit = Quota(max(limit.max_bytes, start.bytes), max(limit.max_files, start.files))
    # One file can never outgrow what is left of the quota: the kernel refuses the write (EFBIG), so
    # the most common flood — one growing file — stops exactly at the limit, not a tick or two past it.
    room = limit.max_bytes - start.bytes
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _cap_file_size(room)
        _runner(run, request, inherited, read_end, write_end)
    os.close(write_end)
    try:
        data, stopped = _watch(pid, read_end, workspace, limit)
    finally:
        os.close(read_end)
    if stopped:
        return StepResult(ok=False, killed=True, error=stopped)
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    result = StepResult.untrusted(raw, request)
    if not result.ok and room < request.file_mb * 2**20 and "File too large" in result.error:
        return StepResult(ok=False, output=result.output, error=quota_message(limit))
    return result


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


def _watch(pid: int, read_end: int, workspace: Path, limit: Quota) -> tuple[bytes, str]:
    """Read the runner's result while it runs and police the workspace; returns (data, why stopped)."""
    os.set_blocking(read_end, False)
    exited = os.pidfd_open(pid)
    data = bytearray()
    pipe_open = True
    interval = TICK_S
    next_tick = time.monotonic() + interval
    try:
        while True:
            waiting = [exited, read_end] if pipe_open else [exited]
            ready, _, _ = select.select(waiting, [], [], max(0.0, next_tick - time.monotonic()))
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
                if pipe_open:
                    _drain(read_end, data)  # what is there now: a leftover holding the pipe is not waited for
                return bytes(data[: MAX_RESULT_BYTES + 1]), ""
            if time.monotonic() >= next_tick:
                started = time.monotonic()
                if measure(workspace, stop=limit).over(limit):
                    _kill(pid)
                    return b"", quota_message(limit)
                interval = max(
                    TICK_S, 2 * (time.monotonic() - started)
                )  # a big workspace: measure less often
                next_tick = time.monotonic() + interval
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
