"""The fork server's private folder (its socket, its log, matplotlib's cache), one per sandbox.

Made by `mkdtemp` (mode 0700, a new name) and removed when the sandbox closes. A bot killed with
SIGKILL runs no cleanup, and its folder stayed in the temp folder for good. So each folder holds a
lock file its bot keeps locked (`flock`) while it lives; the kernel lets the lock go when the bot
dies, however it dies, and the next sandbox this user starts removes the folders whose lock it can
take. Folders of other users, of older versions (no lock file) and links are left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "datathread-zygote-"
LOCK = "owner.lock"
GRACE_S = 10.0  # a younger folder is left alone: its bot may be between making it and locking it
# A Unix socket's path is at most 107 bytes on Linux (103 on macOS): under a longer TMPDIR the fork
# server failed to start ("AF_UNIX path too long"), so the folder then goes in /tmp.
SOCKET_PATH_MAX = 100
SOCKET_NAME = "zygote.sock"


@dataclass
class ZygoteFolder:
    path: Path
    _lock_fd: int

    @classmethod
    def make(cls, base: Path | None = None) -> ZygoteFolder:
        """A new folder, locked for this process's life; first, the ones dead bots left are removed."""
        base = Path(base or tempfile.gettempdir())
        if len(f"{base}/{PREFIX}12345678/{SOCKET_NAME}".encode()) > SOCKET_PATH_MAX:
            base = Path("/tmp")
        sweep_left_behind(base)
        path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
        fd = os.open(path / LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return cls(path, fd)

    @property
    def socket(self) -> str:
        return str(self.path / SOCKET_NAME)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def sweep_left_behind(base: Path | None = None) -> int:
    """Remove this user's fork-server folders whose bot is gone; how many went."""
    removed, uid = 0, os.getuid()
    for folder in Path(base or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            st = folder.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                continue
            fd = os.open(folder / LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # gone meanwhile, unreadable, or no lock file (an older version's: may be alive)
            continue
        try:
            if time.time() - os.fstat(fd).st_mtime < GRACE_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its bot is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed
