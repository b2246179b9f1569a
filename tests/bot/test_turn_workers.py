"""Turns in worker processes (`core/runner_workers.py`, `bot/turn_worker.py`): real worker processes
with their own fork servers, the web app served in this loop, the fake Slack Web API and the scripted
model on loopback. With Redis (two replicas sharing the jobs): tests/bot/test_turn_workers_redis.py."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import re
import signal
import threading
import time

import pytest

from bot.server import create_app
from bot.slack_jobs import STOPPED
from tests.bot.slack_harness import mention, said, serve, until
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

pytestmark = pytest.mark.own_sandbox  # the workers start their own fork servers anyway


async def test_a_turn_submitted_in_the_web_process_runs_in_a_worker(settings, api, fake_model):
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 42 AS answer", "save_as": "answer"}), text("It is 42.")
    )
    async with serve(settings.model_copy(update={"turn_workers": 1}), api) as slack:
        workers = slack.state.runner
        (pid,) = workers.pids()
        assert pid != os.getpid()
        assert slack.state.analyst.protections() == {}  # no fork server in the web process
        health = (await slack.http.get("/healthz")).json()
        assert health["ok"] and health["sandbox"]  # the workers' sandbox, as they reported it

        resp = await slack.event(mention("what is the answer?", ts="1700000001.000100"))
        assert resp.status_code == 200
        await until(lambda: said(api, "It is 42.") > 0)
        result = fake_model.last_tool_results(-1)[0]
        assert not result.get("is_error") and "Saved 1 row " in result["content"]  # the step ran there
        assert api.of("chat.startStream")[0].args["thread_ts"] == "1700000001.000100"  # the question's thread
        await workers.drain(timeout=30)  # waits for the jobs, not for the workers to end
        assert workers.pids() == [pid]


def record_roots(api: FakeSlackAPI) -> dict[str, str]:
    """text → ts of every chat.postMessage the fake Slack answers from now on."""
    roots: dict[str, str] = {}
    respond = api.respond

    def recording(method: str, args: dict) -> dict:
        out = respond(method, args)
        if method == "chat.postMessage":
            roots[str(args.get("text"))] = out["ts"]
        return out

    api.respond = recording
    return roots


async def test_a_worker_killed_mid_turn_leaves_a_message_and_the_thread_works(settings, api, fake_model):
    settings = settings.model_copy(update={"turn_workers": 1, "lock_ttl": 2.0})
    async with serve(settings, api) as slack:
        workers = slack.state.runner
        (victim,) = workers.pids()

        def kill_the_worker(body: dict) -> dict:
            # Once both turns (a mention and an /ask) are waiting for the model, the worker dies holding
            # both, and the thread's lock.
            deadline = time.monotonic() + 60
            while len(fake_model.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.5)
            return text("never delivered")

        fake_model.enqueue(kill_the_worker, kill_the_worker)
        roots = record_roots(api)
        await slack.command("second question")
        await slack.event(mention("first question", ts="1700000100.000100"))
        await until(lambda: said(api, STOPPED[:40]) >= 2)
        await asyncio.sleep(0.5)  # a third report would show by now
        # each where its answer would have gone — the mention's thread, and the thread under the /ask
        # question (not the channel's top level) — as the end of the answer's stream the dead worker
        # had started: that stream was left open ("is typing" for good) with the notice below it
        expected = ["1700000100.000100", roots["<@U0001> asked: second question"]]
        assert sorted(c.args["thread_ts"] for c in api.of("chat.startStream")) == sorted(expected)
        ended = {c.args["ts"]: c.args.get("markdown_text", "") for c in api.of("chat.stopStream")}
        for thread in expected:  # the fake keeps each stream as a message (no text) in its thread
            (stream,) = [
                m["ts"] for m in api.posted["C0001"] if m.get("thread_ts") == thread and not m["text"]
            ]
            assert STOPPED[:40] in ended.get(stream, ""), (thread, ended)
        notices = [c for c in api.of("chat.postMessage") if STOPPED[:40] in json.dumps(c.args)]
        assert notices == []  # not as a message below the open stream
        assert said(api, "never delivered") == 0
        await until(lambda: len(workers.pids()) == 1 and workers.pids() != [victim])

        fake_model.enqueue(text("Still here."))
        await slack.event(mention("still there?", ts="1700000101.000100", thread_ts="1700000100.000100"))
        await until(lambda: said(api, "Still here.") > 0)
        sent = json.dumps(fake_model.requests[-1]["messages"])
        assert "still there?" in sent and "never delivered" not in sent


async def test_a_worker_killed_right_after_posting_an_ask_question_leaves_one_root(settings, api):
    """The worker dies after Slack took the /ask question's root message but before it learnt the root's
    ts: the lost handler finds that root and answers under it, rather than posting the question again."""
    settings = settings.model_copy(update={"turn_workers": 1})
    async with serve(settings, api) as slack:
        workers = slack.state.runner
        (victim,) = workers.pids()
        respond, roots = api.respond, []

        def kill_once_posted(method: str, args: dict) -> dict:
            out = respond(method, args)
            if method == "chat.postMessage" and "asked: lost question" in str(args.get("text")):
                roots.append(out["ts"])
                with contextlib.suppress(ProcessLookupError):  # Slack has it; the worker never hears
                    os.kill(victim, signal.SIGKILL)
                time.sleep(0.5)
            return out

        api.respond = kill_once_posted
        await slack.command("lost question")
        await until(lambda: said(api, STOPPED[:40]) >= 1)
        await asyncio.sleep(0.5)  # a second root or report would show by now
        stopped = [c.args.get("thread_ts") for c in api.calls if STOPPED[:40] in json.dumps(c.args)]
        assert len(roots) == 1 and stopped == roots
        await until(lambda: len(workers.pids()) == 1 and workers.pids() != [victim])


def test_settings_reach_the_worker_unchanged(settings):
    from core.config import load_settings
    from core.runner_workers import settings_values

    copy = load_settings(_env_file=None, **settings_values(settings))
    assert copy == settings


async def test_teams_hears_when_the_worker_running_its_question_died(settings):
    """The Teams surface's lost handler: a question gets the sentence in its conversation, a card
    click (no text) gets nothing."""
    from bot.teams_jobs import STOPPED as TEAMS_STOPPED
    from core.runner import TurnJob
    from core.runner_worker import LOST, Worker, lost_job
    from tests.bot.teams_harness import THREAD, activity
    from tests.fakes.bot_connector import FakeConnector

    connector = FakeConnector().start()
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            runner = app.state.datathread.runner
            question = activity(connector.url, "how many flights?", conversation=THREAD)
            click = activity(connector.url, "", conversation=THREAD, value={"action": "show_sql"})
            for body in (question, click):
                lost = lost_job(TurnJob(kind="teams.turn", payload={"activity": body}))
                assert lost.kind == LOST and lost.quick
                await Worker(runner, io.BytesIO(), slots=1).run(lost)  # what a live worker does with it
            sent = connector.sent()
            assert len(sent) == 1 and re.fullmatch(
                re.escape(TEAMS_STOPPED) + r" \(error id `[0-9a-f]{8}`\)", sent[0]["text"]
            )
            assert sent[0]["conversation"]["id"] == THREAD
    finally:
        connector.stop()


async def test_a_lost_follow_up_in_a_thread_the_bot_is_not_part_of_stays_silent(settings, api, caplog):
    """Slack's lost-message handler: a plain message in a thread datathread never joined would have
    been ignored, so its lost job says nothing; a mention is told the answer stopped, in its thread,
    with an error id that the log line saying where it stopped carries too (that line named nothing:
    an operator could not find which thread, person or turn it was)."""
    from bot.slack_jobs import JOB_MESSAGE
    from core.runner import TurnJob
    from core.runner_worker import Worker, lost_job

    async with serve(settings, api) as slack:
        runner = slack.state.runner

        def message(ts: str, *, follow_up_only: bool) -> TurnJob:
            payload = {
                "team": "T1", "channel": "C1", "user": "U1", "text": "and by month?", "ts": ts,
                "thread_ts": "100.1", "event_id": f"Ev{ts}", "follow_up_only": follow_up_only,
            }  # fmt: skip
            return lost_job(TurnJob(kind=JOB_MESSAGE, payload=payload))

        before = len(api.of("chat.postMessage"))
        await Worker(runner, io.BytesIO(), slots=1).run(message("100.2", follow_up_only=True))
        assert len(api.of("chat.postMessage")) == before  # ignored thread: nothing said
        with caplog.at_level(logging.WARNING, logger="core.runner"):
            await Worker(runner, io.BytesIO(), slots=1).run(message("100.3", follow_up_only=False))
        posted = api.of("chat.postMessage")[before:]
        assert [c.args["thread_ts"] for c in posted] == ["100.1"]
        said = re.fullmatch(re.escape(STOPPED) + r" \(error id `([0-9a-f]{8})`\)", posted[0].args["text"])
        assert said, posted[0].args["text"]
        assert f"(team=T1 channel=C1 thread_ts=100.1 user=U1) error_id={said.group(1)}" in caplog.text


@pytest.mark.parametrize("workers", [1, 0], ids=["in a worker", "in the web process"])
async def test_a_turn_still_running_at_shutdown_is_told_in_its_thread(settings, api, fake_model, workers):
    """Stopping the server gives running turns `finish_s`; a turn still running then is cancelled and
    its thread hears that the answer stopped — once, never silence (it used to hear it twice: the
    turn's own sentence, then the runner's)."""
    from pydantic import SecretStr

    from bot.slack_jobs import JOB_TURN
    from core.runner import TurnJob
    from tests.bot.slack_harness import SECRET

    release = threading.Event()

    def slow(body: dict) -> dict:
        release.wait(60)
        return text("too late")

    fake_model.enqueue(slow)
    settings = settings.model_copy(
        update={
            "turn_workers": workers,
            "slack_bot_token": SecretStr("xoxb-test-token-000000"),
            "slack_signing_secret": SecretStr(SECRET),
            "slack_api_url": api.url,
        }
    )
    app = create_app(settings, finish_s=0.5)
    payload = {  # a workspace of the installation: the turn asks `auth.test` whose it is (bot/slack_access.py)
        "team": TEAM_ID,
        "channel": "C1",
        "user": "U1",
        "text": "slow one",
        "thread_ts": "1700000400.000100",
    }
    try:
        async with app.router.lifespan_context(app):
            await app.state.datathread.runner.submit(TurnJob(kind=JOB_TURN, payload=payload))
            await until(lambda: len(fake_model.requests) == 1)  # the turn is waiting for the model
    finally:
        release.set()
    from core.analyst import STOPPED as TURN_STOPPED  # what a stopped turn says as it ends

    # Once, never silence: the turn, cancelled, ends its own (streamed) message with the sentence; the
    # runner, seeing it did, does not post its "the process running it ended" note as well.
    assert said(api, TURN_STOPPED[:40]) == 1 and said(api, STOPPED[:40]) == 0
    streams = [c.args.get("thread_ts") for c in api.of("chat.startStream")]
    assert streams == ["1700000400.000100"]
    assert said(api, "too late") == 0
