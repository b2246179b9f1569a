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
import hashlib
import os
import pwd
import resource
import signal
import stat
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core import cgroups, landlock, seatbelt, seccomp
from core.cgroups import CgroupLayout

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
STEP_HOSTNAME = b"datathread-step"
MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1  # same on x86_64, aarch64
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_PDEATHSIG = 38, 4, 1

# Environment variables a sandbox process may see; everything else (tokens, keys) is dropped.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")

FIRST_SANDBOX_UID = 1_000_000  # sandbox uids: FIRST_SANDBOX_UID + [0, 1e9)
MAX_PROCS = 64  # processes one step may run at once (per-session uid and cgroup)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent() -> None:
    """Ask the kernel for SIGKILL when our parent exits (and exit now if it already has)."""
    parent = os.getppid()
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        os._exit(1)


def sandbox_uid(session_id: str) -> int:
    """A per-session unprivileged uid (when we run as root), so sessions cannot read each other.

    Drawn from a billion uids: two live sessions sharing one (and so killing each other's leftovers)
    is ~1e-6 likely at 50 concurrent sessions, where a 60,000-uid range would make it ~2%.
    """
    digest = hashlib.sha256(session_id.encode()).digest()
    return FIRST_SANDBOX_UID + int.from_bytes(digest[:8], "big") % 1_000_000_000


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


def host_root() -> bool:
    """Real host root: uid 0 in the initial user namespace, not uid 0 inside one we made."""
    return os.geteuid() == 0 and uid_map_is_host()


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
        cgroups.join(c.cgroup, c.session_id, memory_mb=c.memory_mb, max_procs=MAX_PROCS)
    if c.backend in ("root", "userns"):
        _private_filesystem(
            workspace=c.workspace, masked=c.masked, hidden=c.hidden, readonly=[*c.readonly, *c.code]
        )
    if c.backend == "root":
        _drop_privileges(sandbox_uid(c.session_id))
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


def reap_own_uid() -> None:
    """Kill every other process of this (unprivileged, per-session) uid: daemons a step left behind.

    kill(-1) reaches exactly the processes this uid may signal — its own — never the bot or the zygote.
    Only called after privileges were dropped to the session's uid.
    """
    if os.getuid() >= FIRST_SANDBOX_UID:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(-1, signal.SIGKILL)
        # SIGKILL is asynchronous: wait until they are gone, or they still count against this step's
        # process cap (RLIMIT_NPROC, pids cgroup) and its first fork fails.
        deadline = time.monotonic() + 2.0
        while _other_processes_of_own_uid() and time.monotonic() < deadline:
            time.sleep(0.01)


def _other_processes_of_own_uid() -> bool:
    me, uid = os.getpid(), os.getuid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and _proc_uid(entry) == uid:
            return True
    return False


def kill_uid_processes(uid: int, *, rounds: int = 5) -> int:
    """From the bot (root): kill every process whose real uid is `uid` (a timed-out step's tree,
    including daemons that left its process group). Returns how many were signalled."""
    if not host_root() or uid < FIRST_SANDBOX_UID:
        return 0
    total = 0
    for _ in range(rounds):
        found = 0
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and _proc_uid(entry.name) == uid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    found += 1
        total += found
        if not found:
            break
    return total


def end_of_step_cleanup(uid: int, *, timeout_s: float = 2.0) -> None:
    """From the bot (root), after every step: nothing a step started outlives it, and its processes
    are gone (not merely signalled) before the session's next step counts its process cap."""
    if not host_root() or uid < FIRST_SANDBOX_UID:
        return
    deadline = time.monotonic() + timeout_s
    while kill_uid_processes(uid, rounds=1) and time.monotonic() < deadline:
        time.sleep(0.01)


def _proc_uid(pid: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def uid_map_is_host() -> bool:
    """True in the host's user namespace (we may switch to any uid); False inside our own userns."""
    try:
        first = Path("/proc/self/uid_map").read_text().split()
        return first[:3] == ["0", "0", "4294967295"]
    except OSError:
        return True


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
    # A private /proc that hides other users' processes (the bot's included) where the kernel allows.
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV, "hidepid=2")


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


def prepare_workspace(path: Path, session_id: str, *, per_session_uid: bool) -> Path:
    """Create a session's workspace with owner-only permissions (its own uid when we are root).

    The workspace's contents belong to untrusted code: anything in it may be a symlink planted to make
    this root process chown or chmod a host directory. Nothing here follows a link.
    """
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise PermissionError(f"workspace {path} is not a plain directory")
    uid = sandbox_uid(session_id) if per_session_uid else None
    for sub in (path / ".tmp", path / ".duckdb_tmp"):
        _plain_directory(sub)
        if uid is not None:
            os.chown(sub, uid, uid, follow_symlinks=False)
    if uid is not None:
        os.chown(path, uid, uid, follow_symlinks=False)
    os.chmod(path, 0o700)  # `path` was just checked to be a real directory in a root-owned parent
    return path


def _plain_directory(path: Path) -> None:
    """Make `path` a real directory, replacing whatever a step put there (a symlink, a file)."""
    with contextlib.suppress(FileNotFoundError):
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            return
        path.unlink()
    path.mkdir()
