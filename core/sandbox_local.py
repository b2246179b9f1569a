"""The local sandbox: a pre-warmed fork server (`core/zygote.py`) and one workspace per session.

Steps never run in the bot's process. The bot keeps the fork server alive, sends each step over a
private Unix socket, enforces the wall-clock limit by killing the step's process group, and turns
crashes and kills into error results so the next step (and the bot) keep working.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
import tempfile
from pathlib import Path

from core import cgroups, isolation
from core.sandbox import StepRequest, StepResult, is_valid_session_id

log = logging.getLogger(__name__)


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """A model-given relative path, resolved and proven to stay inside the workspace."""
    if not path or path.startswith(("/", "~")) or "\x00" in path:
        raise PermissionError(f"{path!r} is not a relative path inside the workspace.")
    full = (workspace / path).resolve()
    if workspace.resolve() not in (full, *full.parents):
        raise PermissionError(f"{path!r} is outside the workspace.")
    return full


def read_inside(workspace: Path, full: Path) -> bytes:
    """Read a file the sandbox may have planted, without following a link out of the workspace.

    `resolve_in_workspace` checked the path; a step could still swap a component for a symlink
    before the open. So: open with O_NOFOLLOW, then check where the opened descriptor really is.
    """
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        st = os.fstat(fd)
        if workspace.resolve() not in real.parents or not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"{full.name!r} is not a regular file inside the workspace.")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return handle.read()
    finally:
        if fd >= 0:
            os.close(fd)


def write_inside(workspace: Path, full: Path, data: bytes) -> None:
    """Write a file into the workspace; the directory is pinned by a descriptor whose real place is
    checked, and the file is opened without following a link, so a planted symlink cannot redirect it."""
    dfd = os.open(full.parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        real = Path(os.readlink(f"/proc/self/fd/{dfd}"))
        if real != workspace.resolve() and workspace.resolve() not in real.parents:
            raise PermissionError(f"{full.name!r} is outside the workspace.")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(full.name, flags, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    finally:
        os.close(dfd)


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
    ):
        self.workspaces = workspaces.resolve()
        self.workspace_bytes = workspace_mb * 2**20
        self.hidden = [str(p.resolve()) for p in (hidden or [])] + [str(self.workspaces)]
        self.warehouse = warehouse
        self.masked = [str(Path(m).resolve()) for m in (masked or [])]
        self._proc: asyncio.subprocess.Process | None = None
        self._cgroups = cgroups.detect()  # to remove a session's empty groups after its steps
        self._socket_dir = Path(tempfile.mkdtemp(prefix="datathread-zygote-"))
        os.chmod(self._socket_dir, 0o700)
        self._socket = str(self._socket_dir / "zygote.sock")
        self._zygote_protections: dict[str, str] = {}
        self._start_lock = asyncio.Lock()

    def workspace(self, session_id: str) -> Path:
        """The session's directory, created with owner-only permissions."""
        if not is_valid_session_id(session_id):
            raise PermissionError(f"invalid session id {session_id!r}")
        self.workspaces.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.workspaces, 0o711)
        return isolation.prepare_workspace(self.workspaces / session_id, session_id)

    async def start(self) -> None:
        """Start (or restart) the fork server and wait until it has imported the data stack."""
        async with self._start_lock:
            if self._proc and self._proc.returncode is None:
                return
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
            root = str(Path(__file__).resolve().parent.parent)
            if os.geteuid() != 0:
                isolation.protect_bot_process()
            self._proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
                env=isolation.scrubbed_env({"PYTHONPATH": root}),
                cwd=root,
                start_new_session=True,
            )
            assert self._proc.stdout is not None
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout=120)
            if not line:
                raise RuntimeError("The sandbox fork server failed to start.")
            self._zygote_protections = json.loads(line).get("protections", {})
            log.info("sandbox ready: %s", self.protections())

    def protections(self) -> dict[str, str]:
        """Which protections are on (the zygote's own report wins over the static description)."""
        report = isolation.describe_step_protections(self.masked).as_dict()
        return {**report, **self._zygote_protections}

    async def run(self, request: StepRequest) -> StepResult:
        """Run a step in a fresh child of the fork server, under the step's wall-clock limit."""
        try:
            workspace = self.workspace(request.session_id)
        except PermissionError as exc:
            return StepResult(ok=False, error=str(exc))
        if not self._proc or self._proc.returncode is not None:
            await self.start()
        payload = {**request.to_dict(), "workspace": str(workspace)}
        reader, writer = await asyncio.open_unix_connection(self._socket, limit=2**24)
        pid: int | None = None
        try:
            writer.write(json.dumps(payload).encode() + b"\n")
            await writer.drain()
            first = await asyncio.wait_for(reader.readline(), timeout=30)
            pid = json.loads(first)["pid"] if first else None
            line = await asyncio.wait_for(reader.readline(), timeout=request.timeout_s + 2)
            if not line:
                return StepResult(ok=False, killed=True, error=self._crash_message(request))
            return await self._within_quota(StepResult.from_dict(json.loads(line)), workspace)
        except TimeoutError:
            self._kill(pid)
            return StepResult(
                ok=False,
                killed=True,
                error=f"The step was stopped after {request.timeout_s:g} s (the step time limit). "
                "Try a smaller query, sample the data, or save intermediate results.",
            )
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            # Every exit path (done, crashed, timed out): the session uid's processes die here, off the loop.
            await asyncio.to_thread(isolation.end_of_step_cleanup, isolation.sandbox_uid(request.session_id))
            if self._cgroups is not None:
                cgroups.remove(self._cgroups, request.session_id)

    async def _within_quota(self, result: StepResult, workspace: Path) -> StepResult:
        """A soft per-session disk quota, checked after every step: over it, the step is reported as
        failed with a message the model can act on (the files stay until it deletes some)."""
        used = await asyncio.to_thread(_tree_bytes, workspace)
        if used > self.workspace_bytes:
            result.ok = False
            result.error = ((result.error + "\n") if result.error else "") + (
                f"The thread's workspace now holds {used / 2**20:,.0f} MB, over its "
                f"{self.workspace_bytes / 2**20:,.0f} MB limit. Delete files you no longer need "
                "(os.remove in run_python) and keep intermediate results small."
            )
        return result

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
        workspace = self.workspace(session_id)
        full = resolve_in_workspace(workspace, path)
        return await asyncio.to_thread(read_inside, workspace, full)

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        workspace = self.workspace(session_id)
        full = resolve_in_workspace(workspace, path)
        full.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(write_inside, workspace, full, data)
        if os.geteuid() == 0:
            uid = isolation.sandbox_uid(session_id)
            os.chown(full, uid, uid, follow_symlinks=False)

    async def list_files(self, session_id: str) -> list[dict]:
        from core.steps import snapshot

        snap = snapshot(self.workspace(session_id))
        return [
            {"path": p, "size": s, "kind": Path(p).suffix.lstrip(".")} for p, (s, _) in sorted(snap.items())
        ]

    async def close(self) -> None:
        if self._proc and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            await self._proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self._socket)
            os.rmdir(self._socket_dir)


def _tree_bytes(root: Path) -> int:
    """Bytes of every file under `root` (not following links)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
