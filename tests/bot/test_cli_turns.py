"""`datathread ask` as a newcomer meets it: in a real subprocess, a black-holed model endpoint fails
within the configured deadline (and says so in one line, the log line going to the log file); in
process, an empty question is answered without the model."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from tests.fakes.anthropic_api import tool
from tests.fakes.bigquery_api import service_account_key
from tests.fakes.black_hole import BlackHole
from tests.fakes.cli import invoke, recorded_turns, run, spawn
from tests.fakes.redis_server import free_port

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}


def test_black_holed_endpoint_fails_within_the_deadline(home):
    hole = BlackHole().start()
    try:
        started = time.monotonic()
        result = run(
            ["ask", "how many flights?", "--session", "bh"],
            home,
            env={
                **KEY,
                "ANTHROPIC_BASE_URL": hole.url,
                "DATATHREAD_MODEL_TIMEOUT": "2",
                "DATATHREAD_MODEL_RETRIES": "5",
            },
        )
        wall = time.monotonic() - started
    finally:
        hole.stop()
    assert result.returncode == 1
    assert "did not start answering within 2 s" in result.stderr and "Traceback" not in result.stderr
    assert "WARNING" not in result.stderr  # the log line went to the log file, not next to the sentence
    assert "`datathread doctor` checks the model's key, name and endpoint." in result.stderr
    assert "did not start answering" in (home / "logs" / "datathread.log").read_text()
    (turn,) = asyncio.run(recorded_turns(home))
    waited = turn["finished"] - turn["started"]
    assert 1.9 < waited < 4, waited  # one 2 s deadline, not 2 s × 6 attempts
    assert wall < 60
    assert turn["question"] == "how many flights?" and not turn["ok"]


@pytest.mark.parametrize(
    ("status", "kind", "doctor"),
    [(401, "authentication_error", True), (404, "not_found_error", True), (500, "api_error", False)],
)
def test_doctor_is_suggested_only_when_the_model_set_up_failed_the_turn(
    status, kind, doctor, home, fake_model
):
    """A rejected key or an unknown model fails every later question too: `ask` points at doctor. An
    error the next try may not meet (the API's own 500) gets the sentence alone."""
    from tests.fakes.anthropic_api import error

    fake_model.enqueue(error(status, kind))
    result = invoke(["ask", "hi"], home, env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url})
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")
    assert ("`datathread doctor`" in result.stderr) is doctor, result.stderr


def test_an_empty_question_is_a_bad_argument_not_an_answer(home, fake_model):
    """`datathread ask "$Q"` with Q unset: it printed chat's help (in raw Markdown, "Ctrl-D quits")
    with exit code 0, so a script went on as if answered. Now one sentence, exit 2, no model call."""
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    empty = invoke(["ask", "   "], home, env=env)
    assert empty.returncode == 2, empty.stderr
    assert empty.stdout == ""
    assert empty.stderr.strip() == (
        'error: The question is empty: ask one, e.g. datathread ask "How many flights left JFK in 2013?"'
    )
    assert fake_model.requests == []  # nothing was sent to the model


def test_a_csv_that_cannot_be_made_safe_is_not_saved_and_the_answer_still_prints(home, fake_model):
    """A CSV model code wrote in an encoding the formula check cannot read (UTF-16 without a mark):
    not handed to the user, one line says why, the answer and exit code are as usual."""
    from tests.fakes.anthropic_api import text, tool

    write = "open('odd.csv', 'wb').write('=1+1,2\\n'.encode('utf-16-le'))\nprint('ok')"
    fake_model.enqueue(
        tool("run_python", {"code": write}),
        tool("attach_file", {"path": "odd.csv"}, say="Here is the file."),
        text("unused"),
    )
    result = invoke(["ask", "give me the CSV"], home, env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Here is the file.")
    assert "not saved: odd.csv (the CSV is in an encoding that cannot be checked" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not list(home.glob("attachments/*/odd.csv"))  # nothing handed over


def test_ask_prints_no_control_characters_of_the_models_answer(home, fake_model):
    """An answer carrying escape sequences (clear the screen, retitle the window) reached the
    terminal as they were: `ask` prints them as `?`, as chat does, and keeps the text and newlines."""
    from tests.fakes.anthropic_api import text

    fake_model.enqueue(text("Colour \x1b[31mRED\x1b[0m\n\x1b[2Jline two \x1b]0;pwned\x07end"))
    result = invoke(["ask", "hi"], home, env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert result.stdout.startswith("Colour ?[31mRED?[0m\n?[2Jline two ?]0;pwned?end"), result.stdout


def test_ask_ends_its_answer_with_the_receipt_on_stderr(home, fake_model):
    """Every answer ends with its receipt — in `ask` too, where it was missing, and with it the warning
    about numbers no query produced. On stderr: stdout stays the answer and the file paths, for scripts."""
    from tests.fakes.anthropic_api import text, tool

    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 16 AS carriers"}), text("There are 987,654 delayed flights.")
    )
    result = invoke(["ask", "how many?"], home, env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "There are 987,654 delayed flights.\n"
    receipt, session = [line for line in result.stderr.splitlines() if line.strip()]
    assert "2 model calls" in receipt and "⚠ not from any query in this turn: 987,654" in receipt, receipt
    assert session.startswith("session: ")


@pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")
def test_ctrl_c_while_bigquery_is_out_of_reach_ends_ask_at_once(home, fake_model, tmp_path):
    """The query's call retries in a thread; Ctrl-C stopped the turn at once but the process then
    waited for that thread (google's default retry: 600 s; bounded now, still the step's 60 s here)."""
    closed = f"http://127.0.0.1:{free_port()}"
    key = service_account_key(tmp_path / "key.json", f"{closed}/token")
    fake_model.enqueue(tool("query_warehouse", {"sql": "SELECT 1 AS one"}))
    bigquery = {
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "bill",
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
        "DATATHREAD_BIGQUERY_API_URL": closed,
        "DATATHREAD_STEP_TIMEOUT": "60",
    }
    asked = spawn(["ask", "how many?"], home, fake_model.url, env=bigquery)
    try:
        deadline = time.monotonic() + 120
        while not fake_model.requests:
            assert asked.poll() is None and time.monotonic() < deadline, asked.communicate()
            time.sleep(0.05)
        time.sleep(1.0)  # the step is under way, its call retrying against the closed port
        os.killpg(asked.pid, signal.SIGINT)
        pressed = time.monotonic()
        _, err = asked.communicate(timeout=90)
        took = time.monotonic() - pressed
    finally:
        if asked.poll() is None:
            os.killpg(asked.pid, signal.SIGKILL)
    assert took < 10, f"ask ended {took:.1f} s after Ctrl-C"
    assert "stopped" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("place", "why"), [("closed", "Connection refused"), ("black hole", "it did not answer in time")]
)
def test_ask_help_says_why_bigquery_could_not_list_its_tables(home, tmp_path, place, why):
    """`ask help` with BigQuery out of reach said only "I could not list the tables just now" (help
    stopped waiting at 5 s, while each metadata call retried for 20 s and had no cause to give yet):
    now it says, as a query would, that BigQuery could not be reached and why, and still answers."""
    hole = BlackHole().start()
    address = f"http://127.0.0.1:{free_port()}" if place == "closed" else hole.url
    bigquery = {
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "bill",
        "GOOGLE_APPLICATION_CREDENTIALS": str(service_account_key(tmp_path / "key.json", f"{address}/token")),
        "DATATHREAD_BIGQUERY_API_URL": address,
    }
    try:
        started = time.monotonic()
        result = invoke(["ask", "help"], home, env=bigquery)
        took = time.monotonic() - started
    finally:
        hole.stop()
    assert result.returncode == 0, result.stderr
    unlisted = f"I could not list the tables just now. Could not reach BigQuery within 3.5 s: {why}."
    assert unlisted in result.stdout, result.stdout
    assert "Traceback" not in result.stderr and took < 30, took
