"""What went wrong when writing under DATATHREAD_HOME, in words a person can act on.

Why: a full or read-only disk reached people as a traceback (DuckDB's `IOException`, SQLite's
`OperationalError`, a bare `OSError`), each naming the problem its own way — SQLite even calls a file
over the size limit a "disk I/O error". The demo database build and the SQLite session store share
this one reading, so both say the same thing about the same disk.
"""

from __future__ import annotations

import errno

_FULL = ("disk is full", "no space left", "quota exceeded", "file too large")
_READ_ONLY = ("read-only", "readonly", "permission denied", "operation not permitted")


def disk_problem(exc: BaseException) -> str:
    """A few words on why a write failed: full, read-only, or the error's own first line."""
    code = exc.errno if isinstance(exc, OSError) else None
    words = str(exc).lower()
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or any(w in words for w in _FULL):
        return "the disk is full (or a file reached this process's size limit)"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or any(w in words for w in _READ_ONLY):
        return "it is read-only for this user"
    if "database is locked" in words:  # SQLite, after its busy wait: the disk is fine
        return "another process has held it locked for longer than the busy wait"
    if "disk i/o error" in words:  # SQLite's word for EFBIG, EIO and friends alike
        return "it could not be written (is the disk full or failing?)"
    first = str(exc).split("\n")[0].strip().rstrip(".")
    return first or type(exc).__name__


def home_hint(problem: str) -> str:
    """The way out of `problem` (as `disk_problem` words it), said the same in every such sentence."""
    if problem.startswith("it is read-only"):
        return "make it writable or set DATATHREAD_HOME to another folder"
    if problem.startswith("the disk is full"):
        return "free some space or set DATATHREAD_HOME to another folder"
    if problem.startswith("another process"):
        return "is another datathread using this DATATHREAD_HOME? stop it or use a folder of its own"
    return "check the disk, or set DATATHREAD_HOME to another folder"


def write_failure(exc: BaseException) -> str:
    """`problem; way out` for a sentence that has already named the folder."""
    problem = disk_problem(exc)
    return f"{problem}; {home_hint(problem)}"
