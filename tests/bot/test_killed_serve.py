"""A `datathread serve` killed mid-answer (SIGKILL: the OOM killer, kill -9, a power cut) left its thread
with a half-written answer and not a word: the workers holding the job died with the web process, and
nothing remembered the job. Now the job was noted (core/job_journal.py): after the restart the thread
hears, once, that the answer stopped, and its next question runs at once (core/lock_owner.py). A real
`serve` on the SQLite store; the scripted model and the fake Slack Web API at the network boundary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.job_journal import JobJournal
from core.runner import TurnJob
from tests.bot.serve_harness import Replica, serve_env, wait_for
from tests.bot.slack_harness import event_body, mention, said
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import FakeSlackAPI

REPO = Path(__file__).resolve().parents[2]
STOPPED = "I stopped before finishing this answer"


def test_a_killed_serve_tells_its_threads_after_the_restart(home, fake_model, tmp_path):
    api = FakeSlackAPI().start()
    env = serve_env(home, fake_model.url, api.url)  # no REDIS_URL: the SQLite store, workers over pipes
    first = Replica(env, tmp_path)
    second = None
    try:
        first.wait_ready()
        fake_model.enqueue(tool("run_python", {"code": "import time\ntime.sleep(60)"}))
        first.post(event_body(mention("a long one?", ts="1700000001.000100")))
        wait_for(lambda: len(fake_model.requests) >= 1)  # the turn runs in a worker
        wait_for(lambda: api.of("chat.appendStream"))  # and its answer's stream is open
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        time.sleep(0.5)
        assert not any(STOPPED in s for s in api.shown())  # nobody was left to say it

        second = Replica(env, tmp_path)
        second.wait_ready()
        wait_for(lambda: any(STOPPED in s for s in api.shown()), 30)
        streamed = {c.args["ts"] for c in api.of("chat.appendStream")}  # the dead turn's answer, "typing…"
        [ended] = api.of("chat.stopStream")  # is ended with the notice, not left open above it
        assert {ended.args["ts"]} == streamed and STOPPED in ended.args["markdown_text"]
        fake_model.enqueue(text("Back again."))
        started = time.monotonic()
        second.post(
            event_body(mention("still there?", ts="1700000002.000100", thread_ts="1700000001.000100"))
        )
        wait_for(lambda: said(api, "Back again.") > 0, 40)
        assert time.monotonic() - started < 30  # not behind the dead turn's lock for its 60 s
        assert sum(STOPPED in s for s in api.shown()) == 1
    finally:
        for replica in (first, second):
            if replica is not None:
                replica.stop()
        api.stop()


WRITER = """
import sys
from pathlib import Path
from core.job_journal import JobJournal
from core.runner import TurnJob
JobJournal(Path(sys.argv[1])).write(1, TurnJob("slack.message", {"channel": "C1"}))
"""


def test_a_dead_processs_jobs_are_told_by_one_starting_process_only(tmp_path):
    folder = tmp_path / "jobs"
    subprocess.run([sys.executable, "-c", WRITER, str(folder)], check=True, cwd=REPO)  # it wrote, and ended
    alive = JobJournal(folder)
    alive.write(7, TurnJob("slack.message", {"channel": "C2"}))  # a live process's job: not an orphan
    a, b = JobJournal(folder), JobJournal(folder)
    assert [(j.kind, j.payload) for j in a.orphans()] == [("slack.message", {"channel": "C1"})]
    assert b.orphans() == [] and a.orphans() == []
    alive.done(7)
    assert list(folder.iterdir()) == []
