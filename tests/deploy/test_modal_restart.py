"""A job Modal gives the turn container a second time — its container stopped under it (a pre-emption,
a redeploy's drain) and Modal restarts the input — is not run again: it may have posted part of an
answer, and a mention's events are claimed already, so the second run ended silently with the stream
left open. Its thread hears once that the answer stopped. Real web and turn apps, real store and turn;
the fake Slack Web API and the scripted model at the network boundary."""

from __future__ import annotations

import asyncio
import json
import pickle

from pydantic import SecretStr

from core.analyst_front import front_analyst
from core.runner_modal import JOB_ID, ModalRunner
from tests.bot.slack_harness import SECRET, event_body, mention, sign
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import FakeSlackAPI

SLOW_STEP = "import time\ntime.sleep(60)"


async def spawned_mentions(settings, *questions: str) -> list[dict]:
    """The jobs the web container spawns for signed mentions (each in a thread of its own)."""
    import httpx

    from bot.server import create_app

    spawned: list[dict] = []

    async def spawn(job: dict) -> None:  # stands in for TurnWorker().run.spawn.aio (pickled like Modal)
        spawned.append(pickle.loads(pickle.dumps(job)))

    web = create_app(settings, runner=ModalRunner(spawn), analyst=await front_analyst(settings))
    transport = httpx.ASGITransport(app=web)
    async with (
        web.router.lifespan_context(web),
        httpx.AsyncClient(transport=transport, base_url="http://w") as http,
    ):
        for i, question in enumerate(questions):
            body = json.dumps(event_body(mention(question, ts=f"1700000000.00010{i}")))
            headers = {"content-type": "application/json", **sign(body)}
            assert (await http.post("/slack/events", content=body, headers=headers)).status_code == 200
    assert len({job[JOB_ID] for job in spawned}) == len(questions)  # each spawn has an id of its own
    return spawned


def stopped_notices(api: FakeSlackAPI) -> int:
    return sum("I stopped before finishing" in shown for shown in api.shown())


async def test_a_job_given_again_is_not_run_again_and_its_thread_is_told_once(settings, fake_model):
    from deploy.turn_host import TurnHost

    api = FakeSlackAPI().start()
    slack = settings.model_copy(
        update={
            "slack_bot_token": SecretStr("xoxb-test-token-000000"),
            "slack_signing_secret": SecretStr(SECRET),
            "slack_api_url": api.url,
        }
    )
    host = TurnHost(slack, require_redis=False)
    try:
        cut_short, died, answered = await spawned_mentions(slack, "slow one?", "lost one?", "quick one?")
        await host.start()
        threads = host.app.state.datathread.threads

        # 1. The container is stopped mid-turn: the turn is cancelled and says so itself; Modal gives
        #    the input again, which neither runs the turn again nor says it a second time.
        fake_model.enqueue(tool("run_python", {"code": SLOW_STEP}))
        first = asyncio.create_task(host.run(cut_short))
        while not fake_model.requests:  # the turn has begun
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        calls = len(fake_model.requests)
        told = len(api.shown())
        assert told and calls == 1
        await host.run(cut_short)
        assert len(fake_model.requests) == calls and len(api.shown()) == told

        # 2. The container died without a word (its input was taken, nothing noted): given again, the
        #    job is not run; its thread hears that the answer stopped, once.
        assert await threads.claim(f"modal-job:{died[JOB_ID]}", ttl_s=60)
        await host.run(died)
        await host.run(died)
        assert len(fake_model.requests) == calls and stopped_notices(api) == 1

        # 3. A job given once runs as ever.
        fake_model.enqueue(text("Here it is."))
        await host.run(answered)
        assert len(fake_model.requests) == calls + 1 and "Here it is." in "\n".join(api.shown())
    finally:
        await host.stop()
        api.stop()
