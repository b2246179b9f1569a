"""The local sandbox's fork server: imports the data stack once, then forks one child per step.

Started by `LocalSandbox` with a scrubbed environment. Protocol on a Unix socket, one connection per
step: the bot sends one JSON line (the request plus its workspace), the child answers with a JSON
line `{"pid": …}` as soon as it exists (so the bot can kill its process group on timeout), then one
JSON line with the `StepResult`. A child serves one step and exits: no state passes between steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path

from core import isolation, isolation_backends


def _preload() -> None:
    # The reason this process exists: pay the import cost once, not per step.
    import duckdb  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow
    import pyarrow.pandas_compat
    import pyarrow.parquet  # noqa: F401

    import core.steps  # noqa: F401


def _code_paths() -> list[str]:
    """Interpreter, venv and project source: bound back read-only in case they live under a hidden
    directory (e.g. a checkout in /tmp), so lazy imports inside a step keep working."""
    root = str(Path(__file__).resolve().parent.parent)
    return sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, root)})


def _serve_child(conn: socket.socket, args: argparse.Namespace) -> None:
    from core.sandbox import StepRequest, StepResult, is_valid_session_id
    from core.steps import run_step

    stream = conn.makefile("rwb", buffering=0)
    raw = json.loads(stream.readline() or b"{}")
    workspace = Path(raw.pop("workspace", ""))
    stream.write(json.dumps({"pid": os.getpid()}).encode() + b"\n")
    # The step's fd 1/2 were the fork server's stdout (a pipe the bot stops reading after "ready") and
    # the bot's stderr: a step writing there directly could block every later step or flood the logs.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    request = StepRequest(**raw)
    root = Path(args.workspaces).resolve()
    if not is_valid_session_id(request.session_id) or workspace.resolve() != root / request.session_id:
        result = StepResult(ok=False, error="Refused: the workspace does not belong to this session.")
    else:
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
        result = run_step(request, workspace, Path(warehouse) if warehouse else None)
        isolation.reap_own_uid()  # nothing the step started outlives it
    stream.write(json.dumps(result.to_dict(), default=str).encode() + b"\n")


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
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    server.bind(args.socket)
    os.chmod(args.socket, 0o600)
    server.listen(128)
    ready = {"ready": True, "backend": args.isolation.backend, "protections": args.isolation.report.as_dict()}
    sys.stdout.write(json.dumps(ready) + "\n")
    sys.stdout.flush()

    while True:
        conn, _ = server.accept()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the step may wait for its own children
            isolation.die_with_parent()  # and dies with the fork server
            server.close()
            code = 0
            try:
                _serve_child(conn, args)
            except BaseException:  # the bot turns a missing result into a clear error
                code = 1
                traceback.print_exc(file=sys.stderr)
            finally:
                try:
                    conn.close()
                finally:
                    os._exit(code)
        conn.close()


if __name__ == "__main__":
    main()
