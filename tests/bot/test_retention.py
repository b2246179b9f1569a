"""The serving process sweeps idle workspaces by itself, and stops at once when the app stops."""

from __future__ import annotations

import asyncio
import time

from bot.retention import WorkspaceSweeper
from bot.surface import AppState
from core.analyst import Analyst
from core.runner import LocalRunner
from tests.fakes.workspaces import aged_workspace


async def test_the_sweeper_removes_forgotten_workspaces_while_the_app_serves(settings):
    forgotten = aged_workspace(settings.workspaces_dir, "sl-forgotten", age_days=45)
    kept = aged_workspace(settings.workspaces_dir, "sl-kept", age_days=1)
    analyst = await Analyst.create(settings, start_sandbox=False)
    await analyst.store.first_seen("Ev-old", ttl_s=0.01)  # expired at once: the sweep deletes it too
    sweeper = WorkspaceSweeper(AppState(settings, LocalRunner(), analyst), first_s=0.01, every_s=0.05)
    try:
        await sweeper.start()
        for _ in range(200):
            if not forgotten.exists():
                break
            await asyncio.sleep(0.05)
        assert not forgotten.exists() and kept.exists()
        assert await analyst.store.purge_expired() == 0  # the sweep had deleted the expired marker
    finally:
        started = time.monotonic()
        await sweeper.stop()
        assert time.monotonic() - started < 1  # a stop does not wait out the hour
        await analyst.close()


async def test_turn_workers_do_not_sweep(settings):
    """Each turn worker builds the same app: N+1 sweepers per host raced each other over the same files."""
    forgotten = aged_workspace(settings.workspaces_dir, "sl-forgotten", age_days=45)
    worker_settings = settings.model_copy(update={"scheduler_loop": False})  # as bot/turn_worker.py has it
    analyst = await Analyst.create(worker_settings, start_sandbox=False)
    sweeper = WorkspaceSweeper(AppState(worker_settings, LocalRunner(), analyst), first_s=0.01, every_s=0.05)
    try:
        await sweeper.start()
        await asyncio.sleep(0.3)
        assert forgotten.exists()
    finally:
        await sweeper.stop()
        await analyst.close()
