"""A step's writes held in a size-limited layer until it ends: the hard disk quota of `root` and `userns`.

A watchdog that measures the workspace every tick lets a burst of files overshoot for up to a tick,
and samples the file count. Here the step never writes the workspace at all: the supervisor (it
serves one step) unshares its own mount namespace and mounts, at the workspace's path, an overlay
whose lower layer is the real workspace and whose upper layer lives on a tmpfs with `size=` the bytes
the step may add and `nr_inodes=` the entries it may add (plus room for deleting what exists). The
runner, forked after, builds its fresh root from that path (`core/isolation_root.py`), so everything
the step writes, changes or deletes lands in the tmpfs, and the kernel answers ENOSPC past the limit
— whatever the step does, with no race against a tick.

When the runner and everything it started are gone, the supervisor — never model code — applies the
upper layer to the real workspace (`land`): deletions first (overlay whiteouts, opaque directories),
then new and changed files, each charged against what is left of the quota; what does not fit is left
out and the step is reported as over its quota. It works only through directory descriptors opened
without following links (`openat`/`O_NOFOLLOW`), so no symlink the step planted, in its layer or in
the workspace, can make it write elsewhere; links are recreated as links, never followed; hard links
land as separate copies (each charged); pipes, sockets and devices are not landed; modes are kept
without set-uid/set-gid bits, and every landed entry belongs to the workspace's owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from core import isolation, isolation_root

HARD_QUOTA_BACKENDS = ("root", "userns")  # the back ends with a mount namespace per step
PAGE = os.sysconf("SC_PAGE_SIZE")
OPAQUE = "user.overlay.opaque"  # `userxattr`: works in a user namespace, and as root alike
SLACK_INODES = 16  # the overlay's own: its work directory, the shared whiteout
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Usage:
    """What a workspace holds, as the quota counts it (`measure`)."""

    bytes: int
    files: int
    unwalkable: int = 0  # directories that could not be opened or read: never counted as empty

    def over(self, limit) -> bool:  # an `isolation_supervisor.Quota`
        return self.unwalkable > 0 or self.bytes > limit.max_bytes or self.files > limit.max_files


MAX_DEPTH = 1000  # directories open at once while measuring; a deeper tree counts as over the quota


def measure(root: Path | str, *, stop=None, dir_fd: int | None = None) -> Usage:
    """Bytes (apparent size) and entries under `root`, not following links; stops early once past
    `stop` (a Quota: the watchdog needs to know "over", not by how much). It walks by directory descriptors
    (`openat`), so no path length limits it; a directory it cannot open or read (or nested deeper
    than `MAX_DEPTH`) makes the result `unwalkable`, which is over any quota — never zero."""
    counts = [0, 0, 0]  # bytes, entries, unwalkable directories

    def listing(fd: int) -> list[str]:
        subdirs = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    counts[1] += 1
                    with contextlib.suppress(FileNotFoundError):  # gone since listed: a step runs beside
                        if entry.is_dir(follow_symlinks=False):
                            subdirs.append(entry.name)
                        else:
                            counts[0] += entry.stat(follow_symlinks=False).st_size
        except OSError:
            counts[2] += 1
        return subdirs

    try:
        top = os.open(root, _DIR, dir_fd=dir_fd)
    except OSError:
        return Usage(0, 0, 1)
    stack = [(top, listing(top))]  # the descriptors of the current path only
    try:
        while stack and not (stop is not None and Usage(*counts).over(stop)):
            fd, subdirs = stack[-1]
            if not subdirs:
                stack.pop()
                os.close(fd)
                continue
            name = subdirs.pop()
            try:
                child = os.open(name, _DIR, dir_fd=fd)
            except OSError as exc:  # gone, or no longer a directory (the step changed it): not held
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    counts[2] += 1
                continue
            if len(stack) >= MAX_DEPTH:
                os.close(child)
                counts[2] += 1
                continue
            stack.append((child, listing(child)))
    finally:
        for fd, _ in stack:
            os.close(fd)
    return Usage(*counts)


@dataclass
class Budget:
    """What the workspace may still take: bytes (apparent sizes, as the quota counts) and entries."""

    bytes: int
    files: int
    refused: int = 0  # entries left out because they did not fit

    def take(self, size: int, files: int) -> bool:
        if size > self.bytes or files > self.files:
            self.refused += 1
            return False
        self.bytes -= size
        self.files -= files
        return True

    def give(self, size: int, files: int) -> None:
        self.bytes += size
        self.files += files


@dataclass(frozen=True)
class Layer:
    workspace: int  # the real workspace, opened before anything covered it
    scratch: int  # the tmpfs's root: upper/ and work/

    def full(self) -> bool:
        """No page or no inode left: some write of the step was (or would have been) refused."""
        st = os.statvfs(f"/proc/self/fd/{self.scratch}")
        return st.f_bavail == 0 or st.f_favail == 0

    def close(self) -> None:
        os.close(self.workspace)
        os.close(self.scratch)


def mount_over(workspace: Path, *, add_bytes: int, add_files: int, existing: int) -> Layer:
    """In a new mount namespace of this (supervisor) process: the overlay over `workspace` (see the
    module's docstring). `existing` entries of the workspace may be deleted (a whiteout each). Raises
    RuntimeError (one sentence): the back end reported this protection on, so the step must not run."""
    if not isolation.unshare(isolation.CLONE_NEWNS) or not isolation_root.mount(
        "none", "/", None, isolation_root.MS_REC | isolation_root.MS_PRIVATE
    ):
        raise RuntimeError("Refused: the step's workspace quota could not be set up (mount namespace).")
    # Opened in the new namespace (the overlay takes its layers only from the mounter's own), before
    # anything covers it.
    ws = os.open(workspace, _DIR)
    scratch = -1
    try:
        pages = max(1, add_bytes // PAGE)  # rounded down: never a page more than the quota allows
        inodes = add_files + existing + SLACK_INODES
        flags = isolation_root.MS_NOSUID | isolation_root.MS_NODEV
        if not isolation_root.mount(
            "tmpfs", str(workspace), "tmpfs", flags, f"size={pages * PAGE},nr_inodes={inodes},mode=700"
        ):
            raise RuntimeError("Refused: the step's workspace quota could not be set up (tmpfs).")
        scratch = os.open(workspace, _DIR)
        owner = os.fstat(ws)
        os.mkdir("upper", 0o700, dir_fd=scratch)
        os.mkdir("work", 0o700, dir_fd=scratch)
        # The overlay's root takes the upper directory's owner and mode: the workspace's.
        upper = os.open("upper", _DIR, dir_fd=scratch)
        try:
            os.fchown(upper, owner.st_uid, owner.st_gid)
            os.fchmod(upper, stat.S_IMODE(owner.st_mode))
        finally:
            os.close(upper)
        layers = f"lowerdir=/proc/self/fd/{ws},upperdir=/proc/self/fd/{scratch}/upper"
        options = f"{layers},workdir=/proc/self/fd/{scratch}/work,userxattr"
        if not isolation_root.mount("overlay", str(workspace), "overlay", flags, options):
            raise RuntimeError("Refused: the step's workspace quota could not be set up (overlay).")
        return Layer(workspace=ws, scratch=scratch)
    except BaseException:
        os.close(ws)
        if scratch >= 0:
            os.close(scratch)
        raise


def land(layer: Layer, budget: Budget) -> None:
    """Apply the upper layer to the real workspace (see the module's docstring). Only called once
    nothing of the step runs. Raises OSError where the host refuses a write (its own disk full)."""
    upper = os.open("upper", _DIR, dir_fd=layer.scratch)
    try:
        if not os.listdir(upper):  # the common step: it wrote nothing
            return
        st = os.fstat(layer.workspace)
        owner = (st.st_uid, st.st_gid)
        _walk(upper, layer.workspace, lambda u, w, name: _remove_pass(u, w, name, budget))
        _walk(upper, layer.workspace, lambda u, w, name: _add_pass(u, w, name, budget, owner))
    finally:
        os.close(upper)


def _walk(upper: int, ws: int, visit) -> None:
    """Depth first over the upper layer; `visit` returns the (upper, workspace) directory descriptors
    to descend into, or None. Only the descriptors of the current path are open."""
    stack = [(upper, ws, os.listdir(upper), False)]
    try:
        while stack:
            u, w, names, owned = stack[-1]
            if not names:
                stack.pop()
                if owned:
                    os.close(u)
                    os.close(w)
                continue
            child = visit(u, w, names.pop())
            if child is not None:
                stack.append((child[0], child[1], os.listdir(child[0]), True))
    finally:
        for u, w, _, owned in stack:
            if owned:
                os.close(u)
                os.close(w)


def _lstat(name: str, fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _opaque(fd: int) -> bool:
    try:
        return os.getxattr(fd, OPAQUE) == b"y"
    except OSError:
        return False


def _open_pair(u: int, w: int, name: str) -> tuple[int, int]:
    child = os.open(name, _DIR, dir_fd=u)
    try:
        return child, os.open(name, _DIR, dir_fd=w)
    except BaseException:
        os.close(child)
        raise


def _remove_pass(u: int, w: int, name: str, budget: Budget):
    """Deletions: a whiteout removes what it names; an opaque directory empties the one below it."""
    st = os.stat(name, dir_fd=u, follow_symlinks=False)
    if _whiteout(st):
        budget.give(*_remove(w, name))
        return None
    there = _lstat(name, w)
    if not stat.S_ISDIR(st.st_mode) or there is None or not stat.S_ISDIR(there.st_mode):
        return None  # a type change: the add pass replaces it
    child_u, child_w = _open_pair(u, w, name)
    if _opaque(child_u):
        for entry in os.listdir(child_w):
            budget.give(*_remove(child_w, entry))
        os.close(child_u)
        os.close(child_w)
        return None
    return child_u, child_w


def _add_pass(u: int, w: int, name: str, budget: Budget, owner: tuple[int, int]):
    """New and changed entries, each charged against the budget (a replaced one is credited first)."""
    st = os.stat(name, dir_fd=u, follow_symlinks=False)
    if _whiteout(st):
        return None
    there = _lstat(name, w)
    if stat.S_ISDIR(st.st_mode):
        if there is None or not stat.S_ISDIR(there.st_mode):
            if not _replace(w, name, there, budget, size=0):
                return None
            os.mkdir(name, 0o700, dir_fd=w)
        pair = _open_pair(u, w, name)
        os.fchown(pair[1], *owner)
        os.fchmod(pair[1], _mode(st))
        return pair
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=u)
        if _replace(w, name, there, budget, size=len(os.fsencode(target))):
            os.symlink(target, name, dir_fd=w)
            os.chown(name, *owner, dir_fd=w, follow_symlinks=False)
    elif stat.S_ISREG(st.st_mode) and _replace(w, name, there, budget, size=st.st_size):
        _copy_file(u, w, name, st, owner)
    return None  # pipes, sockets and devices are not landed


def _replace(w: int, name: str, there: os.stat_result | None, budget: Budget, *, size: int) -> bool:
    """Make room for a new entry `name` of `size` bytes: charge it (crediting what it replaces) and
    remove what was there. False (nothing changed) when it does not fit."""
    if there is None:
        return budget.take(size, 1)
    old = _usage_of(w, name, there)
    budget.give(*old)
    if not budget.take(size, 1):
        budget.take(*old)  # cannot fail: it was just given back
        return False
    _remove(w, name)
    return True


def _copy_file(u: int, w: int, name: str, st: os.stat_result, owner: tuple[int, int]) -> None:
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=u)
    try:
        dst = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=w
        )
        try:
            offset = 0
            while offset < st.st_size:
                sent = os.sendfile(dst, src, offset, min(st.st_size - offset, 1 << 30))
                if not sent:  # the layer's file is the step's no longer: it cannot change, but be safe
                    break
                offset += sent
            os.fchown(dst, *owner)
            os.fchmod(dst, _mode(st))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)


def _usage_of(w: int, name: str, st: os.stat_result) -> tuple[int, int]:
    """Bytes and entries of `name` in the workspace (a directory with everything under it), counted
    as the quota counts them (`measure`), without following links."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, 1
    usage = measure(name, dir_fd=w)
    return usage.bytes, usage.files + 1


def _remove(w: int, name: str) -> tuple[int, int]:
    """Remove `name` from the workspace directory `w` (a directory with everything under it, through
    descriptors: no link is followed); returns what it held. Gone already: nothing."""
    there = _lstat(name, w)
    if there is None:
        return 0, 0
    usage = _usage_of(w, name, there)
    if stat.S_ISDIR(there.st_mode):
        shutil.rmtree(name, dir_fd=w)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=w)
    return usage


def no_room(error: str) -> bool:
    """Whether a step's error is the kernel refusing a write for want of room."""
    return os.strerror(errno.ENOSPC) in error or os.strerror(errno.EDQUOT) in error
