"""Listing a session's workspace (what `attach_file` looks files up in) without stalling the bot.

A workspace of 100,000 files takes seconds to walk; walked on the event loop it froze `/healthz` and
every other thread for as long (tests/core/test_sandbox_listing.py). So the walk runs in a thread,
bounded by the workspace's file quota, and yields the interpreter lock as it goes. Kept apart from
core/sandbox_local.py, which runs steps: how a listing stays cheap for the event loop changes here.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from core.text_repair import readable


async def list_workspace(workspace: Path, limit: int) -> list[dict]:
    """The workspace's files (at most `limit`), sorted by path, each with its size and kind, walked
    in a thread: the event loop serves every other thread meanwhile."""
    return await asyncio.to_thread(_walk, workspace, limit)


def _walk(workspace: Path, limit: int) -> list[dict]:
    """In a thread, gentle with the interpreter lock the event loop needs: the walk gives it up around
    every `stat` and takes it straight back, which keeps a waiting thread waiting (CPython's convoy
    effect stalled the loop 0.2 s at a time), so it also sleeps now and then. One dict per file kept;
    plain strings sorted (one sort of 100,000 (path, stat) tuples holds the lock a tenth of a second)."""
    from core.steps import workspace_files

    files: dict[str, int] = {}
    for path, st in workspace_files(workspace, limit=limit):
        files[readable(path)] = st.st_size  # a name with bytes that are not UTF-8: as it reads (`named`)
        if len(files) % 256 == 0:
            time.sleep(0.001)
    return [
        {"path": path, "size": files[path], "kind": os.path.splitext(path)[1].lstrip(".")}
        for path in sorted(files)
    ]
