"""Stopping a real `datathread serve` (bot/serve_process.py) as people and supervisors do it: two
Ctrl-C in quick succession, or SIGTERM to its process group (`timeout`, systemd, `docker stop`). Either
way the process ends with no traceback and no "worker crashed" error."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time

import httpx
import pytest

from core.analyst import STOPPED as TURN_STOPPED
from tests.bot.serve_harness import Replica
from tests.bot.slack_harness import SECRET, event_body, mention, said
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import FakeSlackAPI

# the served process starts its own workers and fork servers; Ctrl-C as a terminal has it
pytestmark = [pytest.mark.own_sandbox, pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")]


def serve_env(fake_model, home, **settings: str) -> dict:
    """This process's environment without our settings, plus the scripted model, the home and `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DATATHREAD_", "AWS_"))}
    return env | {
        "ANTHROPIC_API_KEY": "sk-ant-test-key-000000",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "DATATHREAD_HOME": str(home),
        **settings,
    }


@pytest.fixture
def served(home, fake_model, tmp_path):
    """One `datathread serve` with its default turn worker and scheduler loop, ready (logging WARNING+)."""
    env = serve_env(fake_model, home, DATATHREAD_MODEL="claude-test")
    replica = Replica(env, tmp_path)
    try:
        replica.wait_ready()
        yield replica
    finally:
        replica.stop()


def said_after(replica: Replica, offset: int, timeout: float = 60) -> tuple[int, list[str]]:
    """Wait for the process to end; its exit code and the non-empty lines it wrote after `offset`."""
    code = replica.proc.wait(timeout=timeout)
    tail = replica.log.read_bytes()[offset:].decode(errors="replace")
    return code, [line for line in tail.splitlines() if line.strip()]


def test_a_second_ctrl_c_while_stopping_ends_the_process_without_a_traceback(served):
    offset = served.log.stat().st_size
    os.killpg(served.proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    time.sleep(0.05)
    os.killpg(served.proc.pid, signal.SIGINT)
    code, lines = said_after(served, offset)
    assert code == 0, lines
    assert not any("Traceback" in line or "Error" in line for line in lines), lines
    assert len(lines) <= 1, lines  # a short line at most (nothing leaked at exit either)


def test_one_ctrl_c_stops_serve_quietly_after_a_first_start(fake_model, tmp_path):
    """The usual way to stop it, after the first start in a new home (which builds the demo database in
    this process), with Slack configured. The heap frozen at start-up (`gc.freeze`) was never collected at exit, and DuckDB's
    bindings reported each of their objects left as "leaked": ~45 lines after the stop."""
    env = serve_env(
        fake_model, tmp_path / "new-home", SLACK_BOT_TOKEN="xoxb-test", SLACK_SIGNING_SECRET="test-secret"
    )
    served = Replica(env, tmp_path)
    try:
        served.wait_ready()
        offset = served.log.stat().st_size
        os.killpg(served.proc.pid, signal.SIGINT)
        code, lines = said_after(served, offset)
    finally:
        served.stop()
    assert code == 0, lines
    assert not any("leaked" in line or "Traceback" in line or "Error" in line for line in lines), lines
    # Nor Bolt's notice that the token it read from the environment is the one its client carries.
    assert "will be unused" not in served.log.read_text(errors="replace")


def test_sigterm_to_the_process_group_is_not_reported_as_a_crashed_worker(served):
    offset = served.log.stat().st_size
    os.killpg(served.proc.pid, signal.SIGTERM)  # as `timeout`, systemd and `docker stop` stop a service
    code, lines = said_after(served, offset)
    assert code == -signal.SIGTERM, lines
    assert not any("ERROR" in line or "restarting" in line for line in lines), lines


def test_the_unauthenticated_teams_notice_is_said_once_not_once_more_per_worker(served):
    """Without MICROSOFT_APP_ID the web process warns that /api/messages is unauthenticated; the turn
    worker, building the same app, said it again."""
    said = [line for line in served.log.read_text().splitlines() if "MICROSOFT_APP_ID is not set" in line]
    assert len(said) == 1, said


def wait_until_sigint_is_handled(pid: int, timeout: float = 30) -> None:
    """Until process `pid` no longer ignores SIGINT (its SigIgn mask in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = open(f"/proc/{pid}/status").read()  # noqa: SIM115
        ignored = int(status.split("\nSigIgn:\t", 1)[1].split("\n", 1)[0], 16)
        if not ignored & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.005)
    raise AssertionError("the web process still ignores SIGINT")


def template_of(pid: int, timeout: float = 120) -> int:
    """The turn workers' fork template (core/worker_fork.py) of the serve process `pid`, as soon as it
    exists: a child running the library's fork server, still importing the worker's program."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            try:
                status = open(f"/proc/{entry}/status").read() if entry.isdigit() else ""  # noqa: SIM115
                argv = open(f"/proc/{entry}/cmdline", "rb").read() if status else b""  # noqa: SIM115
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status and b"forkserver" in argv:
                return int(entry)
        time.sleep(0.01)
    raise AssertionError("no fork template started")


def test_ctrl_c_while_the_turn_workers_start_stops_quietly(home, fake_model, tmp_path):
    """Ctrl-C reaches the whole process group, the workers' template included, which the library lets
    SIGINT kill until its imports are done: a KeyboardInterrupt traceback from it, and an EOFError
    traceback with "Application startup failed" from the web process, exit code 3."""
    env = serve_env(fake_model, home)
    served = Replica(env, tmp_path)
    try:
        template_of(served.proc.pid)
        # The template is seen as soon as it is exec'd, and the web process ignores SIGINT until the
        # spawn call returns (core/worker_fork.py): a press in those milliseconds is lost (the next
        # one works, as a person presses again). Pressed once that window is over — the template is
        # still importing — and only once: a second press after a slow stop (a loaded machine) would
        # land in the interpreter's exit, where SIGINT is back to its default, and kill it (-2).
        wait_until_sigint_is_handled(served.proc.pid)
        offset = served.log.stat().st_size
        os.killpg(served.proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        code, lines = said_after(served, offset)
    finally:
        served.stop()
    assert code == 0, lines
    assert not any("Traceback" in line or "Error" in line or "failed" in line for line in lines), lines
    assert len(lines) <= 1, lines


def test_where_serve_cannot_listen_is_one_sentence_before_anything_starts():
    """Checked before the app's start-up (seconds of turn workers and sandbox), in a sentence: a taken
    port was an ERROR line among the start-up's, a port the user may not bind or a host that is not
    this machine's a uvicorn error, and `--host ''` listened on every interface."""
    import socket

    from bot.serve_process import listen_problem

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert listen_problem("127.0.0.1", port) == (
            f"port {port} on 127.0.0.1 is in use: stop what listens there or choose another --port"
        )
    assert listen_problem("127.0.0.1", port) is None  # free again
    assert listen_problem("127.0.0.1", 0) is None
    assert listen_problem("nosuch.invalid", 0) == (
        "--host nosuch.invalid is not a name or address this machine can resolve"
    )
    assert listen_problem("192.0.2.1", 0).startswith("--host 192.0.2.1 is not an address of this machine")
    assert listen_problem("", 0).startswith("--host is empty")
    if os.geteuid() != 0:  # root may bind anything
        assert (
            listen_problem("127.0.0.1", 80)
            == "port 80 needs privileges this user lacks: use a port above 1023"
        )


@contextlib.contextmanager
def answering_slowly(home, fake_model, tmp_path, reply: str):
    """`serve` (at INFO, its default: uvicorn's lines show) with a Slack mention's answer being
    written: the scripted model holds its reply until `release` is set. Yields (served, api, release)."""
    api = FakeSlackAPI().start()
    release = threading.Event()

    def slow(body: dict) -> dict:
        release.wait(120)
        return text(reply)

    fake_model.enqueue(slow)
    env = serve_env(
        fake_model,
        home,
        DATATHREAD_MODEL_RETRIES="0",
        DATATHREAD_SLACK_API_URL=api.url,
        SLACK_BOT_TOKEN="xoxb-test-token-000000",
        SLACK_SIGNING_SECRET=SECRET,
    )
    served = Replica(env, tmp_path, log_level="INFO")
    try:
        served.wait_ready()
        assert served.post(event_body(mention("slow one", ts="1700000700.000100"))).status_code == 200
        until(lambda: len(fake_model.requests) == 1)  # the answer is being written
        yield served, api, release
    finally:
        release.set()
        served.stop()
        api.stop()


def test_a_second_ctrl_c_stops_a_running_answer_now_and_its_thread_is_told(home, fake_model, tmp_path):
    """The first Ctrl-C gives answers still being written up to 30 s, and says so; a second one stops
    them now — their threads told once — instead of waiting out the 30 s (it did, in silence)."""
    with answering_slowly(home, fake_model, tmp_path, "too late") as (served, api, _):
        offset = served.log.stat().st_size
        os.killpg(served.proc.pid, signal.SIGINT)
        until(lambda: "for 1 answer(s) still running" in served.log.read_text())
        pressed = time.monotonic()
        os.killpg(served.proc.pid, signal.SIGINT)
        code, lines = said_after(served, offset)
        took = time.monotonic() - pressed
    assert code == 0, lines
    assert took < 15, f"stopped {took:.1f} s after the second Ctrl-C"  # was the rest of 30 s
    assert not any("Traceback" in line or "ERROR" in line for line in lines), lines
    assert said(api, TURN_STOPPED[:40]) == 1  # the thread heard, once
    assert said(api, "too late") == 0
    # the second press came during the app's shutdown: it was not run (and said) a second time
    assert sum("Waiting for application shutdown" in line for line in lines) == 1, lines


def test_sigterm_to_the_process_group_lets_a_running_answer_finish(home, fake_model, tmp_path):
    """`timeout`, systemd and `docker stop` send SIGTERM to the whole process group. It ended the turn
    workers' fork template at once, and with it the workers: the answer being written was lost ("I
    stopped before finishing… ask again") and its thread's lock stayed taken, so the question asked
    again after a restart waited out the lock's TTL (47 s) first. The workers now get their finishing
    time, as after Ctrl-C: the answer arrives and the process then ends."""
    with answering_slowly(home, fake_model, tmp_path, "Finished after the stop signal.") as (
        served,
        api,
        release,
    ):
        offset = served.log.stat().st_size
        os.killpg(served.proc.pid, signal.SIGTERM)
        until(lambda: "for 1 answer(s) still running" in served.log.read_text())
        release.set()
        code, lines = said_after(served, offset)
    assert code == -signal.SIGTERM, lines
    assert said(api, "Finished after the stop signal.") == 1
    assert said(api, TURN_STOPPED[:40]) == 0
    assert not any("Traceback" in line or "ERROR" in line or "restarting" in line for line in lines), lines


def until(predicate, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_teams_download_link_made_by_a_turn_worker_opens_from_the_web_process(home, fake_model, tmp_path):
    """A Teams channel gets a CSV as a signed link. The turn worker signed it with a random secret of its
    own process and the web process checked it with another: every link, and every "Export notebook",
    answered 403 "bad signature" under the default settings. Now both take the secret kept in the
    session store, and a link works from a restarted process too."""
    from tests.bot.teams_harness import activity
    from tests.fakes.anthropic_api import tool
    from tests.fakes.bot_connector import FakeConnector

    connector = FakeConnector().start()
    fake_model.enqueue(
        tool(
            "query_warehouse",
            {"sql": "SELECT carrier, count(*) AS n FROM flights GROUP BY 1", "save_as": "o"},
        ),
        tool("attach_file", {"path": "o.parquet", "title": "Flights by carrier"}),
        text("Attached."),
    )
    env = serve_env(fake_model, home, DATATHREAD_MODEL="claude-test")
    served = Replica(env, tmp_path)
    try:
        served.wait_ready()
        asked = httpx.post(
            f"{served.url}/api/messages", json=activity(connector.url, "flights by carrier as a CSV")
        )
        assert asked.status_code == 202, asked.text
        until(lambda: any("/files/" in a.get("text", "") for a in connector.sent()))
        (link,) = re.findall(
            r"\((http[^)\s]+/files/[^)\s]+)\)",
            next(a["text"] for a in connector.sent() if "/files/" in a.get("text", "")),
        )
        path = link.split("/files/", 1)[1]
        got = httpx.get(f"{served.url}/files/{path}", timeout=10)
        assert got.status_code == 200, got.text
        assert got.content.decode().splitlines()[0].replace('"', "") == "carrier,n"
        served.stop()
        again = Replica(env, tmp_path)  # a restart: the link outlives it
        try:
            again.wait_ready()
            assert httpx.get(f"{again.url}/files/{path}", timeout=10).status_code == 200
        finally:
            again.stop()
    finally:
        served.stop()
        connector.stop()
