"""Ctrl-C or SIGTERM during `datathread eval`, as a person (or `timeout`) does it: the signal to a real
subprocess while a question's step runs. It ended the run in silence, with a report whose accuracy
counted the questions never asked and whose `stopped_by` was null; now one line says how far it got and
the exact command that finishes it, and the report says what stopped it."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import time

import pytest

from tests.fakes.anthropic_api import tool
from tests.fakes.anthropic_scripts import by_question, question_of
from tests.fakes.cli import invoke, recorded_turns, spawn

pytestmark = pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")  # see tests/conftest.py

SUITE = """
questions:
  - {id: airlines, question: "How many airlines?", expected: 16}
  - {id: planes, question: "How many planes?", expected: 3322}
  - {id: airports, question: "How many airports?", expected: 1458}
"""

HEARTBEAT = "import time\nwhile True:\n    time.sleep(0.1)\n"  # a step that runs until it is stopped

ANSWERS = {
    "How many airlines?": "SELECT count(*) FROM airlines",
    "How many planes?": "SELECT count(*) FROM planes",
    "How many airports?": "SELECT count(*) FROM airports",
}


def wait_for(predicate, proc, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_eval_says_how_far_it_got_and_how_to_finish(home, fake_model, tmp_path, sig):
    suite, report_path = tmp_path / "suite.yaml", tmp_path / "int.json"
    suite.write_text(SUITE)
    # the first question answered (a query, then the text), the second's step runs until the signal
    fake_model.enqueue(
        *[by_question({**ANSWERS, "How many planes?": tool("run_python", {"code": HEARTBEAT})})] * 3
    )
    args = ["eval", str(suite), "--concurrency", "1", "--output", str(report_path)]
    proc = spawn(args, home, fake_model.url)
    try:
        wait_for(lambda: any(question_of(r) == "How many planes?" for r in fake_model.requests), proc)
        time.sleep(1.5)  # its step is under way
        os.killpg(proc.pid, sig)  # what the terminal does on Ctrl-C; `timeout` sends SIGTERM
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err + out and out == "", err  # no results table for a partial run
    *progress, last = err.strip().splitlines()
    assert [line.split()[:2] for line in progress] == [["✓", "airlines"]], err
    command = f"datathread eval {suite} --output {report_path} --concurrency 1 --resume"
    assert last == f"Stopped after 1 of 3 questions: `{command}` finishes the run.", err
    report = json.loads(report_path.read_text())
    assert report["stopped_by"] == sig.name
    assert [q["id"] for q in report["questions"]] == ["airlines"]
    assert report["totals"]["questions"] == 3
    # the question under way was stopped as a person's turn is: saved and audited as stopped
    stopped = [t for t in asyncio.run(recorded_turns(home)) if t["question"] == "How many planes?"]
    assert len(stopped) == 1 and "stopped" in stopped[0]["error"], stopped

    # the command it printed does finish the run: the stopped question and the one never asked
    fake_model.enqueue(*[by_question(ANSWERS)] * 4)
    resumed = invoke(
        shlex.split(command)[1:],
        home,
        env={"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": fake_model.url},
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(report_path.read_text())
    assert report["stopped_by"] is None and report["accuracy"] == 1.0
    assert [q["id"] for q in report["questions"]] == ["airlines", "planes", "airports"]
