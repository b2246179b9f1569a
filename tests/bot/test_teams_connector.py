"""A Bot Connector that is silent, slow or refusing, end to end: real activities POSTed to
`/api/messages` of the real app, the real botframework-connector client (msrest over `requests`)
posting to a black hole (`tests/fakes/black_hole.py`) or to the fake Bot Connector told to stall or
refuse. The bot's timeouts are shortened here (bot/teams_connector.py's module constants) so each
test takes seconds; what they guard is that a turn ends, its thread's lock is freed, the next
question answers, the app stops promptly, and the operator reads one line that says why.

Before: msrest's 100 s per call (400 s for a progress edit, urllib3 retrying a PUT three times), and
Retry-After slept in full."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from http.client import RemoteDisconnected

import pytest
import requests
from msrest.exceptions import ClientRequestError
from urllib3.exceptions import ProtocolError

from bot import teams_connector
from bot.server import create_app
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from tests.bot.teams_harness import THREAD, activity, serve_teams
from tests.fakes.anthropic_api import text, tool
from tests.fakes.black_hole import BlackHole
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.clock import Clock

PROGRESS_S, SEND_S = 0.5, 1.0
TWO_STEPS = [tool("run_sql", {"sql": "SELECT 42 AS n"}), tool("run_sql", {"sql": "SELECT 43 AS n"})]


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setattr(teams_connector, "CONNECT_TIMEOUT_S", PROGRESS_S)
    monkeypatch.setattr(teams_connector, "PROGRESS_TIMEOUT_S", PROGRESS_S)
    monkeypatch.setattr(teams_connector, "SEND_TIMEOUT_S", SEND_S)
    monkeypatch.setattr(teams_connector, "RETRY_AFTER_MAX_S", 2.0)


@pytest.fixture
def hole():
    black_hole = BlackHole().start()
    yield black_hole
    black_hole.stop()


def asked_nothing(settings):
    """People from outside the organization allowed, so a turn asks the Bot Connector nothing before
    it runs: asked who Ada is, a silent one refuses her as unconfirmed (fail closed,
    tests/bot/test_teams_outsiders.py), and these tests are about the turn's own calls."""
    return settings.model_copy(update={"allow_external_users": True})


def teams_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "datathread.teams"]


def tracebacks(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.exc_info and r.name.startswith(("datathread", "core"))
    ]


async def finished(teams, within: float) -> float:
    """Wait for every job; how long it took (fails past `within`: a hang, not a slow test)."""
    started = time.monotonic()
    await asyncio.wait_for(teams.state.runner.drain(), within)
    return time.monotonic() - started


async def test_a_service_url_that_never_answers_ends_the_turn_frees_the_thread_and_lets_the_app_stop(
    settings, fake_model, hole, caplog
):
    """The connection is taken and nothing comes back. Was: the typing indicator waited 100 s, then
    the job died with a traceback naming no conversation; stopping the app meanwhile took 40 s."""
    caplog.set_level(logging.INFO)
    async with serve_teams(asked_nothing(settings)) as teams:
        fake_model.enqueue(*TWO_STEPS, text("Forty-two."))
        assert (await teams.post(activity(hole.url, "how many flights?"))).status_code == 202
        took = await finished(teams, within=8)
        # typing, then the final send: each waited its timeout once; progress stopped after the first
        assert took < PROGRESS_S + SEND_S + 3, took
        assert len(fake_model.requests) == 3  # the turn ran: its answer is in the thread's history
        lines = teams_lines(caplog)
        assert sum("no more progress updates" in line for line in lines) == 1, lines
        [lost] = [line for line in lines if "answer did not reach" in line]
        assert f"conversation={THREAD}" in lost and "error_id=" in lost
        assert lost.endswith(f"the Bot Connector at 127.0.0.1 did not answer within {SEND_S:g} s")
        assert not tracebacks(caplog)
        # the thread's lock is free: the next question, through a working Bot Connector, answers
        fake_model.enqueue(text("Forty-three."))
        sent = await asyncio.wait_for(teams.say("and now?"), 10)
        assert sent[-1]["text"] == "Forty-three."
        assert "how many flights?" in str(fake_model.requests[-1]["messages"])  # the first turn was kept
        # stopping while a turn talks to the black hole does not wait for it
        fake_model.enqueue(text("Never seen."))
        await teams.post(activity(hole.url, "one more?"))
        await asyncio.sleep(0.1)
        stopping = time.monotonic()
    assert time.monotonic() - stopping < PROGRESS_S + SEND_S + 3


@pytest.mark.parametrize(
    "stop_after_s,told",
    [
        pytest.param(0.1, "a reply did not reach conversation", id="before-the-turn"),  # run_lost
        pytest.param(PROGRESS_S + 0.5, "the answer did not reach", id="while-the-model-writes"),
    ],
)
async def test_stopping_now_tells_a_silent_conversation_within_the_short_timeout(
    settings, fake_model, hole, caplog, stop_after_s, told
):
    """A second Ctrl-C stops answers now, and each thread is told so within the runner's 10 s (the
    turn's own "stopped" sentence, or `run_lost`'s for a turn not yet begun). That sentence waits the
    short timeout: a silent Bot Connector neither takes those 10 s nor leaves a thread in the pool that
    the process's exit then waits for (it did: 52 s after a double Ctrl-C under `datathread serve`)."""
    caplog.set_level(logging.INFO)
    async with serve_teams(asked_nothing(settings)) as teams:
        fake_model.enqueue(lambda body: time.sleep(2) or text("Too late."))  # still being written
        await teams.post(activity(hole.url, "how many flights?"))
        await asyncio.sleep(stop_after_s)
        teams.state.runner.hurry()
        stopping = time.monotonic()
    assert time.monotonic() - stopping < PROGRESS_S + 1.5
    [line] = [line for line in teams_lines(caplog) if told in line]
    assert THREAD in line and line.endswith(f"did not answer within {PROGRESS_S:g} s")


@pytest.mark.parametrize(
    "stall_s,refusal",
    [pytest.param(60, None, id="silent"), pytest.param(0, (429, {"Retry-After": "60"}), id="429")],
)
async def test_a_progress_edit_that_fails_costs_the_turn_one_try_not_the_answer(
    teams, fake_model, caplog, stall_s, refusal
):
    """Was: a silent edit took 100 s and urllib3 tried it three times more (400 s, per edit); a 429
    with Retry-After: 60 slept 3 × 60 s. Now the first failed edit ends progress for the turn."""
    caplog.set_level(logging.INFO)
    edits: list[float] = []

    def stall(method: str, body: dict) -> float:
        if method != "PUT":
            return 0
        edits.append(time.monotonic())
        return stall_s

    teams.connector.stall = stall
    teams.connector.refuse_when = lambda method, body: refusal if method == "PUT" else None
    fake_model.enqueue(*TWO_STEPS, text("Forty-two."))
    started = time.monotonic()
    sent = await asyncio.wait_for(teams.say("how many flights?"), 8)
    assert time.monotonic() - started < PROGRESS_S + 3
    assert sent[-1]["text"] == "Forty-two."
    assert len(edits) == 1  # tried once, then no more this turn
    lines = teams_lines(caplog)
    assert sum("no more progress updates" in line for line in lines) == 1, lines
    assert not any("answer did not reach" in line for line in lines) and not tracebacks(caplog)


@pytest.mark.parametrize("wait_s", [1, 3])
async def test_an_answer_refused_with_429_is_sent_again_after_its_retry_after(teams, fake_model, wait_s):
    """Teams' rate limit: back off and retry (https://learn.microsoft.com/microsoftteams/platform/bots/
    how-to/rate-limit). Was: a POST got no retry from msrest's urllib3 policy; the answer was lost. And
    the answer itself waits out a longer Retry-After than other messages (3 s here, where they wait 2 s
    at most): a 429 asking for more than 5 s dropped the answer, and the person got nothing."""
    refused: list[float] = []

    def once(method: str, body: dict):
        if body.get("type") == "message" and body.get("text") == "Forty-two." and not refused:
            refused.append(time.monotonic())
            return 429, {"Retry-After": str(wait_s)}
        return None

    teams.connector.refuse_when = once
    fake_model.enqueue(text("Forty-two."))
    sent = await asyncio.wait_for(teams.say("how many flights?"), 12)
    assert [m["text"] for m in sent if m.get("text") == "Forty-two."] == ["Forty-two."]  # once, not twice
    assert refused and time.monotonic() - refused[0] >= wait_s


@pytest.mark.parametrize("ahead_s", [3, -30], ids=["in-3-s", "past"])
async def test_an_answer_refused_with_an_http_date_retry_after_is_sent_again_at_that_date(
    teams, fake_model, ahead_s
):
    """Retry-After may be an HTTP date (RFC 9110 §10.2.3). Was: any date read as "longer than we
    wait", so the answer was dropped however near the date; now it is the delay to that date (0 s for
    one already past), held to the same caps as delay-seconds."""
    refused: list[float] = []

    def once(method: str, body: dict):
        if body.get("type") == "message" and body.get("text") == "Forty-two." and not refused:
            refused.append(time.monotonic())
            return 429, {"Retry-After": formatdate(time.time() + ahead_s, usegmt=True)}  # whole seconds
        return None

    teams.connector.refuse_when = once
    fake_model.enqueue(text("Forty-two."))
    sent = await asyncio.wait_for(teams.say("how many flights?"), 12)
    assert refused, "the answer was not refused: the test tests nothing"
    assert [m["text"] for m in sent if m.get("text") == "Forty-two."] == ["Forty-two."]  # once, not twice
    assert time.monotonic() - refused[0] >= max(0, ahead_s - 1)


async def test_a_bot_connector_answering_503_ends_the_turn_in_one_line(teams, fake_model, caplog):
    """A 503 asking for a long wait: nothing to show anyone, so the turn ends at once, says why in one
    line (no traceback per event as before) and the thread's next question answers. (Asking for a
    wait the rest of an answer may take, it follows in a job: tests/bot/test_teams_rest.py.)"""
    caplog.set_level(logging.INFO)
    teams.connector.refuse_when = lambda method, body: (
        (503, {"Retry-After": "600"}) if body.get("type") == "message" else None
    )
    fake_model.enqueue(*TWO_STEPS, text("Forty-two."))
    started = time.monotonic()
    await asyncio.wait_for(teams.say("how many flights?"), 8)
    assert time.monotonic() - started < 3
    lines = teams_lines(caplog)
    [lost] = [line for line in lines if "answer did not reach" in line]
    assert (
        lost.endswith("the Bot Connector at 127.0.0.1 answered HTTP 503, asked to wait 600 s")
        and f"conversation={THREAD}" in lost
    )
    assert not tracebacks(caplog)
    teams.connector.refuse_when = None
    fake_model.enqueue(text("Forty-three."))
    assert (await asyncio.wait_for(teams.say("and now?"), 8))[-1]["text"] == "Forty-three."


GATEWAY_503 = {  # what a proxy or load balancer in front of the Bot Connector answers, no Retry-After
    "html": (503, {"content-type": "text/html"}, b"<html><body>Service Unavailable</body></html>"),
    "text": (503, {"content-type": "text/plain"}, b"Service Unavailable"),
    "untyped": (503, {"content-type": None}, b"upstream connect error"),  # msrest guesses JSON
    "cut-short": (503, {"content-length": "200"}, b'{"error": {"co'),  # a partial response
}


@pytest.mark.parametrize("page", GATEWAY_503.values(), ids=GATEWAY_503.keys())
async def test_an_answer_refused_once_by_a_gateways_503_is_sent_again(teams, fake_model, caplog, page):
    """The trial: one 503 with no Retry-After, and the answer was gone, the person told nothing. msrest
    parsed the body by its type before looking at the status (DeserializationError), or lost it to the
    body cut short (ChunkedEncodingError): no status, so no retry. Now the status decides."""
    caplog.set_level(logging.INFO)
    refused: list[float] = []

    def once(method: str, body: dict):
        if body.get("text") == "Forty-two." and not refused:
            refused.append(time.monotonic())
            return page
        return None

    teams.connector.refuse_when = once
    fake_model.enqueue(text("Forty-two."))
    sent = await asyncio.wait_for(teams.say("how many flights?"), 12)
    assert refused, "the answer was not refused: the test tests nothing"
    assert [m["text"] for m in sent if m.get("text") == "Forty-two."] == ["Forty-two."]
    assert not any("did not reach" in line for line in teams_lines(caplog)) and not tracebacks(caplog)


async def test_an_answer_whose_connection_closes_unanswered_is_logged_as_such_and_said(
    teams, fake_model, caplog
):
    """A connection closed before any status may have posted the answer, so it is not sent again. But
    the log said "could not be reached (no connection)" of a Bot Connector that was reached. And with
    progress given up (a failed edit) the person heard nothing; now one short sentence says so."""
    caplog.set_level(logging.INFO)
    teams.connector.refuse_when = lambda method, body: (
        (429, {"Retry-After": "60"})
        if method == "PUT"
        else (0, {})
        if body.get("text") == "Forty-two."
        else None
    )
    fake_model.enqueue(*TWO_STEPS, text("Forty-two."))
    sent = await asyncio.wait_for(teams.say("how many flights?"), 12)
    [lost] = [line for line in teams_lines(caplog) if "answer did not reach" in line]
    assert lost.endswith("the Bot Connector at 127.0.0.1 closed the connection without answering"), lost
    error_id = lost.split("error_id=", 1)[1].split()[0]
    # Teams may have posted it (it said "did not take the answer, so it is not here" of an answer it may
    # have shown): the person is told to look before asking again
    assert sent[-1]["text"] == (
        "⚠️ Teams did not confirm the answer, so it may not be here. If it is not, please ask again "
        f"(error id {error_id})."
    )


async def test_a_scheduled_run_into_a_thread_the_bot_left_still_pauses_its_schedule(settings, fake_model):
    """A refusal keeps its HTTP status for the scheduler: 403 (the bot was removed from the team)
    pauses the schedule instead of failing it again every week."""
    connector = FakeConnector().start()
    app = create_app(settings.model_copy(update={"teams_service_url": connector.url + "/"}))
    state = app.state.datathread
    clock = Clock(datetime(2031, 11, 24, 7, 59, tzinfo=UTC))  # Monday 08:59 in Berlin
    try:
        async with app.router.lifespan_context(app):
            book = ScheduleBook.from_settings(state.analyst.store, state.settings, clock=clock)
            s = new_schedule(
                cron="0 9 * * mon",
                tz="Europe/Berlin",
                surface="teams",
                channel="19:general@thread.tacv2",
                thread="1700000000001",
                question="how many flights?",
                owner="aad-ada",
                team_id="tenant-1",
                now=clock(),
            )
            await book.add(s)
            connector.refuse_status = 403
            clock.advance(minutes=1, seconds=2)
            await tick(book, state.runner.submit, grace=timedelta(minutes=10))
            await asyncio.wait_for(state.runner.drain(), 8)
            paused = await book.get(s.id)
    finally:
        connector.stop()
    assert paused.paused and "HTTP 403" in paused.paused_reason
    assert not fake_model.requests


def refused() -> requests.exceptions.ConnectionError:
    """What `requests` raises for a closed port: its ConnectionError over the OS error."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise requests.exceptions.ConnectionError(exc) from exc
    except requests.exceptions.ConnectionError as exc:
        return exc


def dropped() -> requests.exceptions.ConnectionError:
    """What `requests` raises when the connection closes before a status line: urllib3's "Connection
    aborted." over http.client's RemoteDisconnected (it was "could not be reached (no connection)")."""
    closed = RemoteDisconnected("Remote end closed connection without response")
    return requests.exceptions.ConnectionError(ProtocolError("Connection aborted.", closed))


@pytest.mark.parametrize(
    "exc,why",
    [
        (requests.exceptions.ReadTimeout(), "the Bot Connector did not answer within 2 s"),
        (
            requests.exceptions.ConnectTimeout(),
            f"the Bot Connector could not be reached within {PROGRESS_S:g} s",
        ),
        (refused(), "the Bot Connector could not be reached (connection refused)"),
        (dropped(), "the Bot Connector closed the connection without answering"),
        (
            requests.exceptions.ChunkedEncodingError(ProtocolError("Connection broken: IncompleteRead")),
            "the Bot Connector broke off its answer mid-way (a partial response)",
        ),
        (ValueError("x"), "the Bot Connector call failed (ValueError)"),
    ],
)
def test_what_a_failed_call_is_called_in_the_log(exc, why):
    wrapped = ClientRequestError("Error occurred in request.", exc)  # how msrest raises them
    assert str(teams_connector.failure(wrapped, 2.0)) == why


async def test_an_answer_teams_will_not_take_leaves_the_card_saying_so_not_done(teams, fake_model, caplog):
    """The progress card said "Done — 2 steps" and nothing followed when Teams refused the answer's
    message (a 429 asking for longer than the bot waits, a 413): the card now says the answer did not
    arrive, with the error id of the log line. (A 429 asking for a minute: the answer follows,
    tests/bot/test_teams_rest.py; this one asks for longer than the rest of an answer may wait.)"""
    teams.connector.refuse_when = lambda method, body: (
        (429, {"Retry-After": "600"}) if "Forty-two." in (body.get("text") or "") else None
    )
    fake_model.enqueue(*TWO_STEPS, text("Forty-two."))
    await asyncio.wait_for(teams.say("how many flights?"), 8)
    [lost] = [line for line in teams_lines(caplog) if "answer did not reach" in line]
    error_id = lost.split("error_id=", 1)[1].split()[0]
    last = teams.connector.updates()[-1].body["attachments"][0]["content"]["body"][0]["text"]
    assert (
        last == f"⚠️ Teams did not take the answer, so it is not here. Please ask again (error id {error_id})."
    )


async def test_a_progress_card_someone_deleted_does_not_stop_the_turn(teams, fake_model):
    """Editing a progress card a moderator deleted is refused 403/404 (not "BotNotInConversationRoster"):
    that counted as the bot removed, the turn stopped at its next model call and its answer was
    dropped, in a conversation that still works."""
    edits: list[str] = []

    def refuse_edits(method: str, body: dict):
        if method == "PUT":
            edits.append(method)
            return (403, {})
        return None

    slow = tool("run_python", {"code": "import time; time.sleep(2.5)"})  # past the edits' throttle
    asked = len(fake_model.requests)
    fake_model.enqueue(slow, *TWO_STEPS, text("There are 5 tables."))
    teams.connector.refuse_when = refuse_edits
    try:
        sent = await teams.say("how many tables?")
    finally:
        teams.connector.refuse_when = None
    assert edits  # an edit was refused mid-turn
    assert any("There are 5 tables." in (m.get("text") or "") for m in sent), sent
    assert len(fake_model.requests) - asked == 4  # every model call of the turn was made
