"""Paths into a session's workspace, from the bot's side: the workspace's contents belong to untrusted
code, so a path the model gives is proven to stay inside it, and reads and writes pin each directory by
a descriptor and follow no link a step may have planted."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from core.text_repair import readable


def resolve_in_workspace(workspace: Path, path: str) -> Path:
    """A model-given relative path, resolved and proven to stay inside the workspace."""
    if not path or path.startswith(("/", "~")) or "\x00" in path:
        raise PermissionError(f"{path!r} is not a relative path inside the workspace.")
    full = (workspace / path).resolve()
    if workspace.resolve() not in (full, *full.parents):
        raise PermissionError(f"{path!r} is outside the workspace.")
    return full


def named(workspace: Path, path: str) -> Path:
    """The file `path` names, resolved inside the workspace (as `resolve_in_workspace`): the file of that
    very name, else the one whose name reads as `path`. A step may name a file with bytes that are not
    UTF-8 (`open(b'M\\xfcnchen.csv', 'w')`); the model, the listing and people know it by its readable
    name (core/text_repair.py), which finds it here. The exact name wins where both exist."""
    full = resolve_in_workspace(workspace, path)
    if os.path.lexists(full):
        return full
    found = workspace
    for part in PurePosixPath(path).parts:
        if found != workspace and (os.path.islink(found) or not os.path.isdir(found)):
            # a link a step planted is never walked: the bot would look into (and, by its errors,
            # tell of) host folders; the read after this stays inside the workspace either way
            raise FileNotFoundError(f"{path!r} is not in the workspace.")
        if not os.path.lexists(found / part):
            with os.scandir(found) as entries:  # a missing name only: its folder is listed once
                part = next(
                    (e.name for e in entries if not e.is_symlink() and readable(e.name) == part), part
                )
        found = found / part
    return resolve_in_workspace(workspace, str(found.relative_to(workspace)))


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


def write_inside(workspace: Path, full: Path, data: bytes, owner: tuple[int, int] | None = None) -> None:
    """Write a file into the workspace; the directory is pinned by a descriptor whose real place is
    checked, and the file is opened without following a link, so a planted symlink cannot redirect it.
    With `owner`, the open file is given to it (by descriptor: a chown by path after the write would
    follow a parent directory swapped for a link meanwhile, as root, to a host file)."""
    dfd = os.open(full.parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        real = Path(os.readlink(f"/proc/self/fd/{dfd}"))
        if real != workspace.resolve() and workspace.resolve() not in real.parents:
            raise PermissionError(f"{full.name!r} is outside the workspace.")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(full.name, flags, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "wb") as handle:
            if owner is not None:
                os.fchown(handle.fileno(), *owner)
            handle.write(data)
    finally:
        os.close(dfd)


def make_parents(workspace: Path, full: Path, owner: tuple[int, int] | None) -> None:
    """The directories between the workspace and `full`, made as its file is: owner-only and, with
    `owner`, given to it at once (a root-owned `a/` would refuse the next step, which runs as the
    session's uid). Walked by descriptors without following a link, so one a step planted cannot lead
    the walk out of the workspace. A directory is made under its own name, not a temporary one renamed
    into place: empty, it has no partial state to hide, and a rename would replace an empty directory
    another write made meanwhile and is about to fill."""
    dfd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in full.parent.relative_to(workspace.resolve()).parts:
            made = True
            try:
                os.mkdir(name, 0o700, dir_fd=dfd)
            except FileExistsError:  # already there: it keeps its owner and mode
                made = False
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):  # not a file or a planted link in the way
                    raise
                raise PermissionError(f"{name!r} is not a directory inside the workspace.") from exc
            os.close(dfd)
            dfd = child
            if made:
                if owner is not None:
                    os.fchown(dfd, *owner)
                os.fchmod(dfd, 0o700)  # whatever the umask
    finally:
        os.close(dfd)
