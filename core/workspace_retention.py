"""Forgetting a thread's files: a workspace nobody has written to for longer than a thread's history is
kept (DATATHREAD_HISTORY_TTL_DAYS), and whose history the store has already let go, is removed.

Why: every thread's results (parquet, charts, CSVs) stayed on disk for good, long after its history
expired and nothing could refer to them any more; a bot serving a team for months filled its disk, and
one person opening new threads could add gigabytes an hour (each workspace may hold
DATATHREAD_WORKSPACE_MB). Both conditions, not age alone: a thread asked again today keeps its files
even if no step has written since, and a thread whose files changed recently keeps them too.

"Written to" is the newest modification time of the workspace and of what sits at its top (results,
charts and exports live there; a step's scratch is below). Local workspaces only: on Modal they are in
the Volume, which this process does not hold.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import sys
from pathlib import Path

from core.sandbox import is_valid_session_id

log = logging.getLogger("datathread.retention")


def idle_workspaces(root: Path, *, idle_s: float, now: float) -> list[str]:
    """The session ids under `root` whose workspace nobody has written to for `idle_s` seconds."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    idle = []
    for entry in entries:
        if not is_valid_session_id(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        if now - last_written(Path(entry.path)) > idle_s:
            idle.append(entry.name)
    return sorted(idle)


def last_written(workspace: Path) -> float:
    """The newest modification time of the workspace and its top-level entries (not following links)."""
    newest = workspace.lstat().st_mtime
    try:
        with os.scandir(workspace) as entries:
            for entry in entries:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except FileNotFoundError:  # removed while we looked: it was written just now
                    return float("inf")
    except OSError:  # unreadable: treated as in use
        return float("inf")
    return newest


def remove_workspace(root: Path, session_id: str) -> bool:
    """Delete one workspace (links are removed, never followed); False if something stayed."""
    target = root / session_id
    if not is_valid_session_id(session_id) or target.is_symlink() or not target.is_dir():
        return False

    def writable_and_again(function, path, _exc) -> None:  # a step made a folder read-only
        parent = os.path.dirname(path)
        os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
        function(path)

    again = {"onexc" if sys.version_info >= (3, 12) else "onerror": writable_and_again}
    try:
        shutil.rmtree(target, **again)
    except FileNotFoundError:
        pass  # another replica sharing the workspaces removed it first
    except OSError as exc:
        log.warning("could not remove the idle workspace %s: %s", session_id, exc)
        return False
    return True
