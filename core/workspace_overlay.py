"""A step's writes held in a size-limited layer until it ends: the hard disk quota of `root` and `userns`.

The step never writes the workspace itself: the supervisor (it serves one step) has a mount namespace
of its own, shared with its waiting runner, and mounts there, at the workspace's path, an overlay whose
lower layer is the real workspace and whose upper layer lives on a tmpfs with `size=` the bytes the
step may add and `nr_inodes=` the entries it may add (plus one per existing entry, for deleting it).
The runner, given its step after, builds its fresh root from that path (`core/isolation_root.py`), so
the kernel answers ENOSPC past the limit — whatever the step does, with no race against a watchdog's tick.

When nothing of the step runs any more, the supervisor — never model code — lands the upper layer in
the real workspace (`land`), within a deadline, each file atomically; what does not fit the quota is
left out and reported. It works only through directory descriptors opened without following links
(`openat`/`O_NOFOLLOW`), so no symlink the step planted can make it write elsewhere; links are
recreated, never followed; hard links land as separate copies (each charged); holes stay holes;
pipes, sockets and devices are not landed; modes lose set-uid/set-gid; all belongs to the workspace's owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from core import isolation_root

HARD_QUOTA_BACKENDS = ("root", "userns")  # the back ends with a mount namespace per step
AVAILABLE = True  # set by the fork server's start-up probe (`isolation_backends.hard_quota_works`)
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
    largest: int = 0  # the largest file's bytes

    def over(self, limit) -> bool:  # an `isolation_supervisor.Quota`
        return self.unwalkable > 0 or self.bytes > limit.max_bytes or self.files > limit.max_files


MAX_DEPTH = 4096  # directories open at once while measuring; a deeper tree counts as over the quota


def measure(root: Path | str, *, stop=None, dir_fd: int | None = None) -> Usage:
    """Bytes (apparent size) and entries under `root`, not following links; stops early once past
    `stop` (a Quota: the watchdog needs to know "over", not by how much). It walks by directory descriptors
    (`openat`), so no path length limits it; a directory it cannot open or read (or nested deeper
    than `MAX_DEPTH`) makes the result `unwalkable`, which is over any quota — never zero."""
    counts = [0, 0, 0, 0]  # bytes, entries, unwalkable directories, largest file

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
                            size = entry.stat(follow_symlinks=False).st_size
                            counts[0], counts[3] = counts[0] + size, max(counts[3], size)
        except OSError:
            counts[2] += 1
        return subdirs

    try:
        top = os.open(root, _DIR, dir_fd=dir_fd)
    except OSError:
        return Usage(0, 0, 1, 0)
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


def mount_over(
    workspace: Path, *, add_bytes: int, add_files: int, existing: int, unshare: bool = True
) -> Layer:
    """The overlay over `workspace` (module docstring) in a new mount namespace, or (`unshare=False`:
    the supervisor) in the one made before. `existing` entries may be deleted (a whiteout each).
    Raises RuntimeError (one sentence): the back end reported this protection on, so no step runs."""
    if unshare and not isolation_root.own_mount_namespace():
        raise RuntimeError("Refused: the step's workspace quota could not be set up (mount namespace).")
    # Opened in the new namespace (the overlay takes its layers only from the mounter's own), before
    # anything covers it.
    ws = os.open(workspace, _DIR)
    try:
        pages = max(1, add_bytes // PAGE)  # rounded down: never a page more than the quota allows
        scratch = isolation_root.overlay(
            str(workspace), ws, size=pages * PAGE, inodes=add_files + existing + SLACK_INODES
        )
    except BaseException:
        os.close(ws)
        raise
    return Layer(workspace=ws, scratch=scratch)


class Late(Exception):  # the landing ran out of time (between entries, or two pieces of a file)
    pass


def land(layer: Layer, budget: Budget, *, deadline: float = float("inf")) -> bool:
    """Apply the upper layer to the workspace, once nothing of the step runs. The step's deletions are
    credited first (a rename — old name deleted, new written — fits as it did), then new and changed
    entries land, each written under a temporary name, owned, moded and renamed into place (no partial
    file is ever seen), then the deletions are applied. Past `deadline` it stops cleanly, applies no
    deletion (nothing renamed is lost) and returns False. OSError: the host refused a write."""
    upper = os.open("upper", _DIR, dir_fd=layer.scratch)
    try:
        if not os.listdir(upper):  # the common step: it wrote nothing
            return True
        st = os.fstat(layer.workspace)
        owner = (st.st_uid, st.st_gid)
        _walk(upper, layer.workspace, lambda u, w, name, opaque: _deletions(u, w, name, opaque, budget.give))
        try:
            _walk(
                upper, layer.workspace, lambda u, w, name, _: _add_pass(u, w, name, budget, owner, deadline)
            )
        except Late:
            return False
        _walk(upper, layer.workspace, lambda u, w, name, opaque: _deletions(u, w, name, opaque, None))
        return True
    finally:
        os.close(upper)


def _walk(upper: int, ws: int, visit) -> None:
    """Depth first over the upper layer; `visit(u, w, name, opaque)` returns the (upper, workspace)
    directory descriptors to descend into and whether that directory is opaque, or None. Only the
    descriptors of the current path are open."""
    stack = [(upper, ws, os.listdir(upper), False, False)]
    try:
        while stack:
            u, w, names, opaque, owned = stack[-1]
            if not names:
                stack.pop()
                if owned:
                    os.close(u)
                    os.close(w)
                continue
            child = visit(u, w, names.pop(), opaque)
            if child is not None:
                stack.append((child[0], child[1], [], child[2], True))
                stack[-1][2].extend(os.listdir(child[0]))
    finally:
        for u, w, _, _, owned in stack:
            if owned:
                os.close(u)
                os.close(w)


def _lstat(name: str, fd: int) -> os.stat_result | None:
    with contextlib.suppress(FileNotFoundError):
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
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


def _deletions(u: int, w: int, name: str, opaque: bool, credit):
    """What the step deleted: a whiteout's name; in an opaque directory (deleted and made again, and
    everything under it) whatever the workspace holds that the layer does not. With `credit`, what
    that frees is only credited to it; without, it is removed."""
    st = os.stat(name, dir_fd=u, follow_symlinks=False)
    if _whiteout(st):
        _drop(w, name, credit)
        return None
    there = _lstat(name, w)
    if not stat.S_ISDIR(st.st_mode) or there is None or not stat.S_ISDIR(there.st_mode):
        return None  # new, or a type change: the add pass replaces (and credits) it
    child_u, child_w = _open_pair(u, w, name)
    opaque = opaque or _opaque(child_u)
    if opaque:
        kept = set(os.listdir(child_u))
        for entry in os.listdir(child_w):
            if entry not in kept:
                _drop(child_w, entry, credit)
    return child_u, child_w, opaque


def _drop(w: int, name: str, credit) -> None:
    there = _lstat(name, w)
    if there is not None:
        credit(*_usage_of(w, name, there)) if credit else _remove(w, name)


def _add_pass(u: int, w: int, name: str, budget: Budget, owner: tuple[int, int], deadline: float):
    """New and changed entries, each charged against the budget (a replaced one is credited first)."""
    if time.monotonic() > deadline:
        raise Late
    st = os.stat(name, dir_fd=u, follow_symlinks=False)
    if _whiteout(st):
        return None
    there = _lstat(name, w)
    if stat.S_ISDIR(st.st_mode):
        if there is None or not stat.S_ISDIR(there.st_mode):
            if not _charge(w, name, there, budget, size=0):
                return None
            tmp = f".landing-{os.urandom(8).hex()}"
            os.mkdir(tmp, 0o700, dir_fd=w)
            os.chown(tmp, *owner, dir_fd=w, follow_symlinks=False)
            if there is not None:
                _remove(w, name)
            os.rename(tmp, name, src_dir_fd=w, dst_dir_fd=w)
        child_u, child_w = _open_pair(u, w, name)
        os.fchown(child_w, *owner)
        os.fchmod(child_w, _mode(st))
        return child_u, child_w, False
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(name, dir_fd=u)
        if _charge(w, name, there, budget, size=len(os.fsencode(target))):
            tmp = f".landing-{os.urandom(8).hex()}"
            os.symlink(target, tmp, dir_fd=w)
            os.chown(tmp, *owner, dir_fd=w, follow_symlinks=False)
            _put(w, tmp, name, there)
    elif stat.S_ISREG(st.st_mode) and _charge(w, name, there, budget, size=st.st_size):
        _put(w, _copy_file(u, w, name, st, owner, deadline), name, there)
    return None  # pipes, sockets and devices are not landed


def _charge(w: int, name: str, there: os.stat_result | None, budget: Budget, *, size: int) -> bool:
    """Charge a new entry `name` of `size` bytes, crediting what it replaces. False when it does not fit."""
    if there is None:
        return budget.take(size, 1)
    old = _usage_of(w, name, there)
    budget.give(*old)
    if not budget.take(size, 1):
        budget.take(*old)  # cannot fail: it was just given back
        return False
    return True


def _put(w: int, tmp: str, name: str, there: os.stat_result | None) -> None:
    """Rename the landed `tmp` over `name`: atomic, unless a directory stood there (removed first)."""
    if there is not None and stat.S_ISDIR(there.st_mode):
        _remove(w, name)
    os.rename(tmp, name, src_dir_fd=w, dst_dir_fd=w)


def _copy_file(u: int, w: int, name: str, st: os.stat_result, owner: tuple[int, int], deadline: float) -> str:
    """The layer's file `name` copied to a new temporary name in `w`, with its owner (set first: never
    root-owned debris), mode and times; returns that name. Late: the copy is removed."""
    tmp = f".landing-{os.urandom(8).hex()}"
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=u)
    try:
        dst = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=w
        )
        try:
            os.fchown(dst, *owner)
            _copy_data(src, dst, st.st_size, deadline)
            os.fchmod(dst, _mode(st))
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=w)
            raise
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return tmp


def _copy_data(src: int, dst: int, size: int, deadline: float) -> None:
    """Only what the step wrote: holes stay holes, so a sparse file lands as small as the layer held it
    (the landing never writes more than the layer's pages)."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            break  # only a hole is left
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        os.lseek(dst, start, os.SEEK_SET)
        while start < end:
            if time.monotonic() > deadline:
                raise Late
            sent = os.sendfile(dst, src, start, min(end - start, 1 << 24))
            if not sent:  # the layer's file is the step's no longer: it cannot change, but be safe
                end = size
                break
            start += sent
        pos = end
    os.ftruncate(dst, size)


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)


def _usage_of(w: int, name: str, st: os.stat_result) -> tuple[int, int]:
    """Bytes and entries of `name` in the workspace (a directory with everything under it), counted
    as the quota counts them (`measure`), without following links."""
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size, 1
    usage = measure(name, dir_fd=w)
    return usage.bytes, usage.files + 1


def _remove(w: int, name: str) -> None:
    """Remove `name` from the workspace directory `w` (a directory with everything under it, through
    descriptors: no link is followed). Gone already: nothing."""
    there = _lstat(name, w)
    if there is not None and stat.S_ISDIR(there.st_mode):
        isolation_root.remove_tree(w, name)
    elif there is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=w)
