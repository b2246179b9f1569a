"""Redis going away under `serve` (`REDIS_URL` set): `/healthz` says the store is unreachable (503), an
@-mention still gets Slack's ack and the thread hears in one sentence why no answer comes, the turn
workers wait quietly (one log line per outage, no crash, no restart) and take jobs again once Redis is
back. A real redis-server per test, killed and restarted on the same port."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import time

import pytest

from bot import slack_client
from bot.slack_jobs import STORE_UNREACHABLE
from bot.teams_jobs import STORE_UNREACHABLE as TEAMS_STORE_UNREACHABLE
from core.release import release_id
from core.runner_redis import PUT_DEADLINE_S
from tests.bot.slack_harness import mention, said, serve, until
from tests.bot.teams_harness import serve_teams
from tests.fakes.anthropic_api import text
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import RedisServer
from tests.fakes.slack_api import TEAM_ID


@pytest.fixture
def redis_server():
    server = RedisServer().start()
    yield server
    server.stop()


def log_text(settings) -> str:
    path = settings.home / "logs" / "datathread.log"
    return path.read_text() if path.exists() else ""


async def healthz_status(harness) -> int:
    return (await harness.http.get("/healthz")).status_code


async def test_healthz_reports_an_unreachable_store_quickly_and_keeps_its_fields(settings, api, redis_server):
    on_redis = settings.model_copy(update={"redis_url": redis_server.url})
    async with serve(on_redis, api) as app:
        healthy = await app.http.get("/healthz")
        assert healthy.status_code == 200
        assert (
            healthy.json()["ok"] is True and healthy.json()["store"] == "ok" and "sandbox" in healthy.json()
        )
        redis_server.kill()
        started = asyncio.get_running_loop().time()
        down = await app.http.get("/healthz")
        assert asyncio.get_running_loop().time() - started < 2.5  # bounded: a probe never hangs
        assert down.status_code == 503
        assert down.json()["ok"] is False and down.json()["store"] == "unreachable"
        assert set(down.json()) == {"ok", "sandbox", "store", "release"}
        assert down.json()["release"] == healthy.json()["release"] == release_id()  # which replica runs what
        assert "127.0.0.1" not in down.text  # the sentence with the host stays in the log
        redis_server.start()
        assert await healthz_status(app) == 200


async def test_a_mention_while_redis_is_down_is_acked_and_told_in_its_thread(
    settings, api, redis_server, caplog
):
    """In-process turns (`turn_workers=0`): the job's de-dup claim finds Redis gone."""
    on_redis = settings.model_copy(update={"redis_url": redis_server.url})
    async with serve(on_redis, api) as app:
        redis_server.kill()
        with caplog.at_level(logging.WARNING):
            resp = await app.event(mention("how many flights?", ts="1700000400.000100"))
            assert resp.status_code == 200
            await until(lambda: said(api, STORE_UNREACHABLE) > 0, timeout=30)
        (told,) = [c for c in api.of("chat.postMessage") if STORE_UNREACHABLE in str(c.args)]
        assert told.args["thread_ts"] == "1700000400.000100"  # in the thread of the mention
        assert not [r for r in caplog.records if r.exc_info]  # a sentence, not a traceback
        assert any("is not reachable" in r.getMessage() for r in caplog.records)
        redis_server.start()


async def test_a_slash_command_while_redis_is_down_is_told_to_the_asker_where_the_bot_is_no_member(
    settings, api, redis_server
):
    """chat.postEphemeral needs the bot in the channel; a slash command works anywhere, so the asker
    hears through the command's response_url (the old code's ephemeral failed: no answer at all)."""
    api.fail_methods.update({"chat.postEphemeral": "not_in_channel", "chat.postMessage": "not_in_channel"})
    on_redis = settings.model_copy(update={"redis_url": redis_server.url})
    async with serve(on_redis, api) as app:
        redis_server.kill()
        resp = await app.command("how many flights?", channel="C0NOTMEMBER")
        assert resp.status_code == 200

        def told() -> list:
            return [c for c in api.calls if c.method.startswith("/response/") and c.args.get("text")]

        await until(lambda: told(), timeout=30)
        assert told()[0].args["text"] == STORE_UNREACHABLE
        assert told()[0].args["response_type"] == "ephemeral"
        redis_server.start()


async def test_a_store_failing_mid_turn_shows_the_thread_the_error_id_of_the_line_with_its_reason(
    settings, api, fake_model, redis_server, caplog
):
    """The thread is not told where the store lives, the log is: on the line with the error id the
    thread shows, so an operator finds the reason from a screenshot (it was on an ERROR line of its
    own, without the id)."""

    def die_then_answer(body: dict) -> dict:
        redis_server.kill()  # the store goes away while the model writes: the history cannot be saved
        return text("There were 336,776 flights.")

    fake_model.enqueue(die_then_answer)
    async with serve(settings.model_copy(update={"redis_url": redis_server.url}), api) as app:
        with caplog.at_level(logging.INFO):
            await app.event(mention("how many flights?", ts="1700000450.000100"))
            await until(lambda: said(api, "error id") > 0, timeout=30)
        (shown,) = [m for m in api.shown() if "error id" in m]
        assert "session store" in shown and "127.0.0.1" not in shown
        assert "this answer was not saved" in shown and "Nothing was changed" not in shown  # it had run
        (error_id,) = re.findall(r"error id `([0-9a-f]{8})`", shown)
        reason = f"Redis at 127.0.0.1:{redis_server.port}"
        told = [r.getMessage() for r in caplog.records if reason in r.getMessage()]
        assert told and all(f"error_id={error_id}" in line for line in told), told
        redis_server.start()


@pytest.mark.parametrize(
    "n, streaming, answer",
    [
        (0, True, "There were 336,776 flights."),
        (1, False, "There were 336,776 flights."),
        (2, True, "336,776."),  # one word: nothing of it streams before the end
    ],
)
async def test_a_redis_that_freezes_as_the_answer_ends_holds_the_thread_seconds_and_says_so_honestly(
    settings, api, fake_model, redis_server, n, streaming, answer
):
    """SIGSTOP while the model writes (a long fork, a failover pause): the stream stood still mid-answer
    for 21 s and ended at 40 s with "this answer was not saved" — false, the thawed Redis kept it. Now
    the thread hears within the turn's end deadline that the answer may not be kept for follow-ups,
    under the answer's own words. Without streaming (free workspaces, private answers) the sentence
    replaced the answer, which was never shown."""
    api.refuse_streaming = not streaming
    answered: list[float] = []

    def freeze_then_answer(body: dict) -> dict:
        redis_server.proc.send_signal(signal.SIGSTOP)
        answered.append(time.monotonic())
        return text(answer)

    fake_model.enqueue(freeze_then_answer)
    async with serve(settings.model_copy(update={"redis_url": redis_server.url}), api) as app:
        try:
            await app.event(mention("how many flights?", ts=f"170000070{n}.000100"))
            await until(lambda: said(api, "error id") > 0, timeout=30)
            told = time.monotonic() - answered[0]
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)
        (shown,) = [m for m in api.shown() if "error id" in m]
        assert answer in shown  # the words given stay above the sentence
        assert "may not be kept for follow-ups" in shown and "not saved" not in shown, shown
        assert told < 3 + 2, f"the thread was told {told:.1f} s after the answer"


@pytest.mark.parametrize("answer", ["http_500", "never"])
async def test_a_response_url_that_fails_the_outage_notice_is_a_log_line_within_its_bound(
    settings, api, redis_server, caplog, monkeypatch, answer
):
    """The notice's POST was never checked: a response_url answering 500 lost it without a word, one
    that took the connection and never answered held the job for aiohttp's 5-minute default."""
    monkeypatch.setattr(slack_client, "RESPONSE_URL_TIMEOUT_S", 1.0)  # 10 s in production
    hole = BlackHole().start()
    api.http_errors["/response/broken"] = 500
    url = {"http_500": api.url.removesuffix("api/") + "response/broken", "never": f"{hole.url}/commands/1"}
    fields = {"command": "/ask", "text": "how many?", "team_id": TEAM_ID, "channel_id": "C0001"}
    fields |= {"user_id": "U0001", "response_url": url[answer], "trigger_id": "t.1"}
    try:
        async with serve(settings.model_copy(update={"redis_url": redis_server.url}), api) as app:
            redis_server.kill()
            with caplog.at_level(logging.WARNING):
                started = asyncio.get_running_loop().time()
                assert (await app.form(fields)).status_code == 200

                def lines() -> list[str]:
                    return [r.getMessage() for r in caplog.records if "response_url" in r.getMessage()]

                await until(lambda: lines(), timeout=15)
                took = asyncio.get_running_loop().time() - started
            why = {"http_500": "answered HTTP 500 internal_error", "never": "did not answer within 1 s"}
            assert lines() == [
                "The store-outage notice for U0001 in C0001 did not reach the person through the "
                f"command's response_url: 127.0.0.1 {why[answer]}"
            ]
            assert took < 10, f"the notice's failure took {took:.1f} s to tell"
            assert not [r for r in caplog.records if r.exc_info]  # a line, not a traceback
            assert (await app.http.get("/healthz")).status_code == 503  # still serving
            redis_server.start()
    finally:
        hole.stop()


async def test_turn_workers_ride_out_a_redis_outage_and_take_jobs_again(
    settings, api, fake_model, redis_server, caplog
):
    on_redis = settings.model_copy(update={"turn_workers": 1, "redis_url": redis_server.url, "lock_ttl": 2.0})
    async with serve(on_redis, api) as app:
        workers = app.state.runner.pids()
        redis_server.kill()
        with caplog.at_level(logging.WARNING):
            resp = await app.event(mention("how many flights?", ts="1700000500.000100"))
            assert resp.status_code == 200  # Slack got its ack: no retry storm, no 500
            await until(lambda: said(api, STORE_UNREACHABLE) > 0, timeout=30)
        assert not [r for r in caplog.records if r.exc_info]
        await asyncio.sleep(2.5)  # the worker's loop meets the outage several times over (0.5, 1.5 s)
        assert app.state.runner.pids() == workers  # no crash, no restart
        during = log_text(settings)
        assert "Traceback" not in during
        assert during.count("(turn jobs) is not reachable") == 1  # one line for the outage

        redis_server.start()  # empty (no persistence): the worker makes the streams and group again
        fake_model.enqueue(text("Back in business."))
        await app.event(mention("and now?", ts="1700000501.000100"))
        await until(lambda: said(api, "Back in business.") > 0, timeout=60)
        assert app.state.runner.pids() == workers
        after = log_text(settings)
        assert "(turn jobs) is reachable again" in after and "Traceback" not in after


async def test_a_teams_message_while_redis_is_down_is_acked_and_told_in_its_conversation(
    settings, redis_server
):
    """The Teams de-dup claim runs inside the ack: with Redis gone it was a 500 (and the Bot Connector
    retried); now the activity is accepted and the conversation hears why no answer comes."""
    async with serve_teams(settings.model_copy(update={"redis_url": redis_server.url})) as teams:
        redis_server.kill()
        sent = await teams.say("how many flights?")  # asserts the 202 within 2 s
        assert any(m.get("text") == TEAMS_STORE_UNREACHABLE for m in sent), sent
        redis_server.start()


async def test_a_redis_that_takes_the_job_and_never_answers_does_not_hold_the_ack(
    settings, api, redis_server
):
    """A stopped (SIGSTOP: the kernel still accepts connections) or black-holed Redis held the job's
    queueing, inside Slack's 3 s ack, for ever; now it is cut at its deadline and the thread told."""
    on_redis = settings.model_copy(update={"turn_workers": 1, "redis_url": redis_server.url})
    async with serve(on_redis, api) as app:
        redis_server.proc.send_signal(signal.SIGSTOP)
        try:
            started = asyncio.get_running_loop().time()
            resp = await app.event(mention("how many flights?", ts="1700000600.000100"))
            acked = asyncio.get_running_loop().time() - started
            assert resp.status_code == 200 and acked < PUT_DEADLINE_S + 1.5, f"the ack took {acked:.1f} s"
            await until(lambda: said(api, STORE_UNREACHABLE) > 0, timeout=30)
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)


def connections_to(port: int) -> int:
    """Open TCP connections from this host to 127.0.0.1:`port` (the client ends, from the kernel)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                _, _, remote, state = row.split()[:4]
                if int(remote.rsplit(":", 1)[1], 16) == port and state == "01":  # ESTABLISHED
                    count += 1
    return count


async def test_a_burst_of_health_probes_against_a_stalled_store_shares_one_check(settings, api, redis_server):
    """A load balancer (or several) probing a replica whose Redis accepts and never answers: each
    probe says unreachable within its bound, and the burst makes one store call, not one each (each
    held a connection — with SQLite, a thread — until the store answered)."""
    on_redis = settings.model_copy(update={"redis_url": redis_server.url})
    async with serve(on_redis, api) as app:
        assert await healthz_status(app) == 200
        before = connections_to(redis_server.port)
        redis_server.proc.send_signal(signal.SIGSTOP)  # the kernel still accepts its connections
        try:
            started = asyncio.get_running_loop().time()
            burst = asyncio.gather(*(healthz_status(app) for _ in range(12)))
            await asyncio.sleep(0.5)  # the probes wait on the store (bound: 1 s)
            during = connections_to(redis_server.port)
            statuses = await burst
            took = asyncio.get_running_loop().time() - started
        finally:
            redis_server.proc.send_signal(signal.SIGCONT)
        assert statuses == [503] * 12
        assert took < 2.5, f"the burst took {took:.1f} s"
        assert during - before <= 1, (before, during)
        assert await healthz_status(app) == 200


async def test_serve_stops_while_its_redis_takes_connections_and_never_answers(settings, api, redis_server):
    """A Redis that stopped answering (SIGSTOP: the kernel still accepts) held `serve`'s stop for ever,
    a second Ctrl-C included: the turn worker waited in its job queue's read, and the web process, once
    it had killed the worker, in taking over the worker's jobs. Every such wait is bounded now."""
    on_redis = settings.model_copy(update={"turn_workers": 1, "redis_url": redis_server.url})
    serving = serve(on_redis, api)
    await serving.__aenter__()
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(serving.__aexit__(None, None, None), 45)
        assert asyncio.get_running_loop().time() - started < 25  # (about 2 s here: the worker stops its read)
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
