"""The serve app's own lifecycle (bot/server.py); what its routes do is tested per surface."""

from __future__ import annotations

import asyncio
import gc

import pytest

from bot.schedule_jobs import SCHEDULER_TASK
from bot.server import create_app, public_protections


async def test_a_process_that_serves_until_exit_keeps_its_start_up_heap_out_of_the_collector(settings):
    gc.unfreeze()
    try:
        async with (app := create_app(settings)).router.lifespan_context(app):
            assert gc.get_freeze_count() == 0  # tests and embedders build apps freely: nothing frozen
        async with (app := create_app(settings, freeze_heap=True)).router.lifespan_context(app):
            frozen = gc.get_freeze_count()
            # The imports and the core: a full collection now walks only what came after start-up.
            assert frozen > 100_000
            assert len(gc.get_objects()) < frozen / 10
            assert app.state.datathread.ready
    finally:
        gc.unfreeze()


async def test_the_app_stops_cleanly_when_its_scheduler_loop_was_cancelled_first(settings):
    """At the event loop's close every task is cancelled, the scheduler loop included, before or while
    the app's shutdown runs: its cancellation ends the loop, not the shutdown (once an ERROR traceback)."""
    async with (app := create_app(settings)).router.lifespan_context(app):
        (loop,) = [t for t in asyncio.all_tasks() if t.get_name() == SCHEDULER_TASK]
        loop.cancel()
    assert loop.cancelled()


@pytest.mark.parametrize(
    ("detail", "public"),
    [
        ("on — a fresh root (pivot_root): ...; masked files: /srv/bot/.env", "on"),
        ("OFF — no filesystem isolation: a step can read and write whatever the bot's uid can", "OFF"),
        ("off — the worker container has network access", "OFF"),  # Modal's container row
        ("", "OFF"),  # a row with no state is not claimed to be on
    ],
)
def test_healthz_publishes_each_protections_state_without_its_details(detail, public):
    assert public_protections({"filesystem": detail}) == {"filesystem": public}
