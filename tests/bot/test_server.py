"""The serve app's own lifecycle (bot/server.py); what its routes do is tested per surface."""

from __future__ import annotations

import gc

from bot.server import create_app


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
