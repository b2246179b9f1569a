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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from core import cgroups, isolation_root, landlock, seatbelt, seccomp
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
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 38, 4, 1, 24
PR_SET_CHILD_SUBREAPER = 36
CAPABILITY_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set

# Environment variables a sandbox process may see; everything else (tokens, keys) is dropped.
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV")
# Steps run in UTC wherever the bot runs: DuckDB casts a TIMESTAMPTZ to a date in the process's zone,
# so the same question's daily totals differed between a host in New York and one in UTC (and from
# the exported notebook run elsewhere).
STEP_TZ = "UTC"

MAX_PROCS = 64  # processes one step may run at once (per-session uid and cgroup)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel for `sig` (SIGKILL) when our parent exits (and exit now if it already has).

    (A runner in its step's PID namespace sees its parent, the supervisor, outside it: as pid 0.)"""
    parent = os.getppid()
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        os._exit(1)


def become_subreaper() -> bool:
    """Orphans among this process's descendants become its children, not init's: a daemon a step
    starts (fork, setsid, fork again) stays where the step's supervisor can kill it. Linux only."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


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
        TZ=STEP_TZ,
    )
    env.update(extra or {})
    return env


_mount = isolation_root.mount


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
    """In a fresh mount namespace: can we really mount (AppArmor may allow the namespace, not this),
    and make a tmpfs the root the way a step's fresh root is made (`pivot_root`, a sandboxing runtime
    may lack it)? Only called in a throw-away probe child."""
    if not (
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        and _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")
    ):
        return False
    # The step's own /proc, mounted by the first process of the new PID namespace (the caller
    # unshared it): refused where the host's /proc has masked paths (rootless containers), and a
    # back end that cannot do it would refuse every step while reporting itself fine.
    os.mkdir("/tmp/proc")
    if not probe_in_child(isolation_root.can_mount_proc_at("/tmp/proc")):
        return False
    if not isolation_root.read_only_tree("/tmp", recursive=False):
        return False
    try:
        isolation_root.pivot("/tmp")
    except RuntimeError:
        return False
    return True


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
    code: list[str] = field(default_factory=list)  # interpreter, venv, `core`: bound read-only
    cgroup: CgroupLayout | None = None
    seccomp: bool = False


def enter_step(c: StepConfinement) -> None:
    """Per-step protections, applied in the forked child before model code runs. Irreversible.

    Namespace back ends (`root`, `userns`): own mount/IPC/UTS namespaces and a fresh root built from
    nothing (`core/isolation_root.py`): the runtime and `code` read-only, the `readonly` paths (the
    warehouse), this session's workspace read-write, its own /proc (the spare step child forked this
    runner into its own PID namespace) and a private /tmp; `hidden` is then moot (never bound).
    `landlock` grants the same paths with Landlock rules,
    `seatbelt` with a Seatbelt profile. Fails closed: if a protection the fork server reported cannot
    be applied, the step does not run.
    """
    if c.cgroup is not None:  # only offered when really writable by us: fails closed if it is not
        cgroups.join(c.cgroup, session_key(c.workspace), memory_mb=c.memory_mb, max_procs=MAX_PROCS)
    if c.backend in ("root", "userns"):
        _private_filesystem(
            workspace=c.workspace, masked=c.masked, readonly=[*c.readonly, *c.code], hidden=c.hidden
        )
    if c.backend == "root":
        _drop_privileges(sandbox_uid(c.workspace))
        # Inside the step's new PID namespace: this reaches that namespace only, not an earlier step's
        # leftovers (its own namespace ended them; the bot sweeps after a stopped or crashed step).
        reap_own_uid()
    _set_limits(cpu_s=c.cpu_s, memory_mb=c.memory_mb, file_mb=c.file_mb)
    die_with_parent()  # again: a uid change clears the parent-death signal
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if c.backend == "userns":
        _drop_capabilities()
        _wait_until_init_unreachable()
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
    *, workspace: Path, masked: list[str], readonly: list[str], hidden: list[str]
) -> None:
    # Own IPC namespace: SysV segments and queues (also refused by seccomp) are the step's and go with
    # it; own UTS namespace: the host's name is not the step's business; own network namespace (no
    # network either way): abstract Unix socket names live there, and in the fork server's, shared by
    # every step, a step could hand another session's concurrent step data (~1.5 ms per step).
    if not unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET):
        raise RuntimeError("Refused: the step's private filesystem could not be set up.")
    _libc.sethostname(STEP_HOSTNAME, len(STEP_HOSTNAME))
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    # Everything bound into the fresh root comes from a read-only tree (and stays read-only); only the
    # workspace bind is made writable again, and the scratch tmpfs mounts are new.
    if not isolation_root.read_only_tree("/"):
        raise RuntimeError("Refused: the step's filesystem could not be made read-only.")
    isolation_root.build(workspace=workspace, readonly=readonly, masked=masked, hidden=hidden)


def _drop_capabilities() -> None:
    """userns: the runner is uid 0 of its user namespace and holds every capability there — enough to
    open /proc/1/root of the step's init, which is the fork server's view of the host tree, on kernels
    without Landlock's ptrace scoping. It keeps none (bounding set too, so nothing exec'd regains them)."""
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    if _libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise RuntimeError("Refused: the step's capabilities could not be dropped.")


def _wait_until_init_unreachable(timeout_s: float = 2.0) -> None:
    """The init makes itself non-dumpable as it starts, beside this runner; model code runs only once
    the step can no longer open its /proc/1/root (at once, unless the machine is very busy)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fd = os.open("/proc/1/root", os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        os.close(fd)
        if time.monotonic() > deadline:
            raise RuntimeError("Refused: the step could still reach its process namespace's init.")
        time.sleep(0.002)


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
        cap(resource.RLIMIT_NPROC, _process_cap())


def _process_cap() -> int:
    """RLIMIT_NPROC for a step: MAX_PROCS where it counts only the session's own processes (a
    per-session uid), else 4096. On userns every step of the fork server shares one user namespace
    and uid, so a cap of 64 there was one budget for all sessions: a step's fork bomb left the others
    unable to start a thread."""
    return MAX_PROCS if os.getuid() >= FIRST_SANDBOX_UID else 4096


def _current_vm_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
