"""Scheduled answers on Modal without a Modal account: the once-a-minute function is declared, and its
body (`tick_once`) claims due runs once and spawns plain job data that the turn container runs."""

from __future__ import annotations

import asyncio
import os
import pickle
from datetime import UTC, datetime

from pydantic import SecretStr

from bot.schedule_jobs import tick_once
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.sessions import open_store
from tests.fakes.anthropic_api import text
from tests.fakes.clock import Clock
from tests.fakes.slack_api import FakeSlackAPI


def test_the_cron_function_is_declared_every_minute_with_the_bot_secrets():
    os.environ.pop("DATATHREAD_MODAL_SECRETS", None)
    import deploy.modal_app as modal_app

    assert "schedules_tick" in modal_app.app._local_state.functions
    info = modal_app.schedules_tick.info()
    assert str(info.schedule) == "Period(minutes=1)"
    assert info.secrets == modal_app.web.info().secrets and info.timeout == 120


async def test_containers_with_the_loop_off_run_scheduled_jobs_but_do_not_tick(settings):
    from bot.server import create_app

    for loop_on in (True, False):
        app = create_app(settings.model_copy(update={"scheduler_loop": loop_on}))
        state = app.state.datathread
        async with app.router.lifespan_context(app):
            assert "schedule.run" in state.runner.handlers  # a turn container can run spawned runs
            loops = [t for t in asyncio.all_tasks() if t.get_name() == "datathread-scheduler"]
            assert bool(loops) is loop_on


async def test_tick_once_spawns_each_due_run_once_and_the_turn_container_posts_it(settings, fake_model):
    from deploy.turn_host import TurnHost

    api = FakeSlackAPI().start()
    slack = settings.model_copy(
        update={"slack_bot_token": SecretStr("xoxb-test-token-000000"), "slack_api_url": api.url}
    )
    clock = Clock(datetime(2031, 11, 24, 7, 59, tzinfo=UTC))
    store = await open_store(slack)
    try:
        book = ScheduleBook.from_settings(store, slack, clock=clock)
        s = new_schedule(
            cron="0 9 * * mon",
            tz="Europe/Berlin",
            surface="slack",
            channel="C5",
            question="flights?",
            now=clock(),
        )
        await book.add(s, trusted=True)
    finally:
        await store.close()
    spawned: list[dict] = []

    async def spawn(job: dict) -> None:  # stands in for TurnWorker().run.spawn.aio
        spawned.append(pickle.loads(pickle.dumps(job)))

    clock.advance(minutes=1)
    await tick_once(slack, spawn, clock=clock)
    await tick_once(slack, spawn, clock=clock)  # the next container's tick finds it claimed
    assert [job["kind"] for job in spawned] == ["schedule.run"]
    assert spawned[0]["payload"]["schedule_id"] == s.id

    fake_model.enqueue(text("336,776 flights."))
    host = TurnHost(slack, require_redis=False)
    await host.start()
    try:
        await host.run(spawned[0])
        posted = len(api.calls)
        await host.run(spawned[0])  # Modal gives the run again (its container stopped): not run twice
        assert len(api.calls) == posted and len(fake_model.requests) == 1
    finally:
        await host.stop()
        api.stop()
    assert api.of("chat.postMessage")[0].args["channel"] == "C5"
    assert "336,776" in "".join(c.args.get("markdown_text", "") for c in api.of("chat.appendStream"))
