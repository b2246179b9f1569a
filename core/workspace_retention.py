"""Forgetting a thread's files: a workspace nobody has written to for longer than a thread's history is
kept (DATATHREAD_HISTORY_TTL_DAYS), and whose history the store has already let go, is removed.

Why: every thread's results (parquet, charts, CSVs) stayed on disk for good, long after its history
expired and nothing could refer to them any more; a bot serving a team for months filled its disk, and
one person opening new threads could add gigabytes an hour (each workspace may hold
DATATHREAD_WORKSPACE_MB). Both conditions, not age alone: a thread asked again today keeps its files
even if no step has written since, and a thread whose files changed recently keeps them too.

What makes it safe (`core/thread.py` runs it):
- only folders datathread made (a session id for a name, and the `.tmp` folder every workspace gets):
  a folder of someone else's under a shared DATATHREAD_HOME is never judged;
- the thread's session lock is held (without waiting) while idleness and history are checked again and
  the folder is renamed out of the way, so no turn of it runs meanwhile and none can start in it;
- the renamed folder is deleted by `shutil.rmtree`, which works through directory descriptors and never
  follows a link; what it cannot delete (a folder a step made read-only, as an ordinary user) stays,
  said once in the log, rather than being chmod-ed by path.

"Written to" is the newest modification time of the workspace and of what sits at its top (results,
charts and exports live there). Local workspaces only: on Modal they are in the Volume.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import shutil
from pathlib import Path

from core.sandbox import is_valid_session_id

log = logging.getLogger("datathread.retention")

MARK = ".tmp"  # every workspace has it (core/isolation_session.py); a folder without it is not ours
FUTURE_SLACK_S = 86_400.0  # clocks of replicas sharing a disk may differ; a set date is further off
REMOVING = ".removing-"  # a renamed workspace on its way out: not a session id, so never judged again


def idle_workspaces(root: Path, *, idle_s: float, now: float) -> list[str]:
    """The session ids under `root` whose workspace nobody has written to for `idle_s` seconds."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    return sorted(entry.name for entry in entries if is_idle(root, entry.name, idle_s=idle_s, now=now))


def is_idle(root: Path, session_id: str, *, idle_s: float, now: float) -> bool:
    """Whether `root/session_id` is a workspace of ours that nobody has written to for `idle_s`."""
    workspace = root / session_id
    if not is_valid_session_id(session_id) or workspace.is_symlink() or not (workspace / MARK).is_dir():
        return False
    return now - last_written(workspace, now=now) > idle_s


def last_written(workspace: Path, *, now: float) -> float:
    """The newest modification time of the workspace and its top-level entries (not following links);
    infinity when it cannot be read or vanished meanwhile (another replica removed it): not idle.

    A time more than a day ahead of `now` was set, not written (model code may `os.utime` its files to
    the year 2100, and landing keeps it): it says nothing, so such a workspace could not stay for good."""
    newest = -math.inf
    try:
        times = [workspace.lstat().st_mtime]
        with os.scandir(workspace) as entries:
            times += [entry.stat(follow_symlinks=False).st_mtime for entry in entries]
    except OSError:
        return math.inf
    for written in times:
        if written <= now + FUTURE_SLACK_S:
            newest = max(newest, written)
    return newest


def set_aside(root: Path, session_id: str) -> Path | None:
    """Rename the workspace out of the way (atomic, same folder); None if it is gone already."""
    aside = root / f"{REMOVING}{session_id}-{secrets.token_hex(4)}"
    try:
        os.rename(root / session_id, aside)
    except FileNotFoundError:
        return None
    return aside


def delete(aside: Path) -> bool:
    """Delete a set-aside workspace; False (and one log line) when something in it stayed. A folder a
    step made read-only cannot be emptied by an ordinary user: its folders are made writable (through
    descriptors, never following a link) and the deletion is tried once more."""
    for attempt in (1, 2):
        try:
            shutil.rmtree(aside)
            return True
        except FileNotFoundError:
            return True
        except PermissionError:
            if attempt == 1:
                writable_folders(aside)
                continue
            failure: Exception = PermissionError("a folder stayed read-only")
        except Exception as exc:  # a tree too deep for rmtree: the rest go on
            failure = exc
        log.warning("could not remove all of the idle workspace %s: %s", aside.name, failure)
        return False
    return False


def writable_folders(top: Path) -> None:
    """Give the owner rwx on `top` and every folder under it. Each is opened with O_PATH|O_NOFOLLOW|
    O_DIRECTORY (a link is refused, not followed) and changed through /proc/self/fd, which names the
    folder opened, whatever was put at its path since. What cannot be opened or changed is left."""
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
    pending = [os.open(top, flags)]
    while pending:
        folder = pending.pop()
        try:
            here = f"/proc/self/fd/{folder}"
            os.chmod(here, 0o700)
            listing = os.open(here, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                with os.scandir(listing) as entries:
                    names = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
                for name in names:
                    with contextlib.suppress(OSError):
                        pending.append(os.open(name, flags, dir_fd=listing))
            finally:
                os.close(listing)
        except OSError:
            pass
        finally:
            os.close(folder)
