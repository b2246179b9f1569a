"""Workspaces as old as a test needs: real files whose modification times are set back (retention tests)."""

from __future__ import annotations

import os
import time
from pathlib import Path

DAY = 86_400


def aged_workspace(
    root: Path, session_id: str, *, age_days: float, files: dict[str, bytes] | None = None, ours: bool = True
) -> Path:
    """A workspace holding `files`, everything in it last written `age_days` ago (`ours`: made by
    datathread, with the `.tmp` folder every workspace gets)."""
    ws = root / session_id
    ws.mkdir(parents=True)
    if ours:
        (ws / ".tmp").mkdir()  # as every workspace has (core/isolation_session.py)
    for name, data in (files or {"result.parquet": b"PAR1"}).items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_bytes(data)
    stamp = time.time() - age_days * DAY
    for path in [*ws.rglob("*"), ws]:
        os.utime(path, (stamp, stamp), follow_symlinks=False)
    return ws
