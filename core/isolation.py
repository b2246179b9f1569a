"""OS-level isolation of sandbox processes: detect what the kernel grants, apply it, and say so.

The local sandbox is a fork server (`core/zygote.py`). Process-wide protections (no network) are
applied once to the zygote; per-step protections (own mount namespace with private /tmp and masked
secret files, a per-session unprivileged uid, rlimits, no new privileges) are applied in each forked
child before any model code runs. Every protection is detected, not assumed, and reported.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import resource
import zlib
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE = 38, 4

# Environment variables a sandbox process may see; everything else (tokens, keys) is dropped.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def sandbox_uid(session_id: str) -> int:
    """A per-session unprivileged uid (when we run as root), so sessions cannot read each other."""
    return 200_000 + zlib.crc32(session_id.encode()) % 60_000


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The only environment a sandbox process gets: no bot secret can be inherited."""
    env = {k: v for k, v in os.environ.items() if k in SAFE_ENV}
    env.update(
        HOME="/nonexistent",
        MPLBACKEND="Agg",
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


def _unshare(flags: int) -> bool:
    return _libc.unshare(flags) == 0


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    return (
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        )
        == 0
    )


@dataclass
class IsolationReport:
    """Which protections are active; shown by `datathread doctor` and logged at start."""

    active: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str]:
        out = {k: f"on — {v}" for k, v in self.active.items()}
        out.update({k: f"OFF — {v}" for k, v in self.missing.items()})
        return out


def enter_zygote(report: IsolationReport) -> None:
    """Process-wide protections for the fork server: a network namespace with no interfaces up."""
    if os.geteuid() == 0 and _unshare(CLONE_NEWNET):
        report.active["network"] = "own network namespace, no interfaces (no network at all)"
    elif os.geteuid() != 0 and _enter_user_namespace():
        report.active["network"] = "user+network namespace, no interfaces (no network at all)"
    else:
        report.missing["network"] = "cannot create a network namespace; sandboxed code may reach the network"
    report.active["environment"] = "scrubbed: only " + ", ".join(SAFE_ENV) + " pass through"


def _enter_user_namespace() -> bool:
    uid, gid = os.getuid(), os.getgid()
    if not _unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS):
        return False
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    except OSError:
        return False
    return True


def describe_step_protections(masked: list[str]) -> IsolationReport:
    """What `enter_step` will do on this host — computed without doing it, for the start log."""
    report = IsolationReport()
    root = os.geteuid() == 0
    if root:
        report.active["uid"] = "each session runs as its own unprivileged uid; workspaces are 0700"
        report.active["bot process"] = "other uid: /proc/<bot>/environ, mem and fds are unreadable"
        report.active["filesystem"] = (
            "own mount namespace: private /tmp; the bot's state and other workspaces hidden; "
            "warehouse read-only; masked files: " + (", ".join(masked) or "none")
        )
    else:
        report.missing["uid"] = "not root: sandboxed code runs as the bot's uid (run as root or on Modal)"
        report.missing["bot process"] = "same uid: relies on the scrubbed environment only"
    report.active["limits"] = "rlimits on CPU time, address space, file size, processes, open files"
    report.active["privileges"] = "no_new_privs set; core dumps off"
    report.active["wall time"] = "the bot kills the step's process group at the step timeout"
    return report


def enter_step(
    *,
    workspace: Path,
    session_id: str,
    cpu_s: int,
    memory_mb: int,
    file_mb: int,
    masked: list[str],
    hidden: list[str],
    readonly: list[str],
) -> None:
    """Per-step protections, applied in the forked child before model code runs. Irreversible.

    `hidden` directories (the bot's state, all workspaces) are covered with empty tmpfs; then only
    this session's `workspace` (read-write) and the `readonly` paths (the warehouse) are bound back.
    """
    os.setsid()
    if os.geteuid() == 0:
        _private_filesystem(workspace=workspace, masked=masked, hidden=hidden, readonly=readonly)
        _drop_privileges(sandbox_uid(session_id))
    _set_limits(cpu_s=cpu_s, memory_mb=memory_mb, file_mb=file_mb)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.chdir(workspace)
    os.environ["TMPDIR"] = str(workspace / ".tmp")


def _private_filesystem(
    *, workspace: Path, masked: list[str], hidden: list[str], readonly: list[str]
) -> None:
    if not _unshare(CLONE_NEWNS):
        return
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    keep = [(str(workspace), False)] + [(p, True) for p in readonly if os.path.exists(p)]
    fds = [(path, ro, os.open(path, os.O_PATH)) for path, ro in keep]
    for tmp in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(tmp):
            _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    for path in hidden:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in masked:
        if os.path.isfile(path):
            _mount("/dev/null", path, None, MS_BIND)
    for path, ro, fd in fds:
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, exist_ok=True)
            else:
                Path(path).touch()
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if ro:
            _mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)
    # A private /proc that hides other users' processes (the bot's included) where the kernel allows.
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV, "hidepid=2")


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _set_limits(*, cpu_s: int, memory_mb: int, file_mb: int) -> None:
    def cap(kind: int, value: int) -> None:
        with contextlib.suppress(ValueError, OSError):
            soft, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value))

    vm = _current_vm_bytes()
    cap(resource.RLIMIT_CPU, max(1, cpu_s))
    cap(resource.RLIMIT_AS, vm + memory_mb * 1024 * 1024)
    cap(resource.RLIMIT_FSIZE, file_mb * 1024 * 1024)
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NOFILE, 256)
    if os.getuid() != 0 and os.geteuid() != 0:
        cap(resource.RLIMIT_NPROC, 64 if os.getuid() >= 200_000 else 4096)


def _current_vm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def prepare_workspace(path: Path, session_id: str) -> Path:
    """Create a session's workspace with owner-only permissions (its own uid when we are root)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / ".tmp").mkdir(exist_ok=True)
    (path / ".duckdb_tmp").mkdir(exist_ok=True)
    if os.geteuid() == 0:
        uid = sandbox_uid(session_id)
        for p in (path, path / ".tmp", path / ".duckdb_tmp"):
            with contextlib.suppress(OSError):
                os.chown(p, uid, uid)
    os.chmod(path, 0o700)
    return path
