"""A Slack Web API that is slow, silent or unreachable, as an operator meets it: every call is bounded
(`bot/slack_client.py`), decoration (the asker's time zone, "is thinking…", progress) gives up first
and the turn goes on, and a lost answer or post is one log line saying what was lost and why — never
a traceback, never a turn held for aiohttp's 5-minute default.

The real app under uvicorn with signed requests, the real slack_sdk client, and the real `schedule
run-now` command; the fakes are the network: the fake Slack Web API with methods that never answer
(`silent`) or close the connection unanswered (`dropped`), and a black hole. The bounds are shortened
through the module's constants (10 s and 5 s in production)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from pydantic import SecretStr

from bot import slack_client, slack_identity
from tests.bot.slack_harness import mention, serve, until
from tests.fakes.anthropic_api import text
from tests.fakes.black_hole import BlackHole
from tests.fakes.cli import invoke
from tests.fakes.slack_api import FakeSlackAPI

SEND_S, PROGRESS_S = 1.0, 0.5


@pytest.fixture
def short_bounds(monkeypatch):
    monkeypatch.setattr(slack_client, "SEND_TIMEOUT_S", SEND_S, raising=False)
    monkeypatch.setattr(slack_client, "PROGRESS_TIMEOUT_S", PROGRESS_S, raising=False)
    monkeypatch.setattr(slack_client, "CONNECT_TIMEOUT_S", SEND_S, raising=False)


def lines(caplog, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if needle in r.getMessage()]


@pytest.mark.parametrize("fails", ["dropped", "silent", "refused"])
async def test_a_time_zone_lookup_that_fails_does_not_drop_the_question(
    settings, api, fake_model, caplog, short_bounds, monkeypatch, fails
):
    """`users.info` closing its connection unanswered killed the turn (`job slack.message failed` and an
    80-line traceback, nobody answered); one that never answered held it 300 s. The time zone is
    decoration: one log line, the default applies, the question is answered."""
    if fails == "dropped":  # slack_sdk tries a dropped connection again after 0.5-1.5 s: let it
        api.dropped["users.info"] = 0
        monkeypatch.setattr(slack_client, "PROGRESS_TIMEOUT_S", 3.0, raising=False)
        monkeypatch.setattr(slack_client, "SEND_TIMEOUT_S", 3.0, raising=False)
    elif fails == "silent":
        api.silent.add("users.info")
    else:  # Slack's refusal: its code, not the SDK's two lines with the API's URL and the whole reply
        api.fail_methods["users.info"] = "user_not_visible"
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, api) as slack:
        with caplog.at_level(logging.INFO):
            started = time.monotonic()
            assert (
                await slack.event(mention("how many flights?", ts="1700000001.000100"))
            ).status_code == 200
            await until(lambda: any("336,776" in shown for shown in api.shown()), timeout=30)
            took = time.monotonic() - started
    assert api.of("users.info"), api.methods()
    why = {
        "dropped": "could not reach Slack at 127.0.0.1: ServerDisconnectedError",
        "silent": f"did not answer users.info within {PROGRESS_S:g} s",
        "refused": "failed (the default time zone applies): user_not_visible",
    }
    told = lines(caplog, "users.info for U0001 failed")
    assert len(told) == 1 and why[fails] in told[0] and "default time zone" in told[0], told
    assert "\n" not in told[0] and "/api/" not in told[0], told
    assert not [r for r in caplog.records if r.exc_info]  # a line, not a traceback
    assert took < 15, f"the answer took {took:.1f} s"


async def test_a_silent_slack_costs_a_turn_seconds_and_one_line_for_its_lost_answer(
    settings, api, fake_model, caplog, short_bounds
):
    """Slack takes the connection and never answers a post: the turn waited aiohttp's 300 s on the
    first one (holding the thread's session lock). Now progress gives up after PROGRESS_TIMEOUT_S,
    once, and the answer after SEND_TIMEOUT_S — one line each, saying what was lost and why."""
    api.silent |= {"assistant.threads.setStatus", "chat.startStream", "chat.postMessage"}
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, api) as slack:
        with caplog.at_level(logging.INFO):
            started = time.monotonic()
            assert (
                await slack.event(mention("how many flights?", ts="1700000002.000100"))
            ).status_code == 200
            await until(lambda: lines(caplog, "did not reach Slack"), timeout=30)
            took = time.monotonic() - started
            await slack.drain()
    assert fake_model.requests, "the turn ran"
    assert lines(caplog, "no more progress updates") == [
        "slack: no more progress updates this turn in C0001 (thread 1700000002.000100): "
        f"Slack at 127.0.0.1 did not answer assistant.threads.setStatus within {PROGRESS_S:g} s"
    ]
    [lost] = lines(caplog, "did not reach Slack")
    assert lost.startswith("slack: the answer for U0001 in C0001 (thread 1700000002.000100, turn "), lost
    assert lost.endswith(
        f"did not reach Slack: Slack at 127.0.0.1 did not answer chat.postMessage within {SEND_S:g} s"
    )
    assert not [r for r in caplog.records if r.exc_info]
    assert took < 15, f"the lost answer took {took:.1f} s to tell"


async def test_a_stream_slack_stops_answering_is_ended_and_the_answer_comes_as_a_message(
    settings, api, fake_model, caplog, short_bounds
):
    """chat.appendStream taken and never answered (the streaming side of a Slack incident) while
    chat.postMessage works: the stream stayed open, "typing…" over its first words for good, and the
    answer sent into it was lost with a log line. Now the stream is ended with a note and the answer
    comes below it as a message."""
    api.silent.add("chat.appendStream")
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, api) as slack:
        with caplog.at_level(logging.INFO):
            await slack.event(mention("how many flights?", ts="1700000003.000100"))
            await until(
                lambda: [c for c in api.of("chat.postMessage") if "336,776" in str(c.args)], timeout=30
            )
            await slack.drain()
    streams = {c.args["ts"] for c in api.of("chat.appendStream")}
    [ended] = api.of("chat.stopStream")
    assert {ended.args["ts"]} == streams and "the answer follows below" in ended.args["markdown_text"]
    assert not lines(caplog, "did not reach Slack") and not [r for r in caplog.records if r.exc_info]


def test_run_now_against_a_silent_slack_ends_in_one_sentence(home, fake_model, short_bounds):
    """`schedule run-now` with a Web API that took the connection and never answered: silent 300 s,
    then a CancelledError→TimeoutError traceback ("run … crashed"), then the same again for the retry
    and each notice. Now: each header waits SEND_TIMEOUT_S, the notices are not tried against a Slack
    that just did not answer, one sentence and exit 1, and the log has lines, not tracebacks."""
    hole = BlackHole().start()
    sid = invoke(
        ["schedule", "add", "--cron", "0 9 * * mon", "--surface", "slack", "--channel", "C777", "how many?"],
        home,
    ).stdout.strip()
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "SLACK_BOT_TOKEN": "xoxb-1-2-x",
        "DATATHREAD_SLACK_API_URL": f"{hole.url}/api/",
    }
    done: list = []
    runner = threading.Thread(target=lambda: done.append(invoke(["schedule", "run-now", sid], home, env=env)))
    started = time.monotonic()
    runner.start()
    try:
        runner.join(timeout=60)
        took = time.monotonic() - started
    finally:
        hole.stop()  # an old client still waiting is let go: its connection closes
        runner.join(timeout=30)
    assert done and took < 60, f"run-now still running after {took:.0f} s"
    result = done[0]
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"error: The run failed: Slack at 127.0.0.1 did not answer chat.postMessage within {SEND_S:g} s.\n"
    )
    log = (home / "logs" / "datathread.log").read_text()
    assert "Traceback" not in log, log
    # the run and its retry, a line each, and the run's outcome (docs/SCHEDULES.md: a failure is a line)
    assert log.count(f"schedule {sid}: run s{sid}-") == 3, log
    assert log.count("not posted in C777: Slack at 127.0.0.1 did not answer") == 2, log
    assert "could not post a notice: not tried: Slack at 127.0.0.1 did not answer" in log, log
    assert not fake_model.requests  # no header, no turn


async def test_the_token_check_is_bounded_as_a_whole_not_per_attempt(settings, api, monkeypatch):
    """slack_sdk's timeout is each attempt's, and it tries a dropped connection once more: auth.test
    closing its connection unanswered after 0.9 s took 0.9 s, a pause, and 0.9 s again under a 1 s
    bound (`serve` was silent 12.5 s at start against a Slack that never answered, "10 s at most")."""
    monkeypatch.setattr(slack_identity, "TOKEN_CHECK_TIMEOUT_S", 1.0)
    api.dropped["auth.test"] = 0.9
    checked = settings.model_copy(update={"slack_api_url": api.url, "slack_bot_token": SecretStr("xoxb-any")})
    said: list[str] = []
    started = time.monotonic()
    assert await slack_identity.bot_token_problem(checked, said.append) is None
    took = time.monotonic() - started
    assert said[0] == "Slack: checking SLACK_BOT_TOKEN…", said  # first: the check may take its bound
    assert len(said) == 2 and "TimeoutError" in said[1] and said[1].endswith("Serving anyway."), said
    assert took < 1.8, f"the check took {took:.1f} s under a 1 s bound"


@pytest.mark.parametrize("fails", ["refused", "silent"])
async def test_telling_a_thread_its_answer_stopped_is_one_line_when_slack_fails_that_too(
    settings, api, caplog, short_bounds, fails
):
    """The worker running a turn died, and Slack refused (or never answered) the "I stopped" message as
    well: the runner logged `could not tell a slack.turn job's thread that it stopped` with a traceback."""
    from bot.slack_jobs import tell_stopped

    if fails == "refused":
        api.fail_methods["chat.postMessage"] = "channel_not_found"
    else:
        api.silent.add("chat.postMessage")
    configured = settings.model_copy(
        update={"slack_bot_token": SecretStr("xoxb-test"), "slack_api_url": api.url}
    )
    client = slack_client.build_client(configured, slack_client.bounded_session())
    lost = {"channel": "C1", "user": "U1", "thread_ts": "1700000001.000100"}
    try:
        with caplog.at_level(logging.WARNING):
            await tell_stopped(None, client, lost)  # raised before: the runner's traceback
    finally:
        await client.session.close()
    said = lines(caplog, "that the answer stopped")
    assert len(said) == 1 and said[0].startswith("slack: could not tell U1 in C1"), said


class HoleUploads(FakeSlackAPI):
    """files.getUploadURLExternal hands out an upload URL that takes the connection and never answers."""

    def __init__(self, hole: BlackHole):
        super().__init__()
        self.hole = hole

    def respond(self, method: str, args: dict) -> dict:
        if method == "files.getUploadURLExternal":
            return {"ok": True, "file_id": "F0HOLE", "upload_url": f"{self.hole.url}/upload/F0HOLE"}
        return super().respond(method, args)


async def test_an_upload_nobody_answers_says_the_bound_that_gave_up(settings, short_bounds):
    """The shared session's read timeout (SEND_TIMEOUT_S) fires first; the failure said the upload's
    whole bound (three calls' worth: "within 30 s" in production where 10 s had passed)."""
    hole = BlackHole().start()
    api = HoleUploads(hole).start()
    client = slack_client.build_client(
        settings.model_copy(update={"slack_bot_token": SecretStr("xoxb-t"), "slack_api_url": api.url}),
        slack_client.bounded_session(),
    )
    try:
        started = time.monotonic()
        with pytest.raises(slack_client.SlackCallFailed) as failed:
            await client.files_upload_v2(channel="C0001", content="a,b\n1,2\n", filename="x.csv")
        took = time.monotonic() - started
    finally:
        await client.session.close()
        api.stop()
        hole.stop()
    assert str(failed.value) == f"Slack at 127.0.0.1 did not answer a file's upload within {SEND_S:g} s"
    assert took < 3 * SEND_S
