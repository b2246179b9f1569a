"""The local sandbox: a pre-warmed fork server (`core/zygote.py`) and one workspace per session.

Steps never run in the bot's process. The bot keeps the fork server alive, sends each step over a
private Unix socket, enforces the wall-clock limit by killing the step's process group, and turns
crashes and kills into error results so the next step (and the bot) keep working. The workspace
quota it enforces itself, a workspace's listing and the report on the host's protections are
core/sandbox_quota.py, core/sandbox_listing.py and core/sandbox_protections.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from core import (
    cgroups,
    isolation,
    isolation_session,
    isolation_supervisor,
    sandbox_protections,
    sandbox_quota,
)
from core.sandbox import StepRequest, StepResult, is_valid_session_id
from core.sandbox_listing import list_workspace
from core.workspace_paths import make_parents, named, read_inside, resolve_in_workspace, write_inside
from core.zygote_folder import ZygoteFolder

log = logging.getLogger(__name__)

RESULT_LINE_BYTES = 2**22  # the supervisor's answer is clipped to tens of KB; anything longer is refused
WORKSPACE_FILES = 100_000  # files (and directories) one session's workspace may hold


class LocalSandbox:
    """Sandbox protocol on this machine. One fork server; one short-lived child per step."""

    def __init__(
        self,
        *,
        workspaces: Path,
        warehouse: Path | None = None,
        masked: list[str] | None = None,
        hidden: list[Path] | None = None,
        workspace_mb: int = 2048,
        workspace_files: int = WORKSPACE_FILES,
        isolation_policy: str = "best",
        refuse_namespaces: bool = False,
    ):
        """`isolation_policy`: "strict" (refuse steps without network and filesystem isolation), "best"
        (the best back end this host allows, warning for what is OFF) or a back-end name (exactly that
        one). `refuse_namespaces`: the fork server behaves as on a host refusing namespaces (tests)."""
        self.workspaces = workspaces.resolve()
        self.workspace_bytes = workspace_mb * 2**20
        self.workspace_files = workspace_files
        self.hidden = [str(p.resolve()) for p in (hidden or [])] + [str(self.workspaces)]
        self.warehouse = warehouse
        self.masked = [str(Path(m).resolve()) for m in (masked or [])]
        self._proc: asyncio.subprocess.Process | None = None
        self._cgroups = cgroups.detect()  # to remove a session's empty groups after its steps
        # The fork server's private folder (socket, log, matplotlib cache): made by `start`, removed by
        # `close`, never made again under a used name (another user could make it in /tmp first, and
        # a mkdir accepting an existing folder would put the steps' socket in theirs).
        self._folder: ZygoteFolder | None = None
        self._writing: dict[str, asyncio.Lock] = {}  # per session: the quota check and the write together
        self.isolation_policy = isolation_policy
        self.refuse_namespaces = refuse_namespaces
        self.backend = ""  # chosen by the fork server at start
        self._zygote_protections: dict[str, str] = {}
        self._start_lock = asyncio.Lock()
        # Steps of one session run one at a time here, even when the model issued its calls together:
        # they share the session's uid, and a step's end kills every process of that uid.
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._session_waiters: collections.Counter[str] = collections.Counter()

    @property
    def _socket(self) -> str:
        assert self._folder is not None, "the fork server has not been started"
        return self._folder.socket

    def workspace(self, session_id: str, *, make: bool = True) -> Path:
        """The session's directory, created with owner-only permissions — not by a read (`make=False`): a
        link to a file of a thread the sweep removed made its folder again, which no sweep then removed."""
        if not is_valid_session_id(session_id):
            raise PermissionError(f"invalid session id {session_id!r}")
        if not make:
            return self.workspaces / session_id
        self.workspaces.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.workspaces, 0o711)
        return isolation_session.prepare_workspace(
            self.workspaces / session_id, per_session_uid=self._per_session_uid()
        )

    def _per_session_uid(self) -> bool:
        """Whether a session's files belong to its own uid: the root back end's steps run as it. Before
        the fork server has said which back end it is, a root host's is the root one."""
        return self.backend == "root" if self.backend else isolation.host_root()

    async def start(self) -> None:
        """Start (or restart) the fork server and wait until it has imported the data stack."""
        async with self._start_lock:
            if self._proc and self._proc.returncode is None:
                return
            if self._folder is None:  # a new name, made 0700 by this process, or an error
                self._folder = await asyncio.to_thread(ZygoteFolder.make)
            cmd = [
                sys.executable,
                "-m",
                "core.zygote",
                "--socket",
                self._socket,
                "--workspaces",
                str(self.workspaces),
            ]
            if self.warehouse:
                cmd += ["--warehouse", str(self.warehouse)]
            for m in self.masked:
                cmd += ["--mask", m]
            for h in self.hidden:
                cmd += ["--hide", h]
            cmd += ["--isolation-policy", self.isolation_policy]
            if self.refuse_namespaces:
                cmd += ["--refuse-namespaces"]
            root = str(Path(__file__).resolve().parent.parent)
            if not isolation.host_root():
                isolation.protect_bot_process()
            mpl = self._folder.path / "matplotlib"
            mpl.mkdir(exist_ok=True)
            # Library chatter (matplotlib's font cache, warnings) goes to a file, never the terminal.
            with open(self._folder.path / "zygote.log", "ab") as chatter:
                self._proc = await asyncio.create_subprocess_exec(
                    *cmd,
                    stdout=asyncio.subprocess.PIPE,
                    stdin=asyncio.subprocess.DEVNULL,
                    stderr=chatter,
                    env=isolation.scrubbed_env({"PYTHONPATH": root, "MPLCONFIGDIR": str(mpl)}),
                    cwd=root,
                    start_new_session=True,
                )
            assert self._proc.stdout is not None
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout=120)
            ready = json.loads(line) if line.strip() else {}
            if not ready.get("ready"):
                status = await self._proc.wait()
                raise RuntimeError(ready.get("error") or self._start_failure(status))
            self.backend = ready.get("backend", "")
            self._zygote_protections = ready.get("protections", {})
            sandbox_protections.log_report(self.backend, self._zygote_protections, self.isolation_policy)

    def _start_failure(self, status: int) -> str:
        """The fork server ended before saying it was ready: say how it ended, and put the end of its
        log (a traceback, a kill by the OOM killer leaves none) in the bot's log, since the private
        directory that holds it is removed with the sandbox."""
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        with contextlib.suppress(OSError):
            assert self._folder is not None
            tail = (self._folder.path / "zygote.log").read_text(errors="replace").strip().splitlines()[-20:]
            if tail:
                log.error(
                    "the sandbox fork server ended at start (%s); the end of its log:\n%s",
                    how,
                    "\n".join(tail),
                )
        return f"The sandbox fork server failed to start ({how})."

    def _pid_namespace(self) -> bool:
        return self._zygote_protections.get("leftover processes", "").startswith("on — own PID namespace")

    def refused_reason(self) -> str:
        """Why steps are refused (strict policy on a host that cannot isolate them), or ''."""
        return sandbox_protections.refused_reason(self._zygote_protections, self.isolation_policy)

    def protections(self) -> dict[str, str]:
        """Which protections are on, as the fork server found them at start (empty before start)."""
        return dict(self._zygote_protections)

    async def run(self, request: StepRequest) -> StepResult:
        """Run a step in a fresh child of the fork server, under the step's wall-clock limit."""
        try:
            workspace = self.workspace(request.session_id)
        except PermissionError as exc:
            return StepResult(ok=False, error=str(exc))
        async with self._one_step_per_session(request.session_id):
            return await self._run(request, workspace)

    @contextlib.asynccontextmanager
    async def _one_step_per_session(self, session_id: str) -> AsyncIterator[None]:
        lock = self._session_locks.setdefault(session_id, asyncio.Lock())
        self._session_waiters[session_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._session_waiters[session_id] -= 1
            if not self._session_waiters[session_id]:  # no state kept for idle sessions
                del self._session_waiters[session_id], self._session_locks[session_id]

    async def _run(self, request: StepRequest, workspace: Path) -> StepResult:
        if not self._proc or self._proc.returncode is not None:
            await self.start()
        if self.refused_reason():
            return StepResult(ok=False, error=self.refused_reason())
        payload = {
            **request.to_dict(),
            "workspace": str(workspace),
            "quota_bytes": self.workspace_bytes,
            "quota_files": self.workspace_files,
        }
        reader, writer = await asyncio.open_unix_connection(self._socket, limit=RESULT_LINE_BYTES)
        pid: int | None = None
        answered = False  # the supervisor's answer: it ends the step's PID namespace before it answers
        try:
            writer.write(json.dumps(payload).encode() + b"\n")
            await writer.drain()
            first = await asyncio.wait_for(reader.readline(), timeout=30)
            pid = json.loads(first)["pid"] if first else None
            line = await asyncio.wait_for(reader.readline(), timeout=request.timeout_s + 2)
            if line == isolation_supervisor.LANDING:  # the step is over; its files are being saved
                grace = isolation_supervisor.LANDING_GRACE_S
                line = await asyncio.wait_for(reader.readline(), timeout=grace)
            if not line:
                return StepResult(ok=False, killed=True, error=self._crash_message(request))
            answered = True
            result = _parse_result(line, request)
            return await sandbox_quota.after_step(
                result, workspace, self.workspace_bytes, self._zygote_protections
            )
        except ValueError:  # a line past RESULT_LINE_BYTES: not a result the supervisor would send
            self._kill(pid)
            return StepResult(ok=False, error="The step's result was too large and was refused.")
        except TimeoutError:
            self._kill(pid)
            return StepResult(
                ok=False,
                killed=True,
                error=f"The step was stopped after {request.timeout_s:g} s (the step time limit). "
                "Try a smaller query, sample the data, or save intermediate results.",
            )
        except asyncio.CancelledError:  # the turn was stopped (Ctrl-C in chat, shutdown): so is its step
            self._kill(pid)
            raise
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            # A crashed, stopped or cancelled step: the session uid's processes die here, off the loop. An
            # answered one in a PID namespace has none left (a sweep of /proc, 5-10 ms, would find none).
            own = self.workspaces / request.session_id
            if self.backend == "root" and not (answered and self._pid_namespace()):
                await asyncio.to_thread(
                    isolation_session.end_of_step_cleanup, isolation_session.sandbox_uid(own)
                )
            if self._cgroups is not None:
                cgroups.remove(self._cgroups, isolation_session.session_key(own))

    @staticmethod
    def _crash_message(request: StepRequest) -> str:
        return (
            "The step's process ended without a result — most likely it hit the memory limit "
            f"({request.memory_mb} MB) or another sandbox limit. Work on less data at once."
        )

    @staticmethod
    def _kill(pid: int | None) -> None:
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def read_file(self, session_id: str, path: str) -> bytes:
        workspace = self.workspace(session_id, make=False)
        # `named` refuses a path out of the workspace (resolve_in_workspace) before it looks at anything
        return await asyncio.to_thread(lambda: read_inside(workspace, named(workspace, path)))

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        workspace = self.workspace(session_id)
        full = resolve_in_workspace(workspace, path)
        # New parents and the file belong to the session's uid when steps run as it (root back end),
        # as the workspace itself does — also before the fork server has started.
        uid = isolation_session.sandbox_uid(workspace) if self._per_session_uid() else None
        owner = (uid, uid) if uid is not None else None
        # under the session's lock: two results of one message, each fitting alone, both passed the check
        async with self._writing.setdefault(session_id, asyncio.Lock()):
            await sandbox_quota.room_for(workspace, full, len(data), self.workspace_bytes)
            await asyncio.to_thread(make_parents, workspace, full, owner)
            await asyncio.to_thread(write_inside, workspace, full, data, owner)

    async def list_files(self, session_id: str) -> list[dict]:
        """The workspace's files, at most its file quota (core/sandbox_listing.py)."""
        return await list_workspace(self.workspace(session_id, make=False), self.workspace_files)

    async def close(self) -> None:
        if self._proc and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            await self._proc.wait()
        if self._folder is not None:
            self._folder.remove()
            self._folder = None


def _parse_result(line: bytes, request: StepRequest) -> StepResult:
    """The step child's answer, validated and clipped field by field: it passed near model code."""
    try:
        data = json.loads(line)
    except ValueError:
        data = None
    return StepResult.untrusted(data, request)
