"""Ctrl-C on `datathread slack --socket` with an answer being written, as `serve` has it: the first
press says it waits for the answer (and that a second press stops it), the second stops it at once
and its thread is told, and the process then closes what it opened and exits 0, no traceback.
A real CLI process of its own (it ends), the fake Socket Mode server and Web API, the scripted model."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import pytest

from core.analyst import STOPPED
from tests.bot.slack_harness import event_body, mention, said
from tests.bot.slack_socket_harness import CONNECTED, SocketBot, demo_home, until
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_socket_mode import FakeSocketMode

pytestmark = pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")

WAITING = (
    "Slack: stopping: waiting up to 30 s for 1 answer(s) still running; Ctrl-C again stops them now "
    "(their threads are told)."
)


@contextlib.contextmanager
def answering_slowly(tmp_path, model, slack_api, answer: str, *, ts: str):
    """A `slack --socket` process of its own writing an answer to a mention (the model holds it until
    `release` is set): yields (bot, the Socket Mode fake, release); stops both however the test ends."""
    release = threading.Event()

    def slow(body: dict) -> dict:
        release.wait(60)
        return text(answer)

    asked = len(model.requests)  # the model fake is the module's: earlier tests' requests are there too
    model.enqueue(slow)
    socket_mode = FakeSocketMode().start().attach(slack_api)
    bot = SocketBot(demo_home(tmp_path), model, slack_api)
    try:
        envelope = socket_mode.event(event_body(mention("a slow one", ts=ts)))
        assert socket_mode.wait_ack(envelope).ack_s < 3
        until(lambda: len(model.requests) == asked + 1, what="the answer being written")
        yield bot, socket_mode, release
    finally:
        release.set()
        bot.stop()
        socket_mode.stop()


def test_a_second_ctrl_c_stops_the_running_answer_now_and_its_thread_is_told(tmp_path, model, slack_api):
    slow = answering_slowly(tmp_path, model, slack_api, "too late", ts="1700200001.000100")
    with slow as (bot, socket_mode, _):
        bot.ctrl_c()
        until(lambda: WAITING in bot.lines(), what="the first Ctrl-C's line")
        assert bot.proc.poll() is None  # it waits for the answer
        pressed = time.monotonic()
        bot.ctrl_c()
        code = bot.proc.wait(timeout=30)
        took = time.monotonic() - pressed
        until(lambda: socket_mode.open_connections() == [], what="its connection closed")
    assert code == 0, bot.lines()
    assert took < 15, f"stopped {took:.1f} s after the second Ctrl-C"  # not the rest of the 30 s
    assert bot.lines()[bot.lines().index(CONNECTED) + 1 :] == [
        "Slack: stopping…",
        WAITING,
        "Slack: Ctrl-C again: stopping the running answers now (their threads are told)…",
        "Slack: stopped.",
    ]
    assert bot.out.text == ""
    assert said(slack_api, STOPPED[:40]) == 1  # the thread heard, once
    assert said(slack_api, "too late") == 0
    # Everything it opened was closed: asyncio's "Unclosed client session" was an ERROR in the log.
    assert "ERROR" not in bot.log() and "Traceback" not in bot.log(), bot.log()


def test_a_step_stopped_with_its_answer_is_an_error_in_the_thread_not_a_spinner(tmp_path, model, slack_api):
    """The thread heard that its answer stopped, but the task card of the step that was running kept
    its "in progress" spinner for good: the turn ended without that step's finish."""
    model.enqueue(tool("run_python", {"code": "import time\nprint('started', flush=True)\ntime.sleep(120)"}))
    socket_mode = FakeSocketMode().start().attach(slack_api)
    bot = SocketBot(demo_home(tmp_path), model, slack_api)
    try:
        envelope = socket_mode.event(event_body(mention("a long step", ts="1700200003.000100")))
        assert socket_mode.wait_ack(envelope).ack_s < 3
        until(lambda: any(c["status"] == "in_progress" for c in task_chunks(slack_api)), what="the step")
        bot.ctrl_c()
        until(lambda: WAITING in bot.lines(), what="the first Ctrl-C's line")
        bot.ctrl_c()
        assert bot.proc.wait(timeout=30) == 0, bot.lines()
    finally:
        bot.stop()
        socket_mode.stop()
    (step_id,) = {c["id"] for c in task_chunks(slack_api) if c["title"] == "Running Python"}
    statuses = [c["status"] for c in task_chunks(slack_api) if c["id"] == step_id]
    assert statuses[0] == "in_progress" and statuses[-1] == "error", statuses
    assert said(slack_api, STOPPED[:40]) >= 1


def task_chunks(api) -> list[dict]:
    return [
        c
        for call in api.of("chat.appendStream")
        for c in call.args.get("chunks", [])
        if c["type"] == "task_update"
    ]


def test_sigterm_lets_the_running_answer_finish_and_stops_cleanly(tmp_path, model, slack_api):
    """systemd and Docker stop a service with SIGTERM: it killed `slack --socket` at once, the answer
    being written lost without a word to its thread. Now it is a first Ctrl-C, as for `serve`."""
    answer = "Finished after the stop."
    with answering_slowly(tmp_path, model, slack_api, answer, ts="1700200002.000100") as (bot, _, release):
        stopped_before = said(slack_api, STOPPED[:40])  # the Web API fake is the module's
        bot.proc.send_signal(signal.SIGTERM)
        until(lambda: WAITING in bot.lines(), what="SIGTERM's line")
        assert bot.proc.poll() is None  # it waits for the answer
        release.set()
        code = bot.proc.wait(timeout=30)
    assert code == 0, bot.lines()
    assert bot.lines()[-1] == "Slack: stopped.", bot.lines()
    assert said(slack_api, answer) == 1
    assert said(slack_api, STOPPED[:40]) == stopped_before  # not stopped: it finished
    assert "ERROR" not in bot.log() and "Traceback" not in bot.log(), bot.log()
