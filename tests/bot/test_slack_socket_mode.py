"""`datathread slack --socket` answering over a real WebSocket, as it would in a newcomer's workspace:
one real CLI process for the module, the fake Socket Mode server pushing envelopes (a mention, a
follow-up in its thread, `/ask`), the fake Slack Web API receiving the answers, the scripted model.
Every envelope must be acked within Slack's 3 s or Slack sends it again
(https://docs.slack.dev/apis/events-api/using-socket-mode#acknowledge); a connection Slack drops or
asks to refresh must come back by itself, with the next event still answered."""

from __future__ import annotations

import itertools

import pytest

from tests.bot.slack_harness import event_body, mention, message, said
from tests.bot.slack_socket_harness import CONNECTED, SocketBot, demo_home, until
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import TEAM_ID
from tests.fakes.slack_socket_mode import FakeSocketMode

ACK_S = 3.0  # Slack's deadline for an envelope's ack
_ts = (f"1700100{n:03d}.000100" for n in itertools.count(1))


@pytest.fixture(scope="module")
def socket_mode(slack_api):
    fake = FakeSocketMode().start().attach(slack_api)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def bot(tmp_path_factory, model, slack_api, socket_mode):
    """One `datathread slack --socket` for the module: starting it (the core, the sandbox) is the slow part."""
    running = SocketBot(demo_home(tmp_path_factory.mktemp("socket")), model, slack_api)
    yield running
    running.stop()


def ask(socket_mode: FakeSocketMode, event: dict) -> str:
    """Deliver one event as Slack does over Socket Mode; it must be acked in time, and with nothing else."""
    envelope = socket_mode.event(event_body(event))
    acked = socket_mode.wait_ack(envelope)
    assert acked.ack_s < ACK_S, f"acked after {acked.ack_s:.1f} s"
    assert acked.ack == {"envelope_id": envelope}
    return envelope


def answered(api, words: str) -> None:
    until(lambda: said(api, words) == 1, what=f"{words!r} in Slack")


def stream_of(api, channel: str, thread_ts: str) -> list:
    return [
        c
        for c in api.of("chat.startStream")
        if (c.args["channel"], c.args["thread_ts"]) == (channel, thread_ts)
    ]


def test_a_mention_is_acked_at_once_and_answered_in_its_thread(bot, socket_mode, slack_api, model):
    model.enqueue(text("There were 336,776 flights in 2013."))
    root = next(_ts)
    ask(socket_mode, mention("how many flights were there in 2013?", ts=root))
    answered(slack_api, "336,776 flights")
    assert len(stream_of(slack_api, "C0001", root)) == 1  # the answer is in the mention's thread
    assert "how many flights were there in 2013?" in str(model.requests[-1]["messages"][0])


def test_a_follow_up_in_the_thread_continues_the_same_session(bot, socket_mode, slack_api, model):
    model.enqueue(text("JFK had 111,279 departures."), text("LGA had 104,662 of them."))
    root = next(_ts)
    ask(socket_mode, mention("which airport had the most departures?", ts=root))
    answered(slack_api, "111,279 departures")
    ask(socket_mode, message("and the second?", ts=next(_ts), thread_ts=root))  # no mention needed
    answered(slack_api, "104,662 of them")
    assert len(stream_of(slack_api, "C0001", root)) == 2
    history = str(model.requests[-1]["messages"])  # the model sees the thread's earlier turn
    assert "which airport had the most departures?" in history and "111,279 departures" in history


def test_ask_over_socket_mode_posts_the_question_and_answers_in_its_thread(
    bot, socket_mode, slack_api, model
):
    model.enqueue(text("There are 16 airlines."))
    fields = {
        "command": "/ask",
        "text": "how many airlines are there?",
        "team_id": TEAM_ID,
        "channel_id": "C0002",
        "user_id": "U0001",
        "api_app_id": "A0001",
        "trigger_id": "t.socket",
        "response_url": slack_api.url.removesuffix("api/") + "response/socket",
    }
    envelope = socket_mode.command(fields)
    acked = socket_mode.wait_ack(envelope)
    assert acked.ack_s < ACK_S and acked.ack == {"envelope_id": envelope}
    answered(slack_api, "16 airlines")
    question = next(c for c in slack_api.of("chat.postMessage") if c.args["channel"] == "C0002")
    assert "how many airlines are there?" in question.args["text"]
    root = next(c for c in slack_api.posted["C0002"] if c["text"] == question.args["text"])["ts"]
    assert len(stream_of(slack_api, "C0002", root)) == 1  # answered in the question's thread


def test_a_dropped_connection_is_said_and_reconnected_and_the_next_mention_answered(
    bot, socket_mode, slack_api, model
):
    opened = socket_mode.opened
    socket_mode.drop()  # Slack closes the WebSocket
    socket_mode.wait_connections(opened + 1)
    until(lambda: bot.lines()[-2:] == ["Slack: connection lost; reconnecting…", CONNECTED], what="the lines")
    model.enqueue(text("Still here: 1,458 destinations."))
    ask(socket_mode, mention("how many destinations?", ts=next(_ts)))
    answered(slack_api, "1,458 destinations")


def test_a_refresh_slack_asks_for_moves_to_a_new_connection_quietly(bot, socket_mode, slack_api, model):
    """Slack asks every few hours (`disconnect`, `refresh_requested`): routine, not a lost connection."""
    opened, before = socket_mode.opened, bot.lines()
    socket_mode.disconnect("refresh_requested")
    socket_mode.wait_connections(opened + 1)
    until(lambda: socket_mode.open_connections() == [opened + 1], what="the old connection closed")
    model.enqueue(text("Refreshed: 105 planes."))
    ask(socket_mode, mention("how many planes?", ts=next(_ts)))
    answered(slack_api, "105 planes")
    assert bot.lines() == before  # nothing to say about it
    assert socket_mode.stray == []  # no ack of an envelope never sent, none twice
