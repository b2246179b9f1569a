"""Removing every file datathread keeps for one thread: its workspace (results, charts, exports, shared
files), the terminal's attachment copies (`attachments/<session>/`) and the objects its download links
put in the files bucket — for `reset`, `datathread forget` and the idle-workspace sweep alike, so none
of them forgets one of the three (the sweep removed workspaces only: attachment copies and bucket
objects stayed for good).

A local workspace is renamed out of the way and deleted (core/workspace_retention.py). On Modal the
workspaces are in the Volume, which only a function that mounts it can change: the thread's id is
queued in the store (`VOLUME_QUEUE`) and the hourly `sweep_workspaces` function removes it
(`remove_queued`, called by bot/retention.py's `sweep_volume`), within the hour. Bucket objects that
`reset` could not delete at once are queued the same way (`BUCKET_QUEUE`) and retried by every hourly
sweep (`retry_bucket`): `reset` answers in seconds and never says they went when they did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from core.config import Settings
from core.files_bucket import BucketRun
from core.sandbox import is_valid_session_id
from core.sessions import LockTimeout, SessionStore
from core.workspace_retention import delete, set_aside

log = logging.getLogger("datathread.retention")

VOLUME_QUEUE = "forget-workspace"  # the store's record collection of Modal workspaces to remove
BUCKET_QUEUE = "forget-bucket"  # threads whose bucket objects `reset` could not delete: the sweep retries


def attachments_root(settings: Settings) -> Path:
    """Where the terminal keeps copies of what it showed (bot/terminal_images.py)."""
    return settings.home.resolve() / "attachments"


async def remove_folder(root: Path, session_id: str) -> bool:
    """Rename `root/session_id` aside and delete it; False when there was none (or not all of it went)."""
    if not is_valid_session_id(session_id):
        return False
    aside = await asyncio.to_thread(set_aside, root, session_id)
    return aside is not None and await asyncio.to_thread(delete, aside)


async def remove_thread_files(settings: Settings, store: SessionStore, session_id: str) -> dict[str, int]:
    """Remove the thread's workspace (or queue its removal from the Modal Volume) and attachment copies;
    counts by what went. Its bucket objects are the caller's (`BucketRun`): `forget` deletes them
    first and leaves a thread whose objects stay, `reset` queues them (`delete_or_queue`)."""
    counts = {"workspaces": 0, "workspaces queued": 0, "attachment folders": 0}
    if settings.sandbox == "local":
        counts["workspaces"] += await remove_folder(settings.workspaces_dir, session_id)
    else:
        await store.put_record(VOLUME_QUEUE, session_id, {"session_id": session_id, "asked": time.time()})
        counts["workspaces queued"] += 1
    counts["attachment folders"] += await remove_folder(attachments_root(settings), session_id)
    return counts


async def delete_or_queue(store: SessionStore, bucket: BucketRun, session_id: str) -> bool:
    """The thread's bucket objects, deleted now or queued (`BUCKET_QUEUE`) for the hourly sweep to try
    again; True when they are gone (or there is no bucket). The record is written first: a process
    that dies meanwhile leaves it for the sweep."""
    if not bucket.settings.files_bucket:
        return True
    await store.put_record(BUCKET_QUEUE, session_id, {"session_id": session_id, "asked": time.time()})
    if await bucket.delete(session_id) is None:
        return False
    await store.delete_record(BUCKET_QUEUE, session_id)
    return True


async def retry_bucket(settings: Settings, store: SessionStore) -> list[str]:
    """In the hourly sweep: the bucket deletions `reset` queued, tried again (until the bucket first
    fails, as any run); returns the ids whose objects went."""
    bucket = BucketRun(settings, why="the hourly sweep")
    done = []
    for entry in await store.list_records(BUCKET_QUEUE):
        session_id = str(entry.get("session_id", ""))
        if await bucket.delete(session_id) is None:
            break
        await store.delete_record(BUCKET_QUEUE, session_id)
        done.append(session_id)
    return done


async def remove_queued(
    store: SessionStore, root: Path, *, publish: Callable[[], Awaitable[None]]
) -> list[str]:
    """On Modal, in the function that mounts the Volume at `root`: remove the workspaces `reset` and
    `forget` queued, each renamed under its thread's lock (a running turn's is left for the next
    sweep) and `publish`ed (committed) before the lock is let go; returns the ids removed."""
    removed = []
    for entry in await store.list_records(VOLUME_QUEUE):
        session_id = str(entry.get("session_id", ""))
        aside = None
        try:
            async with store.lock(session_id, ttl_s=60, wait_s=0):
                aside = (
                    await asyncio.to_thread(set_aside, root, session_id)
                    if is_valid_session_id(session_id)
                    else None
                )
                if aside is not None:
                    await publish()
        except LockTimeout:  # a turn of it is running: the next sweep
            continue
        if aside is None or await asyncio.to_thread(delete, aside):
            await store.delete_record(VOLUME_QUEUE, session_id)
            removed.append(session_id)
    return removed


async def after_sweep(
    settings: Settings,
    removed: list[str],
    idle_s: float,
    now: float,
    has_history: Callable[[str], Awaitable[list]],
) -> None:
    """The idle sweep removed these workspaces: their attachment copies and bucket objects go too, and
    so do attachment folders idle as long whose thread has no workspace or history left (the terminal's
    copies were never swept at all)."""
    root = attachments_root(settings)
    leftover = await asyncio.to_thread(_idle_folders, root, settings.workspaces_dir, idle_s=idle_s, now=now)
    bucket = BucketRun(settings, why="the idle sweep")  # the next sweep does not see them again: the
    for session_id in sorted(set(removed) | set(leftover)):  # lifecycle rule's part (docs/OPERATIONS.md)
        if session_id not in removed and await has_history(session_id):
            continue
        await remove_folder(root, session_id)
        await bucket.delete(session_id)


def _idle_folders(root: Path, workspaces: Path, *, idle_s: float, now: float) -> list[str]:
    """Attachment folders nobody wrote to for `idle_s` whose thread has no local workspace."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    out = []
    for entry in entries:
        if not is_valid_session_id(entry.name) or (workspaces / entry.name).exists():
            continue
        with contextlib.suppress(OSError):
            if (
                entry.is_dir(follow_symlinks=False)
                and now - entry.stat(follow_symlinks=False).st_mtime > idle_s
            ):
                out.append(entry.name)
    return out
