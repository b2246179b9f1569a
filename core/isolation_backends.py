"""Which isolation back end this host allows, found by trying, and what each one protects.

The fork server (`core/zygote.py`) calls `choose` once at start, before it imports the data stack.
Each back end is probed in a throw-away child process doing what a step will do (not guessed from the
uid): a root probe that never fell into a user namespace, user namespaces that really mount, a Landlock
ruleset that really restricts. The report built here is the one `datathread doctor`, the start log and
`/healthz` show, row for row the table in docs/SECURITY.md.

Back ends, best first:
- `root`: host root: per-session uid, mount + network namespaces, cgroups where writable.
- `userns`: an ordinary user with user namespaces: user + mount + network namespaces.
- `landlock`: no usable namespaces (Ubuntu's AppArmor default, Docker's seccomp profile): Landlock
  file rules, a seccomp filter refusing sockets, rlimits, process-group kill.
- `seatbelt`: macOS `sandbox_init` profile per step (see `core/seatbelt.py`).
- `none`: rlimits and a scrubbed environment only; every missing protection is reported OFF.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from core import cgroups, isolation, isolation_root, landlock, seatbelt, seccomp, workspace_overlay
from core.cgroups import CgroupLayout

BACKENDS = ("root", "userns", "landlock", "seatbelt", "none")
POLICIES = ("strict", "best")
# What `strict` demands before any step runs.
REQUIRED_FOR_STRICT = ("network", "filesystem")
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWPID = 0x08000000, 0x04000000, 0x20000000
# Tests only: set to "fail" to make the hard-quota probe fail (a kernel without overlay in a user
# namespace or user xattrs on tmpfs), so the watchdog fallback runs here.
OVERLAY_PROBE_HOOK = "DATATHREAD_TEST_OVERLAY_PROBE"


@dataclass
class IsolationReport:
    """Which protections are active; shown by `datathread doctor`, the start log and /healthz."""

    active: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str]:
        out = {k: f"on — {v}" for k, v in self.active.items()}
        out.update({k: f"OFF — {v}" for k, v in self.missing.items()})
        return out


@dataclass
class ZygoteIsolation:
    """The fork server's choice, handed to every step child."""

    backend: str
    cgroup: CgroupLayout | None
    seccomp: bool
    landlock_abi: int
    report: IsolationReport
    pid_namespace: bool = False  # each step under its own init in a new PID namespace (root, userns)


def unsatisfied_by(protections: dict[str, str]) -> list[str]:
    """The protections `strict` needs that a report shows OFF (or lacks)."""
    return [name for name in REQUIRED_FOR_STRICT if not protections.get(name, "").startswith("on")]


def choose(policy: str, *, masked: list[str], refuse_namespaces: bool = False) -> ZygoteIsolation:
    """Probe back ends in order (or only the one `policy` names) and enter the first that works.

    `refuse_namespaces` installs a seccomp filter refusing `unshare`/`setns` first: the tests' way of
    being a host whose kernel or container refuses namespaces. Raises RuntimeError (one sentence) when
    a named back end is not available here.
    """
    if refuse_namespaces:
        seccomp.install(seccomp.NAMESPACE_DENIED)
    layout = cgroups.detect()  # before any namespace: really writable by this process, or None
    backend = _first_working(policy)
    if backend is None:
        raise RuntimeError(
            f"DATATHREAD_ISOLATION={policy}: this host does not allow the {policy!r} back end."
        )
    # Before this process enters any namespace: the probe makes its own, as a step's supervisor will.
    workspace_overlay.AVAILABLE = hard = hard_quota_works(backend)
    if backend == "root":
        isolation.unshare(CLONE_NEWNET)
    elif backend == "userns":
        isolation.enter_user_namespace()
    has_seccomp = sys.platform.startswith("linux") and isolation.probe_in_child(seccomp.install)
    abi = landlock.abi_version() if backend == "landlock" else 0
    report = describe(
        backend, layout, has_seccomp=has_seccomp, landlock_abi=abi, masked=masked, hard_quota=hard
    )
    return ZygoteIsolation(backend, layout, has_seccomp, abi, report, backend in ("root", "userns"))


def preview(policy: str, *, masked: list[str]) -> IsolationReport:
    """What `choose` would pick and report on this host, probed in throw-away children only, so the
    calling process stays as it was (`datathread doctor`, before it starts any thread)."""
    layout = cgroups.detect()
    backend = _first_working(policy)
    if backend is None:
        report = IsolationReport()
        report.missing["back end"] = f"DATATHREAD_ISOLATION={policy}: this host does not allow it"
        return report
    has_seccomp = sys.platform.startswith("linux") and isolation.probe_in_child(seccomp.install)
    abi = landlock.abi_version() if backend == "landlock" else 0
    hard = hard_quota_works(backend)
    return describe(
        backend, layout, has_seccomp=has_seccomp, landlock_abi=abi, masked=masked, hard_quota=hard
    )


def _first_working(policy: str) -> str | None:
    """The back end `policy` names if it works here, else (for best/strict) the first that does."""
    candidates = [policy] if policy in BACKENDS else list(BACKENDS)
    return next((backend for backend in candidates if _works(backend)), None)


def _works(backend: str) -> bool:
    if backend == "root":
        return isolation.host_root() and isolation.probe_in_child(_probe_root_namespaces)
    if backend == "userns":
        return sys.platform.startswith("linux") and isolation.probe_in_child(_probe_user_namespaces)
    if backend == "landlock":
        return landlock.abi_version() >= 1 and isolation.probe_in_child(_probe_landlock)
    if backend == "seatbelt":
        return seatbelt.available()
    return backend == "none"


def _probe_root_namespaces() -> bool:
    return (
        isolation.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID)
        and isolation.can_mount_tmpfs()
    )


def _probe_user_namespaces() -> bool:
    return (
        isolation.enter_user_namespace()
        # and a step's own namespaces inside it, as `enter_step` makes them (a network one too: a host
        # with user.max_net_namespaces at 1 would pass the first and refuse every step)
        and isolation.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID | CLONE_NEWNET)
        and isolation.can_mount_tmpfs()
    )


def hard_quota_works(backend: str) -> bool:
    """Whether a step of `backend` can get the hard workspace quota here (`core/workspace_overlay.py`):
    an overlay, in the step's own mount namespace (and user namespace for `userns`: kernel 5.11+),
    with its upper layer on a tmpfs (`userxattr` there needs user xattrs on tmpfs: kernel 6.6+), where
    a directory of the lower layer can be deleted and made again (an opaque directory). Probed in a
    throw-away child; where it fails, that back end's quota is the watchdog."""
    if backend not in workspace_overlay.HARD_QUOTA_BACKENDS or os.environ.get(OVERLAY_PROBE_HOOK) == "fail":
        return False
    return isolation.probe_in_child(lambda: _probe_overlay(user_namespace=backend == "userns"))


def _probe_overlay(*, user_namespace: bool) -> bool:
    if user_namespace and not isolation.enter_user_namespace():
        return False
    if not isolation.unshare(CLONE_NEWNS) or not isolation_root.mount(
        "none", "/", None, isolation_root.MS_REC | isolation_root.MS_PRIVATE
    ):
        return False
    if not isolation_root.mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m,mode=700"):
        return False
    os.makedirs("/tmp/lower/d")
    open("/tmp/lower/d/old", "w").close()
    os.mkdir("/tmp/ws")
    isolation_root.overlay(
        "/tmp/ws", os.open("/tmp/lower", os.O_RDONLY | os.O_DIRECTORY), size=1 << 20, inodes=64
    )
    shutil.rmtree("/tmp/ws/d")
    os.mkdir("/tmp/ws/d")
    open("/tmp/ws/d/new", "w").close()
    return os.listdir("/tmp/ws/d") == ["new"] and os.listdir("/tmp/lower/d") == ["old"]


def _probe_landlock() -> bool:
    landlock.restrict(read=["/"], write=[])
    return seccomp.install()


def describe(
    backend: str,
    layout: CgroupLayout | None,
    *,
    has_seccomp: bool,
    landlock_abi: int,
    masked: list[str],
    hard_quota: bool = True,
) -> IsolationReport:
    """The protections report for a back end (what the step children will apply)."""
    r = IsolationReport()
    on, off = r.active, r.missing
    namespaces = backend in ("root", "userns")
    on["back end"] = {
        "root": "root: per-session uid, mount/network/IPC/UTS/PID namespaces",
        "userns": "ordinary user with user namespaces: user/mount/network/IPC/UTS/PID namespaces",
        "landlock": f"no usable namespaces: Landlock (ABI {landlock_abi}) + seccomp",
        "seatbelt": "macOS Seatbelt profile per step",
    }.get(backend, "")
    if backend == "none":
        off["back end"] = "none: no namespaces, Landlock or Seatbelt in use; steps run unconfined"
    if namespaces:
        on["network"] = "own network namespace with no interfaces (no network at all)"
    elif backend == "seatbelt":
        on["network"] = "Seatbelt profile denies all network access"
    elif has_seccomp:
        on["network"] = (
            "seccomp refuses sockets: no new ones, a socketpair reaches only itself (no IP, no Unix sockets)"
        )
    else:
        off["network"] = "no namespace or seccomp here: sandboxed code may reach the network"
    if namespaces:
        on["filesystem"] = (
            "a fresh root (pivot_root): only the runtime, venv, core package and system libraries "
            "(read-only), /dev/null|zero|urandom, own /proc, a private /tmp, the session's workspace and, "
            "for warehouse steps, the warehouse; the host's tree, /run, homes, state and other workspaces "
            "are not there; masked files: " + (", ".join(masked) or "none")
        )
    elif backend == "landlock":
        on["filesystem"] = (
            "Landlock: reads only the runtime, system libraries and (warehouse steps) the warehouse; "
            "writes only the session's workspace"
        )
    elif backend == "seatbelt":
        on["filesystem"] = "Seatbelt: reads the runtime and warehouse; writes only the session's workspace"
    else:
        off["filesystem"] = "no filesystem isolation: a step can read and write whatever the bot's uid can"
    if backend == "root":
        on["uid"] = "each session runs as its own unprivileged uid; workspaces are 0700"
        on["bot process"] = "other uid: /proc/<bot>/environ, mem and fds are unreadable"
        on["leftover processes"] = (
            "own PID namespace per step: everything a step started dies with it; the bot also kills "
            "the session uid's processes after a step that was stopped, cancelled or crashed"
        )
    else:
        off["uid"] = "not host root: sandboxed code runs as the bot's uid (run as root or on Modal)"
        bot = "same uid, but the bot is non-dumpable: /proc/<bot>/environ and mem are unreadable"
        if backend in ("userns", "landlock") and landlock.abi_version() >= 6:
            on["bot process"] = bot + "; Landlock scopes stop signals to it"
        elif backend == "seatbelt":
            on["bot process"] = bot + "; Seatbelt allows signals only inside the step"
        else:
            off["bot process"] = bot + ", but a step may signal (kill) it"
        if backend == "userns":
            on["leftover processes"] = "own PID namespace per step: everything a step started dies with it"
        elif backend == "landlock" and landlock.abi_version() >= 6:
            on["leftover processes"] = (
                "no PID namespace, but the step's supervisor is a child subreaper: what a step started, "
                "detached (setsid, double fork) or not, is killed when the step ends (Landlock scopes "
                "keep the step from killing the supervisor first); the fork server, a subreaper too, "
                "kills what a step stopped by the bot left"
            )
        elif backend in ("landlock", "none"):
            off["leftover processes"] = (
                "the step's supervisor kills what a step started when it ends (a child subreaper), and "
                "the fork server what a stopped step left, but nothing stops a step from killing both "
                "first (no signal scoping here)"
            )
        else:
            off["leftover processes"] = (
                "a step's background processes that leave its process group may outlive it"
            )
    if layout is not None:
        on["cgroups"] = cgroups.describe(layout, max_procs=isolation.MAX_PROCS)
    else:
        off["cgroups"] = "no cgroup writable by this process: memory and processes are capped per process"
    if has_seccomp and backend != "seatbelt":
        on["syscalls"] = (
            "seccomp refuses sockets, ptrace, pidfd_getfd, mount, unshare/setns, keyctl, bpf, io_uring, SysV IPC"
        )
    else:
        off["syscalls"] = "no seccomp filter"
    on["limits"] = "rlimits on CPU time, address space, file size, processes, open files"
    if backend in ("root", "userns") and hard_quota:
        on["workspace quota"] = (
            "hard limit: a step writes into a size- and inode-limited layer; only what fits the quota lands"
        )
    else:
        on["workspace quota"] = (
            "watchdog, not a hard limit: the workspace is measured every 0.1 s and the step stopped past "
            "the size or file-count quota (a burst can overshoot by a tick's writes)"
        ) + ("; this kernel cannot hold a step's writes in a layer" if backend in ("root", "userns") else "")
    on["result channel"] = "model code holds no socket to the bot; every result is validated and clipped"
    on["privileges"] = "no_new_privs set; core dumps off"
    on["wall time"] = (
        "the step's supervisor stops it, with everything it started, a second past the step timeout; "
        "the bot kills its process group a second later if need be"
    )
    on["environment"] = "scrubbed: only " + ", ".join(isolation.SAFE_ENV) + " pass through"
    return r


def default_policy(command: str) -> str:
    """`serve` refuses unisolated steps by default; a person's own `chat`/`ask` gets the best
    available, with a loud warning for what is OFF."""
    return "strict" if command == "serve" else "best"
