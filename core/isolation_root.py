"""A step's filesystem built from nothing (the `root` and `userns` back ends), as bubblewrap does it.

Hiding the host's secrets one directory at a time is a denylist: whatever nobody thought of (a
service socket under /run, a writable lock directory, a config file under /opt) stays in view. So the
step's root is an empty tmpfs holding only what a data step needs, each bound read-only from the
host: the system libraries (/usr and the /bin, /lib… links or directories), /etc/ld.so.cache and
/etc/localtime, the Python runtime and venv, the project's `core` package; a few device files; its
own /proc (of the step's PID namespace); a private /tmp and /dev/shm; the session's workspace
read-write; and for warehouse steps the warehouse, read-only. Then `pivot_root` makes it `/`, the
host's root is detached, and the new root itself is made read-only. /home, /srv, /opt, /var, the bot's
state and every other workspace are simply not there (only the directories on the way to a bound path
exist, empty but for it); /root and /run are empty directories, whoever runs the bot.

Everything is opened (O_PATH) before the staging tmpfs covers anything, so binds come from the real
tree even when the workspace lives under the directory used for staging.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import struct
from pathlib import Path

MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1  # same on x86_64, aarch64
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MS_SLAVE, MNT_DETACH = 4096, 16384, 1 << 18, 1 << 19, 2
CLONE_NEWNS = 0x00020000
PIVOT_ROOT = {"x86_64": 155, "amd64": 155, "aarch64": 41, "arm64": 41}
# What a data step needs of the host besides the runtime: shared libraries (numpy, DuckDB, matplotlib
# load theirs from /usr/lib and /lib*), the loader's cache, the time zone; a few device files.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ETC = ("/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
STAGE = "/tmp"  # every host has it; covered only in the step's own mount namespace
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
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


def own_mount_namespace() -> bool:
    """This process's own mount namespace: where a step's supervisor mounts its workspace's layer
    (`core/workspace_overlay.py`), made by the spare before it forks the runner, which shares it until
    it makes its own (`core/step_processes.py`). A slave of the host's, not private: nothing mounted
    here reaches the host, but what the host mounts later still arrives — a spare may wait minutes
    for its step, and the workspaces may be remounted meanwhile (a Modal Volume is reloaded before
    each step); a private copy would show the step the mounts of when the spare was forked."""
    return _libc.unshare(CLONE_NEWNS) == 0 and mount("none", "/", None, MS_REC | MS_SLAVE)


def read_only_tree(path: str, *, read_only: bool = True, recursive: bool = True) -> bool:
    """mount_setattr: set (or clear) MOUNT_ATTR_RDONLY on the mount at `path` and, with `recursive`,
    every mount below it — in this mount namespace only."""
    change = struct.pack("=QQQQ", *((MOUNT_ATTR_RDONLY, 0) if read_only else (0, MOUNT_ATTR_RDONLY)), 0, 0)
    attr = ctypes.create_string_buffer(change, 32)
    flags = AT_RECURSIVE if recursive else 0
    return _libc.syscall(MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, attr, ctypes.c_size_t(32)) == 0


def build(*, workspace: Path, readonly: list[str], masked: list[str], hidden: list[str] = ()) -> None:
    """Make `/` a fresh root (see the module's docstring). Called in the step's own mount namespace,
    after the host tree was made read-only; `readonly` are the runtime, code and (warehouse steps)
    warehouse paths; `hidden` directories (the bot's state, the workspaces) are covered by an empty
    read-only tmpfs where they lie inside one of those (a DATATHREAD_HOME inside the venv, say).
    Irreversible; raises RuntimeError (one sentence) where a step would be less confined than reported."""
    # Which secret files exist is decided now: once the stage covers /tmp, a secret under /tmp (a
    # checkout there) would look absent and go unmasked.
    secrets = [p for p in masked if os.path.isfile(p)]
    links = {p: os.readlink(p) for p in SYSTEM if os.path.islink(p)}
    wanted = [p for p in (*SYSTEM, *ETC) if p not in links] + list(readonly)
    keep = [(str(workspace), False)] + [(p, True) for p in dict.fromkeys(wanted) if os.path.exists(p)]
    fds = [(path, ro, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path, ro in keep]
    devices = [(d, os.open(d, os.O_PATH | os.O_CLOEXEC)) for d in DEVICES if os.path.exists(d)]
    # Decided before the stage covers /tmp too (a home under /tmp would look absent, and show).
    covers = _inside_bound(hidden, [p for p, ro, _ in fds if ro] + [p for p in links])
    if not mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755"):
        raise RuntimeError("Refused: the step's fresh root could not be made.")
    new = Path(STAGE)
    for link, target in links.items():
        os.symlink(target, new / link.lstrip("/"))
    scratch = [("/tmp", "size=64m,mode=1777"), ("/dev/shm", "size=64m,mode=1777")]
    scratch += [(path, "size=4k,mode=755") for path in covers]
    plan = [(_depth(p), 0, p, data, -1) for p, data in scratch]
    plan += [(_depth(p), 1, p, ro, fd) for p, ro, fd in fds]
    for _, is_bind, path, arg, fd in sorted(plan, key=lambda step: step[:3]):
        target = str(new / path.lstrip("/"))
        if is_bind:
            bind(target, fd, read_only=arg)
        else:
            os.makedirs(target, exist_ok=True)
            if not mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, arg):
                raise RuntimeError(f"Refused: the step's {path} could not be made.")
    for path in covers:  # the workspace (under its root) is bound by now: nothing more to make there
        if not read_only_tree(str(new / path.lstrip("/")), recursive=False):
            raise RuntimeError(f"Refused: could not hide {path} from the step.")
    for device, fd in devices:  # as they are (writable, like /dev/null anywhere); nothing else in /dev
        bind(str(new / device.lstrip("/")), fd, read_only=None)
    for name, target in DEV_LINKS.items():
        os.symlink(target, new / "dev" / name)
    (new / "run").mkdir(exist_ok=True)  # empty: no host service sockets, no lock files
    (new / "root").mkdir(exist_ok=True)  # empty (or the way to a runtime there), whoever runs the bot
    (new / "proc").mkdir(exist_ok=True)
    # The step's own /proc: in its PID namespace it lists only the step's processes, and hidepid=2
    # hides other uids' ones (the init, as root) too.
    if not mount("proc", str(new / "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2"):
        raise RuntimeError("Refused: the step's own /proc could not be mounted.")
    # Secret files (`.env`, the GCP key) read as empty, where they are: hidden inside a bound tree, and
    # shown empty rather than absent elsewhere, so a step's view does not depend on where they live.
    for path in secrets:
        target = new / path.lstrip("/")
        if not target.is_symlink():
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            if not mount("/dev/null", str(target), None, MS_BIND):
                raise RuntimeError(f"Refused: could not hide {path} from the step.")
    pivot(STAGE)


def can_mount_proc_at(path: str):
    """A probe (see `isolation.can_mount_tmpfs`): mount a step-style /proc at `path`."""

    def check() -> bool:
        return mount("proc", path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")

    return check


def pivot(new_root: str) -> None:
    """`new_root` becomes `/`; the host's root is detached (bubblewrap's pivot_root(".", ".") way)."""
    number = PIVOT_ROOT.get(platform.machine().lower())
    os.chdir(new_root)
    if number is None or _libc.syscall(number, b".", b".") != 0:
        raise RuntimeError("Refused: the step's fresh root could not replace the host's.")
    if _libc.umount2(b".", MNT_DETACH) != 0:
        raise RuntimeError("Refused: the host's root could not be detached from the step.")
    os.chdir("/")
    if not read_only_tree("/", recursive=False):  # the empty skeleton itself: nothing to write there
        raise RuntimeError("Refused: the step's root could not be made read-only.")


def _inside_bound(hidden: list[str], bound: list[str]) -> list[str]:
    """The hidden directories that lie strictly inside a read-only bound path (so would show)."""
    return [
        h
        for h in dict.fromkeys(os.path.realpath(h) for h in hidden)
        if os.path.isdir(h) and any(Path(b) in Path(h).parents for b in bound)
    ]


def _depth(path: str) -> int:
    return len(Path(path).parts)


def bind(path: str, fd: int, *, read_only: bool | None) -> None:
    """Bind an opened path at `path` (creating the mount point if needed): read-only, read-write
    (`False`: a bind from the read-only host tree is made writable) or as it is (`None`)."""
    if not os.path.exists(path):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).touch()
    if not mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC):
        raise RuntimeError(f"Refused: could not give the step {path}.")
    os.close(fd)
    if read_only:
        remount_read_only(path)
    elif read_only is False and not read_only_tree(path, read_only=False, recursive=False):
        raise RuntimeError(f"Refused: could not make {path} writable for the step.")


def remount_read_only(path: str) -> None:
    # Keep the flags the mount already has (a user namespace may not clear locked ones), add RDONLY.
    keep = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096)
    mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | keep)
    if not os.statvfs(path).f_flag & os.ST_RDONLY:
        raise RuntimeError(f"Refused: could not make {path} read-only for the step.")


def overlay(target: str, lower: int, *, size: int, inodes: int) -> int:
    """Mount at `target` (in this process's own mount namespace) a tmpfs of `size` bytes and `inodes`
    entries, then over it an overlay of the directory `lower` (a descriptor opened before) with its
    upper layer on that tmpfs (`core/workspace_overlay.py`); returns the tmpfs's root, opened. Raises
    RuntimeError (one sentence) where a mount fails."""
    flags = MS_NOSUID | MS_NODEV
    if not mount("tmpfs", target, "tmpfs", flags, f"size={size},nr_inodes={inodes},mode=700"):
        raise RuntimeError("Refused: the step's workspace quota could not be set up (tmpfs).")
    scratch = os.open(target, _DIR)
    try:
        owner = os.fstat(lower)
        os.mkdir("upper", 0o700, dir_fd=scratch)
        os.mkdir("work", 0o700, dir_fd=scratch)
        # The overlay's root takes the upper directory's owner and mode: the lower one's.
        upper = os.open("upper", _DIR, dir_fd=scratch)
        try:
            os.fchown(upper, owner.st_uid, owner.st_gid)
            os.fchmod(upper, owner.st_mode & 0o7777)
        finally:
            os.close(upper)
        layers = f"lowerdir=/proc/self/fd/{lower},upperdir=/proc/self/fd/{scratch}/upper"
        options = f"{layers},workdir=/proc/self/fd/{scratch}/work,userxattr"
        if not mount("overlay", target, "overlay", flags, options):
            raise RuntimeError("Refused: the step's workspace quota could not be set up (overlay).")
        return scratch
    except BaseException:
        os.close(scratch)
        raise


def remove_tree(w: int, name: str) -> None:
    """`shutil.rmtree(name, dir_fd=w)` without recursion (a tree 1,000+ deep is no RecursionError): depth
    first through descriptors, never following a link, one open per level; past the open-files limit,
    OSError (the step's landing, `core/workspace_overlay.py`, then fails cleanly)."""
    stack = [(w, name, os.open(name, _DIR, dir_fd=w))]
    try:
        while stack:
            parent, here, fd = stack[-1]
            sub, seen = None, False
            with os.scandir(fd) as entries:
                for entry in entries:
                    seen = True
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                stack.append((fd, sub, os.open(sub, _DIR, dir_fd=fd)))
                continue
            if seen:  # unlinking while listing may skip entries: list again until it is empty
                continue
            stack.pop()
            os.close(fd)
            os.rmdir(here, dir_fd=parent)
    finally:
        for _, _, fd in stack:
            os.close(fd)
