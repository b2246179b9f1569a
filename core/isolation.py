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
import pwd
import resource
import signal
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core import cgroups, landlock, seatbelt, seccomp
from core.cgroups import CgroupLayout
from core.isolation_session import (  # noqa: F401 (host_root, uid_map_is_host: used through this module)
    FIRST_SANDBOX_UID,
    host_root,
    reap_own_uid,
    sandbox_uid,
    session_key,
    uid_map_is_host,
)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWPID = 0x08000000, 0x04000000, 0x20000000
STEP_HOSTNAME = b"datathread-step"
MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1  # same on x86_64, aarch64
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MS_NOEXEC = 8
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_PDEATHSIG = 38, 4, 1

# Environment variables a sandbox process may see; everything else (tokens, keys) is dropped.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")

MAX_PROCS = 64  # processes one step may run at once (per-session uid and cgroup)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when our parent exits (and exit now if it already has).

    (A runner in its step's PID namespace sees its parent, the supervisor, outside it: as pid 0.)"""
    parent = os.getppid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        os._exit(1)


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


def unshare(flags: int) -> bool:
    return _libc.unshare(flags) == 0


def probe_in_child(check) -> bool:
    """Run `check()` in a throw-away forked child (it may change the process for good): did it work?

    Only called before any thread exists (the fork server's start-up)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            code = 0 if check() else 1
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def can_mount_tmpfs() -> bool:
    """In a fresh mount namespace: can we really mount (AppArmor may allow the namespace, not this)?"""
    return _mount("none", "/", None, MS_REC | MS_PRIVATE) and _mount(
        "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m"
    )


def enter_user_namespace() -> bool:
    """Become uid 0 of a new user namespace, with new network and mount namespaces (no privileges on
    the host: the bot's uid outside)."""
    uid, gid = os.getuid(), os.getgid()
    if not unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS):
        return False
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    except OSError:
        return False
    return True


def protect_bot_process() -> None:
    """Make the bot non-dumpable, so code running under the same uid cannot read its /proc files
    (environ, mem, fds). Needed when the bot is not root and steps keep its uid."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


@dataclass(frozen=True)
class StepConfinement:
    """What one step child applies: the fork server's back end and this step's paths and limits."""

    backend: str
    workspace: Path
    session_id: str
    cpu_s: int
    memory_mb: int
    file_mb: int
    masked: list[str]
    hidden: list[str]
    readonly: list[str]  # the warehouse, for warehouse steps
    code: list[str] = field(default_factory=list)  # interpreter, venv, checkout: bound back read-only
    cgroup: CgroupLayout | None = None
    seccomp: bool = False


def enter_step(c: StepConfinement) -> None:
    """Per-step protections, applied in the forked child before model code runs. Irreversible.

    Namespace back ends (`root`, `userns`): the bot's home directory is covered with an empty tmpfs and
    only the Python runtime is bound back read-only; `hidden` directories (the bot's state, all
    workspaces) are covered too; then only this session's workspace (read-write) and the `readonly`
    paths (the warehouse) are bound back. `landlock` grants the same paths with Landlock rules,
    `seatbelt` with a Seatbelt profile. Fails closed: if a protection the fork server reported cannot
    be applied, the step does not run.
    """
    if c.cgroup is not None:  # only offered when really writable by us: fails closed if it is not
        cgroups.join(c.cgroup, session_key(c.workspace), memory_mb=c.memory_mb, max_procs=MAX_PROCS)
    if c.backend in ("root", "userns"):
        _private_filesystem(
            workspace=c.workspace, masked=c.masked, hidden=c.hidden, readonly=[*c.readonly, *c.code]
        )
    if c.backend == "root":
        _drop_privileges(sandbox_uid(c.workspace))
        reap_own_uid()  # leftovers of this session's earlier steps cannot watch or race this one
    _set_limits(cpu_s=c.cpu_s, memory_mb=c.memory_mb, file_mb=c.file_mb)
    die_with_parent()  # again: a uid change clears the parent-death signal
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if c.backend == "userns":
        landlock.scope_to_self()  # same uid as the bot: no signals to it (reported by the fork server)
    if c.backend == "landlock":
        landlock.restrict(read=step_readable(c.readonly), write=[str(c.workspace), "/dev/null"])
    elif c.backend == "seatbelt":
        deny = [*c.hidden, *c.masked]
        seatbelt.apply(
            seatbelt.profile(workspace=str(c.workspace), read=step_readable(c.readonly), deny=deny)
        )
    if c.seccomp and not seccomp.install():
        raise RuntimeError("Refused: the step's seccomp filter could not be installed.")
    os.chdir(c.workspace)
    os.environ["TMPDIR"] = str(c.workspace / ".tmp")


def step_readable(readonly: list[str]) -> list[str]:
    """What a Landlock/Seatbelt step may read: the interpreter and venv, our `core` package (not the
    checkout: a `.env` may sit there), system libraries, a few device and kernel files, `readonly`."""
    code = str(Path(__file__).resolve().parent)
    runtime = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    system = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/etc/ld.so.cache", "/etc/localtime"]
    # DuckDB reads its own cgroup and /proc/self at start-up; /proc/self is this child only.
    kernel = ["/dev/zero", "/dev/urandom", "/dev/random", "/sys/fs/cgroup", os.path.realpath("/proc/self")]
    return sorted({code, *runtime, *system, *kernel, *readonly})


def bot_home() -> str | None:
    """The bot user's home directory (cloud credentials, ssh keys, shell history), hidden from steps.

    Asked by the fork server before it enters a user namespace (inside one, its uid reads as root)."""
    try:
        home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)  # HOME is scrubbed in the zygote
    except KeyError:
        return None
    return home if home not in ("/", "") and os.path.isdir(home) else None


def _private_filesystem(
    *, workspace: Path, masked: list[str], hidden: list[str], readonly: list[str]
) -> None:
    # Own IPC namespace: SysV segments and queues (also refused by seccomp) are the step's and go with
    # it; own UTS namespace: the host's name is not the step's business.
    if not unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS):
        raise RuntimeError("Refused: the step's private filesystem could not be set up.")
    _libc.sethostname(STEP_HOSTNAME, len(STEP_HOSTNAME))
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    # Everything the step did not get a fresh mount for is read-only, for good: /run/lock and any
    # directory the bot's uid may write stop being a scratch space (and a channel) outside the
    # workspace. The tmpfs covers and the workspace below are new mounts, writable as planned.
    if not _read_only_tree("/"):
        raise RuntimeError("Refused: the step's filesystem could not be made read-only.")
    keep = [(str(workspace), False)] + [(p, True) for p in readonly if os.path.exists(p)]
    fds = _open_paths(keep)  # before anything is covered: the binds come from the real tree
    hides = [(p, "size=64m,mode=1777") for p in ("/tmp", "/var/tmp", "/dev/shm")]
    # /run holds host services' Unix sockets (PostgreSQL, MySQL, Docker) and lock files: empty here.
    hides += [(p, "size=1m,mode=755") for p in ("/run", *hidden)]
    # One plan, shallowest path first: a mount covers everything below it, so each deeper hide or
    # bind must come after it. (A project checkout under /tmp with its home inside, say: /tmp is
    # hidden, the code bound back read-only, the home hidden again, then the workspace bound rw.)
    plan = [(_depth(p), 0, p, data, None) for p, data in hides]
    plan += [(_depth(p), 1, p, ro, fd) for p, ro, fd in fds]
    for _, is_bind, path, arg, fd in sorted(plan, key=lambda step: step[:3]):
        if is_bind:
            _bind(path, fd, read_only=arg)
        elif os.path.isdir(path):  # absent = already covered by a shallower hide
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, arg)
    # Masks go last: a bind-back above (e.g. the project source, when it lives under a hidden
    # directory) would otherwise bring an unmasked copy of a secret file back into view.
    for path in masked:
        if os.path.isfile(path):
            _mount("/dev/null", path, None, MS_BIND)
    # The covers themselves are empty and read-only: in a user namespace the step owns them, and a
    # writable cover would be a scratch space outside the workspace (and its quota).
    bound = {path for path, _ in keep}
    for path, _ in hides[3:]:
        if os.path.isdir(path) and path not in bound:
            _mount("none", path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    # A private /proc: in the step's own PID namespace it lists only the step's processes, and
    # hidepid=2 hides other uids' ones (the init, as root) too. Without it the host's /proc would show.
    if not _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2"):
        raise RuntimeError("Refused: the step's own /proc could not be mounted.")


def _read_only_tree(path: str, *, read_only: bool = True, recursive: bool = True) -> bool:
    """mount_setattr: set (or clear) MOUNT_ATTR_RDONLY on the mount at `path` and, with `recursive`,
    every mount below it — in this mount namespace only."""
    change = struct.pack("=QQQQ", *((MOUNT_ATTR_RDONLY, 0) if read_only else (0, MOUNT_ATTR_RDONLY)), 0, 0)
    attr = ctypes.create_string_buffer(change, 32)
    flags = AT_RECURSIVE if recursive else 0
    return _libc.syscall(MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, attr, ctypes.c_size_t(32)) == 0


def _depth(path: str) -> int:
    return len(Path(path).parts)


def _open_paths(keep: list[tuple[str, bool]]) -> list[tuple[str, bool, int]]:
    return [(path, ro, os.open(path, os.O_PATH)) for path, ro in keep]


def _bind(path: str, fd: int, *, read_only: bool) -> None:
    """Bind an opened path back at its old place (creating the mount point under a tmpfs if needed)."""
    if not os.path.exists(path):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).touch()
    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    os.close(fd)
    if read_only:
        _remount_read_only(path)
    elif not _read_only_tree(path, read_only=False, recursive=False):  # the bind came from a read-only tree
        raise RuntimeError(f"Refused: could not make {path} writable for the step.")


def _remount_read_only(path: str) -> None:
    # Keep the flags the mount already has (a user namespace may not clear locked ones), add RDONLY.
    keep = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | 8 | 1024 | 2048 | 4096)
    _mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)
    if not os.statvfs(path).f_flag & os.ST_RDONLY:
        raise RuntimeError(f"Refused: could not make {path} read-only for the step.")


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
    if not (os.getuid() == 0 and uid_map_is_host()):
        cap(resource.RLIMIT_NPROC, MAX_PROCS if os.getuid() >= FIRST_SANDBOX_UID else 4096)


def _current_vm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
