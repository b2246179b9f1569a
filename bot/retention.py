"""Sweeps of idle workspaces: the files of threads the store has forgotten are removed
(core/workspace_retention.py says which and why), locally and in the Modal Volume; first, what the
store keeps past its time is dropped (core/store_retention.py). On Modal, the Volume's workspaces that
`reset` and `datathread forget` queued for deletion go too (core/thread_files.py): only a function
that mounts the Volume can delete from it. Every sweep also retries the files-bucket deletions `reset`
queued and expires the shared-file index (`after_deletions`).

Locally, a surface of its own (no routes) so that `bot/server.py` lists it with the others and stops it
in order: a minute after start-up, then every hour, where the scheduler loop runs
(DATATHREAD_SCHEDULER_LOOP): in `serve`'s web process and in `slack --socket`, not in every turn worker,
which build the same app. On Modal, `sweep_volume` is the body of deploy/modal_app.py's hourly function,
which mounts the Volume the step workers write to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from starlette.routing import Route

from bot.surface import AppState
from core.config import Settings
from core.file_deletions import expire_index
from core.sandbox_factory import open_threads
from core.sandbox_modal import VolumeHook, call_hook
from core.sessions import SessionStore, StoreUnavailable, open_store
from core.thread_files import remove_queued, retry_bucket

log = logging.getLogger("datathread.retention")

FIRST_SWEEP_S = 60.0  # not during start-up, which has enough to do
SWEEP_EVERY_S = 3600.0


class WorkspaceSweeper:
    """Removes idle workspaces while the app serves; every replica may run one (removal is idempotent)."""

    def __init__(self, state: AppState, *, first_s: float = FIRST_SWEEP_S, every_s: float = SWEEP_EVERY_S):
        self.state = state
        self.first_s, self.every_s = first_s, every_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def routes(self) -> list[Route]:
        return []

    async def start(self) -> None:
        settings = self.state.settings
        if settings.sandbox == "local" and settings.scheduler_loop:  # not on Modal, not in turn workers
            self._task = asyncio.create_task(self._loop(), name="datathread-workspace-sweep")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=5)
            self._task.cancel()

    async def _loop(self) -> None:
        wait = self.first_s
        while not await self._stopped_within(wait):
            wait = self.every_s
            try:
                await self.state.threads.forget_expired()
                removed = await self.state.threads.forget_idle_workspaces()
                store = await open_store(self.state.settings)
                try:
                    await after_deletions(self.state.settings, store)
                finally:
                    await store.close()
            except StoreUnavailable as exc:  # the next sweep tries again
                log.warning("the idle-workspace sweep waits for the session store: %s", exc)
                continue
            except Exception:  # a sweep must never end the app
                log.exception("the idle-workspace sweep failed")
                continue
            said_removed(removed, self.state.settings)

    async def _stopped_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        return self._stop.is_set()


async def sweep_volume(
    settings: Settings, *, root: Path, reload: VolumeHook, commit: VolumeHook
) -> list[str]:
    """One sweep of a mounted Modal Volume: reload (the step workers' commits), remove by the local rules
    with each renaming committed under the thread's lock, then commit the deletions. Raises
    StoreUnavailable: without the store, no workspace can be judged forgotten."""
    await call_hook(reload)
    async with open_threads(settings) as threads:
        await threads.forget_expired()
        removed = await threads.forget_idle_workspaces(root=root, publish=lambda: call_hook(commit))
    store = await open_store(settings)
    try:  # what `reset` and `datathread forget` asked to delete from the Volume (core/thread_files.py)
        asked = await remove_queued(store, root, publish=lambda: call_hook(commit))
        await after_deletions(settings, store)
    finally:
        await store.close()
    await call_hook(commit)
    said_removed(removed, settings)
    if asked:
        log.info("removed %d workspace(s) that reset or `datathread forget` asked to delete", len(asked))
    return removed + asked


async def after_deletions(settings: Settings, store: SessionStore) -> None:
    """Each hour, after the workspaces: the bucket objects `reset` could not delete at once, tried again
    (they are queued, never forgotten), and the shared-file index's threads past their time dropped
    (its records had no expiry at all)."""
    if retried := await retry_bucket(settings, store):
        log.info("deleted the files-bucket objects of %d reset conversation(s)", len(retried))
    await expire_index(store)


def said_removed(removed: list[str], settings: Settings) -> None:
    if removed:
        days = settings.history_ttl_days
        log.info("removed %d workspace(s) of threads idle for more than %d days", len(removed), days)
