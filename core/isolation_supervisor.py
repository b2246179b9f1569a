"""A step child in two processes: a supervisor that keeps the bot's connection, a runner that runs code.

Why two: the process that runs model code must hold nothing that reaches the bot. Had it the bot's
socket, it could write a forged result of any size (`os.write(4, …)`). So the spare step child of the
fork server forks the runner before it even accepts the bot's connection (`core/step_processes.py`:
the runner never holds that connection, and keeps nothing but a pipe to read its request from and
one to write its result to), then becomes the supervisor: it keeps the connection, gives the runner
its step, reads at most `MAX_RESULT_BYTES` from the result pipe, and only once the runner is gone
does it parse, validate and clip what came (`StepResult.untrusted`) and answer the bot. Garbage, a
partial line or an oversized one is a failed step, never a forged one.

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
starts outlives it: the runner is pid 2 under a tiny init, both made before the request
(`core/step_processes.py`). When the step is over the supervisor kills that init, and the kernel
kills whatever is left in the namespace — a double-forked `setsid` daemon included — before
`waitpid` returns, and only then lands the layer.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import time
from dataclasses import dataclass
from pathlib import Path

from core import step_processes, workspace_overlay
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
    prepared: step_processes.Prepared,
    *,
    request: StepRequest,
    stream,
    workspace: Path,
    quota: Quota,
    hard_quota: bool = False,
    started: float | None = None,
) -> StepResult | None:
    """Give the `prepared` runner its step, watch it, return its validated result, or None when it
    ended without one (crash, kill: the bot says so). `stream` is the bot's connection (told when the
    step's layer lands). With `hard_quota` the runner writes into a limited layer, mounted here in the
    mount namespace it shares with the runner, and landed after it (this process serves one step
    only: it changes it for good). `started`: when the bot was told the step's pid (its own clock for
    the step starts then; the time limit here counts from it too, not from after measuring the
    workspace, which can take a second, so this process stops the step before the bot kills it)."""
    started = time.monotonic() if started is None else started
    hard_quota = hard_quota and workspace_overlay.AVAILABLE  # else this kernel's fallback: the watchdog
    try:
        if prepared.refusal:
            return StepResult(ok=False, error=prepared.refusal)
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
                    workspace,
                    add_bytes=step_bytes,
                    add_files=limit.max_files - start.files,
                    existing=start.files,
                    unshare=False,  # the spare made it, before it forked the runner
                )
            except (RuntimeError, OSError) as exc:
                why = str(exc) if isinstance(exc, RuntimeError) else ""
                return StepResult(
                    ok=False, error=why or "Refused: the step's workspace quota could not be set up."
                )
        try:
            data, stopped = _run(prepared, request, workspace, limit, room, layer, started)
            over, landing = _land(layer, limit, start, stream) if layer is not None else (False, "")
            held = measure("upper", dir_fd=layer.scratch).bytes if layer is not None else 0  # new bytes
        finally:
            if layer is not None:
                layer.close()
    finally:
        prepared.end()
    if stopped:
        return StepResult(ok=False, killed=True, error=stopped)
    try:
        raw = json.loads(data)
    except ValueError:
        return ended_early(prepared.status)
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


def _run(prepared, request, workspace, limit, room, layer, started: float) -> tuple[bytes, str]:
    """Give the runner its step and watch it until it and everything it started are gone; returns
    (its result's bytes, why it was stopped)."""
    try:
        if not prepared.start(request, workspace, room):
            return b"", step_processes.GONE
        # The bot stops waiting at the limit plus 2 s: this leaves the step the time it had, and
        # the landing about a second. Stopped here, not by the bot's kill of this process group,
        # the step's processes are all ended by `end` — those that left the group too.
        deadline = started + request.timeout_s + LANDING_S
        data, stopped = _watch(prepared, workspace, limit, watchdog=layer is None, deadline=deadline)
        if stopped == "time":
            stopped = (
                f"The step was stopped after {request.timeout_s:g} s (the step time limit). "
                "Try a smaller query, sample the data, or save intermediate results."
            )
        return data, stopped
    finally:
        prepared.end()  # returns once the namespace is empty: nothing the step started is left


def _land(layer: workspace_overlay.Layer, limit: Quota, start: Usage, stream) -> tuple[bool, str]:
    """Apply the step's layer to the workspace (only what fits the quota, within `LANDING_GRACE_S`);
    returns (whether something did not fit, or the layer filled up; a sentence if landing failed)."""
    with contextlib.suppress(OSError, ValueError):  # the bot now waits LANDING_GRACE_S more
        stream.write(LANDING)
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


def ended_early(status: int | None) -> StepResult | None:
    """No result came back. A runner that ended by itself (`os._exit`, a library calling exit) is said
    as such: it was reported as most likely out of memory, and the model told to use less data. A
    kill (the memory limit, a signal) stays None: the bot's own message names the limits."""
    if status is None or not os.WIFEXITED(status):
        return None
    return StepResult(
        ok=False,
        error=(
            f"The step's code ended its own process (exit status {os.WEXITSTATUS(status)}: os._exit, or "
            "a library calling exit) before it could return a result, so what it printed was lost. Let "
            "the code finish normally."
        ),
    )


def _watch(
    prepared: step_processes.Prepared,
    workspace: Path,
    limit: Quota,
    *,
    watchdog: bool = True,
    deadline: float = float("inf"),
) -> tuple[bytes, str]:
    """Read the runner's result while it runs and (`watchdog`) police the workspace; returns (data,
    why stopped). Past `deadline` the runner is killed ("time"). Sets `prepared.reaped` only once the
    runner really is reaped: `end()` must otherwise kill and reap it before the init, which waits for
    its namespace to empty (a runner's zombie left there would keep it waiting for good)."""
    pid, read_end = prepared.runner, prepared.result
    data = bytearray()
    pipe_open = True
    interval = TICK_S
    next_tick = time.monotonic() + interval if watchdog else deadline
    reaped = False
    exited = -1
    try:
        os.set_blocking(read_end, False)
        exited = os.pidfd_open(pid)
        while True:
            if time.monotonic() >= deadline:
                step_processes.kill(pid)
                reaped = True
                return b"", "time"
            waiting = [exited, read_end] if pipe_open else [exited]
            wait = min(next_tick, deadline) - time.monotonic()
            ready, _, _ = select.select(waiting, [], [], None if wait == float("inf") else max(0.0, wait))
            if read_end in ready:
                pipe_open = _drain(read_end, data)
                if len(data) > MAX_RESULT_BYTES:
                    step_processes.kill(pid)
                    reaped = True
                    return (
                        b"",
                        f"The step's result was larger than {MAX_RESULT_BYTES // 2**20} MB and was refused.",
                    )
            if exited in ready:
                prepared.status = os.waitpid(pid, 0)[1]
                reaped = True
                if pipe_open:
                    _drain(read_end, data)  # what is there now: a leftover holding the pipe is not waited for
                return bytes(data[: MAX_RESULT_BYTES + 1]), ""
            if watchdog and time.monotonic() >= next_tick:
                started = time.monotonic()
                if measure(workspace, stop=limit).over(limit):
                    step_processes.kill(pid)
                    reaped = True
                    return b"", quota_message(limit)
                interval = max(
                    TICK_S, 2 * (time.monotonic() - started)
                )  # a big workspace: measure less often
                next_tick = time.monotonic() + interval
    except BaseException:
        if not reaped:  # the runner goes first: the init waits for its namespace to empty
            step_processes.kill(pid)
            reaped = True
        raise
    finally:
        prepared.reaped = reaped
        if exited >= 0:
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
