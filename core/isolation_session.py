"""Who a session is on this host, and what it leaves behind: its key, its uid, its workspace.

A session of one install is keyed by its workspace's absolute path (`session_key`): two bots on one
host — two checkouts, two test runs, a bot beside its benchmark — never share a uid or a cgroup, so
one's end-of-step cleanup never kills the other's steps. As root each session runs as its own
unprivileged uid (`sandbox_uid`) that owns its workspace. After an answered step its PID namespace
is the guarantee that nothing it started is left (its supervisor emptied it before answering); after
a stopped, cancelled or crashed step the bot kills whatever that uid still runs (`end_of_step_cleanup`).
`reap_own_uid` runs in the runner, inside its own PID namespace: it reaches that namespace only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
import time
from pathlib import Path

FIRST_SANDBOX_UID = 1_000_000  # sandbox uids: FIRST_SANDBOX_UID + [0, 1e9)


def session_key(workspace: Path) -> str:
    """One session of one install: its workspace's absolute path, hashed. Keyed by the session id
    alone, two bots on one host (two checkouts, two test runs, a bot beside its benchmark) gave the
    same thread the same uid and cgroup — and each one's end-of-step cleanup killed the other's steps."""
    return hashlib.sha256(os.fsencode(workspace)).hexdigest()[:24]


def sandbox_uid(workspace: Path) -> int:
    """A per-session unprivileged uid (when we run as root), so sessions cannot read each other.

    Drawn from a billion uids: two live sessions sharing one (and so killing each other's leftovers)
    is ~1e-6 likely at 50 concurrent sessions, where a 60,000-uid range would make it ~2%.
    """
    return FIRST_SANDBOX_UID + int(session_key(workspace)[:16], 16) % 1_000_000_000


def host_root() -> bool:
    """Real host root: uid 0 in the initial user namespace, not uid 0 inside one we made."""
    return os.geteuid() == 0 and uid_map_is_host()


def uid_map_is_host() -> bool:
    """True in the host's user namespace (we may switch to any uid); False inside our own userns."""
    try:
        first = Path("/proc/self/uid_map").read_text().split()
        return first[:3] == ["0", "0", "4294967295"]
    except OSError:
        return True


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
    """From the bot (root), after a step it stopped or cancelled, or one that crashed (an answered one's
    PID namespace is already empty): nothing a step started outlives it, and its processes are gone
    (not merely signalled) before the session's next step counts its process cap."""
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


def prepare_workspace(path: Path, *, per_session_uid: bool) -> Path:
    """Create a session's workspace with owner-only permissions (its own uid when we are root).

    The workspace's contents belong to untrusted code: anything in it may be a symlink planted to make
    this root process chown or chmod a host directory. Nothing here follows a link.
    """
    path.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise PermissionError(f"workspace {path} is not a plain directory")
    uid = sandbox_uid(path) if per_session_uid else None
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
