"""The local sandbox's fork server: imports the data stack once, then forks one child per step.

Started by `LocalSandbox` with a scrubbed environment. Protocol on a Unix socket, one connection per
step: the bot sends one JSON line (the request plus its workspace), the child answers with a JSON
line `{"pid": …}` as soon as it exists (so the bot can kill its process group on timeout), then one
JSON line with the `StepResult`. A child serves one step and exits: no state passes between steps.

The child is forked in advance (one spare waits in `accept`) and is only the step's supervisor: the
code runs in a runner the spare forks before it accepts a connection (with the step's PID namespace
and its init, `core/step_processes.py`), which so never holds the bot's connection and waits on a
pipe for its step (`core/isolation_supervisor.py`).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from core import (
    isolation,
    isolation_backends,
    isolation_session,
    isolation_supervisor,
    step_processes,
    workspace_overlay,
)

BACKOFF_S, BACKOFF_MAX_S = 0.05, 1.5  # between spares lost before their step (doubled each time)
# Tests only: "die" makes every spare exit before it accepts a connection (as one killed would).
SPARE_HOOK = "DATATHREAD_TEST_SPARE"


def preload():
    """Import the data stack and open the database every SQL step starts from; returns that database.

    The reason this process exists: pay the import and set-up cost once, not per step."""
    import duckdb  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow
    import pyarrow.pandas_compat
    import pyarrow.parquet  # noqa: F401

    import core.chart_fonts
    import core.chart_png
    import core.steps

    core.chart_fonts.use_cjk_fallback()  # CJK labels drawn, not boxes, where the host has a CJK font
    core.chart_fonts.use_phone_defaults()  # legible at 360 px wide, colour-blind-safe colours
    core.chart_png.use_small_pngs()  # charts small enough to go inline in Teams (never a link that expires)
    core.steps.warm()  # the SQL path's first-time costs, paid here once instead of in every step
    return core.steps.open_database()  # thread-free: safe to fork (tests/core/test_steps_warm.py)


def _code_paths() -> list[str]:
    """Interpreter, venv and our `core` package: bound read-only into a step's fresh root, so lazy
    imports inside a step keep working (not the whole checkout: a `.env` may sit there).

    Each both where it really is and as this process reached it: a venv behind a symlink (a deploy's
    `/app/.venv`, pyenv-virtualenv's `versions/NAME`) has its `sys.path` under the link, and a step
    that finds only the real directory cannot import what the fork server did not (pandas then
    reports "Unable to find a usable engine" for parquet)."""
    seen = (sys.prefix, sys.base_prefix, os.path.dirname(os.path.abspath(__file__)))
    return sorted({q for p in seen for q in (os.path.abspath(p), os.path.realpath(p))})


def _serve_child(conn: socket.socket, args: argparse.Namespace, prepared: step_processes.Prepared) -> None:
    """The step child: it becomes the supervisor (`core/isolation_supervisor.py`), which keeps this
    connection and gives the runner it forked before `accept` (`prepared`) its step."""
    from core.sandbox import StepRequest, StepResult, is_valid_session_id

    # Read buffered: an unbuffered file's readline takes a `recv` per byte (26 ms for a 5 KB request on
    # a busy host, measured); the bot sends this one line, then only reads. Written unbuffered.
    with conn.makefile("rb") as request_line:
        raw = json.loads(request_line.readline() or b"{}")
    stream = conn.makefile("wb", buffering=0)
    workspace = Path(raw.pop("workspace", ""))
    quota = isolation_supervisor.Quota(
        int(raw.pop("quota_bytes", 2**31)), int(raw.pop("quota_files", 100_000))
    )
    stream.write(json.dumps({"pid": os.getpid()}).encode() + b"\n")  # the step's process group
    told = time.monotonic()  # the bot's clock for this step starts about now: so does the deadline here
    request = StepRequest(**raw)
    root = Path(args.workspaces).resolve()
    if not is_valid_session_id(request.session_id) or workspace.resolve() != root / request.session_id:
        prepared.end()
        result = StepResult(ok=False, error="Refused: the workspace does not belong to this session.")
    else:
        result = isolation_supervisor.supervise(
            prepared,
            request=request,
            stream=stream,
            workspace=workspace,
            quota=quota,
            hard_quota=args.isolation.backend in isolation_supervisor.HARD_QUOTA_BACKENDS,
            started=told,
        )
    if result is not None:  # None: the runner ended without a result; the bot says so
        stream.write(json.dumps(result.to_dict()).encode() + b"\n")
    # The answer is out: whatever the runner left in this process group (a background child still
    # writing, say) ends with the step — this process included, which is done anyway.
    os.killpg(0, signal.SIGKILL)


def _run_confined(request, workspace: Path, args: argparse.Namespace):
    """In the runner: apply the step's confinement, then run it. Irreversible; never returns to serve."""
    from core.steps import run_step

    # Only a warehouse step sees the warehouse file: Python and workspace SQL never need it, and
    # hiding it keeps per-channel table allowlists from being bypassed by opening the file directly.
    warehouse = args.warehouse if request.kind == "warehouse" else ""
    isolation.enter_step(
        isolation.StepConfinement(
            backend=args.isolation.backend,
            workspace=workspace,
            session_id=request.session_id,
            cpu_s=int(request.timeout_s) + 5,
            memory_mb=request.memory_mb,
            file_mb=request.file_mb,
            masked=args.mask,
            hidden=args.hide,
            readonly=[warehouse] if warehouse else [],
            code=_code_paths(),
            cgroup=args.isolation.cgroup,
            seccomp=args.isolation.seccomp,
        )
    )
    result = run_step(request, workspace, Path(warehouse) if warehouse else None, opened=args.database)
    isolation_session.reap_own_uid()  # nothing the step started outlives it
    return result


def main(argv: list[str] | None = None) -> None:
    """Entry point of the fork server process (`python -m core.zygote`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--workspaces", required=True)
    parser.add_argument("--warehouse", default="")
    parser.add_argument("--mask", action="append", default=[])
    parser.add_argument("--hide", action="append", default=[])
    parser.add_argument("--isolation-policy", default="best")
    parser.add_argument("--refuse-namespaces", action="store_true")
    args = parser.parse_args(argv)

    isolation.die_with_parent()  # a bot killed with SIGKILL must not leave its fork server behind
    home = isolation.bot_home()  # now, while our uid is still the host's
    # /root too, whoever runs the bot: what a step sees there must not depend on the bot's user
    # (as root it is the bot's home; as an ordinary user it would read as "permission denied").
    homes = dict.fromkeys(h for h in (home, "/root") if h and os.path.isdir(h))
    args.hide = [*homes, *args.hide]
    try:
        args.isolation = isolation_backends.choose(
            args.isolation_policy, masked=args.mask, refuse_namespaces=args.refuse_namespaces
        )
    except RuntimeError as exc:
        sys.stdout.write(json.dumps({"ready": False, "error": str(exc)}) + "\n")
        sys.stdout.flush()
        raise SystemExit(2) from None
    args.database = preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically
    # A service manager's stop reaches every process of the service (systemd's SIGTERM): it is for the
    # bot, which stops this server itself once running steps are done; it dies with the bot anyway.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server.bind(args.socket)
    os.chmod(args.socket, 0o600)
    server.listen(128)
    ready = {"ready": True, "backend": args.isolation.backend, "protections": args.isolation.report.as_dict()}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()

    _serve_forever(server, args)


def _serve_forever(server: socket.socket, args: argparse.Namespace) -> None:
    """Keep one spare step child forked in advance, its step's processes ready, waiting in `accept`:
    no fork is on a step's way. When the spare takes a connection it says so on `taken` and the next
    spare is forked (and prepares) while that step runs.

    A spare that dies before it takes a connection (killed, out of memory), or a fork refused here,
    is not followed at once by the next: forking a ~200 MB process in a loop burns a core and the
    log. The fork server waits longer each time (`BACKOFF_S`, doubled up to `BACKOFF_MAX_S`) and logs
    one line per such episode, not one per spare; the first spare that takes a step ends it.

    Every step child that took a step is watched until it ends (`Adopted`): what it leaves is then
    this process's to kill."""
    taken_r, taken_w = os.pipe()
    failing = 0  # spares lost in a row before taking a connection
    adopted = Adopted()
    while True:
        if failing:
            time.sleep(min(BACKOFF_S * 2 ** (failing - 1), BACKOFF_MAX_S))
        try:
            pid = os.fork()
        except OSError as exc:  # a process limit, out of memory: the next try waits longer
            failing = _lost(failing, f"could not fork a step child ({exc.strerror or exc})")
            continue
        if pid == 0:
            os.close(taken_r)
            adopted.forget()
            _spare(server, taken_w, args, quiet=failing > 0)
        try:
            spare_gone = os.pidfd_open(pid)
        except ProcessLookupError:  # died at once (and was reaped)
            failing = _lost(failing, "a step child died before taking a step")
            continue
        while True:
            ready = adopted.wait(taken_r, spare_gone, spare=pid)
            if taken_r in ready:
                os.read(taken_r, 1)
                if failing:
                    print(f"fork server: step children serve again after {failing} lost", file=sys.stderr)
                failing = 0
                adopted.watch(pid, spare_gone)
                break
            if spare_gone in ready:  # its runner and init, if it made them, are strays now
                os.close(spare_gone)
                adopted.spare_lost()
                failing = _lost(failing, "a step child died before taking a step")
                break


class Adopted:
    """The fork server as a child subreaper (`become_subreaper`): a step child killed by the bot (a
    stopped or cancelled step, the fallback kill past its limit) cannot kill what its step left, so
    that is reparented here — a `setsid` daemon on `landlock` and `none`, which have no PID namespace
    to end it. When a step child ends, every child of this process that is not a step child is
    killed, generation by generation (a killed process's children are reparented here in turn).

    Children are reaped by the kernel here (SIGCHLD ignored), so none is waited for: a killed one is
    only signalled through its pidfd (never a recycled pid) and leaves the children list as it exits."""

    def __init__(self) -> None:
        self.subreaper = isolation.become_subreaper()
        self.step_children: dict[int, int] = {}  # pidfd -> pid, each until it ends

    def watch(self, pid: int, gone: int) -> None:
        self.step_children[gone] = pid

    def forget(self) -> None:
        """In a new spare: these descriptors are the fork server's."""
        for fd in self.step_children:
            os.close(fd)
        self.step_children.clear()

    def wait(self, *fds: int, spare: int) -> list[int]:
        """Block until one of `fds` is ready; meanwhile handle every step child that ends."""
        while True:
            ready = _readable([*fds, *self.step_children])
            ended = [fd for fd in ready if fd in self.step_children]
            for fd in ended:
                os.close(fd)
                del self.step_children[fd]
            if ended and self.subreaper:
                self.kill_strays(keep={spare, *self.step_children.values()})
            if mine := [fd for fd in ready if fd in fds]:
                return mine

    def spare_lost(self) -> None:
        if self.subreaper:
            self.kill_strays(keep=set(self.step_children.values()))

    @staticmethod
    def kill_strays(keep: set[int], rounds: int = 100) -> None:
        """Kill every child but `keep` (the spare, the live step children) and wait until they are
        gone, round after round: each round reaches one generation deeper."""
        for _ in range(rounds):
            strays = [pid for pid in step_processes.children() if pid not in keep]
            killed = [fd for fd in map(_kill_child, strays) if fd is not None]
            if not killed:
                return
            try:
                pending, deadline = list(killed), time.monotonic() + 1.0
                while pending and (left := deadline - time.monotonic()) > 0:
                    done = _readable(pending, left)  # a pidfd reads as ready when its process exits
                    pending = [fd for fd in pending if fd not in done]
            finally:
                for fd in killed:
                    os.close(fd)


def _readable(fds: list[int], timeout_s: float | None = None) -> list[int]:
    """`poll`, not `select`: one step child's pidfd per running step, whatever their numbers."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(None if timeout_s is None else timeout_s * 1000)]


def _kill_child(pid: int) -> int | None:
    """SIGKILL a child of this process through a pidfd; the pidfd (to wait on), or None where it is
    gone. The parent is checked after the pidfd is open: a pid recycled before that is not ours."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        if step_processes.parent_of(pid) == os.getpid():
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _lost(failing: int, why: str) -> int:
    """Count a spare lost before its step; only the first of an episode is logged."""
    if not failing:
        print(
            f"fork server: {why}; backing off (up to {BACKOFF_MAX_S:g} s) until one serves", file=sys.stderr
        )
        sys.stderr.flush()
    return failing + 1


def _spare(server: socket.socket, taken: int, args: argparse.Namespace, *, quiet: bool = False) -> None:
    """A pre-forked step child: prepare the step's processes, wait for one connection, tell the fork
    server, serve it, exit. A preparation that failed is tried again once the request is in (the
    failure may have passed since), and refuses the step with one sentence if it fails again; that
    retry forks the runner while this process holds the connection, and the runner closes it first
    thing, before it has a request, as it does the listening socket. `quiet`: spares are being lost
    in a row, the first one's traceback is already in the log."""
    from core import steps  # imported by `preload` already

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the supervisor waits for its runner
    isolation.die_with_parent()  # and dies with the fork server
    code = 0
    conn = None
    try:
        os.setsid()  # the bot kills this process group on timeout: supervisor, init and runner alike
        # This process will keep the bot's connection: a runner of the same uid must not read its
        # memory or descriptors through /proc or ptrace.
        isolation.protect_bot_process()
        backend = args.isolation.backend

        def prepare(previous=None):
            return step_processes.prepare(
                lambda request, workspace: _run_confined(request, workspace, args),
                pid_namespace=args.isolation.pid_namespace,
                own_mounts=backend in isolation_supervisor.HARD_QUOTA_BACKENDS
                and workspace_overlay.AVAILABLE,
                previous=previous,
                prime=lambda: steps.prime(args.database),
            )

        if os.environ.get(SPARE_HOOK) == "die":
            os.write(2, b"test hook: spare lost\n")  # the test counts the spares forked by these
            raise OSError(errno.EAGAIN, "test hook")
        prepared = prepare()
        conn, _ = server.accept()
        os.write(taken, b".")
        os.close(taken)
        server.close()
        if prepared.refusal:
            prepared = prepare(prepared)
        _serve_child(conn, args, prepared)
    except BaseException:  # the bot turns a missing result into a clear error
        code = 1
        if not quiet:
            traceback.print_exc(file=sys.stderr)
    finally:
        try:
            if conn is not None:
                conn.close()
        finally:
            os._exit(code)


if __name__ == "__main__":
    main()
