"""`--session` as a newcomer uses it: a name with no session yet is said to start a new one (a typo
silently began an empty conversation), a full id as `audit` prints it resumes; a session another
conversation is answering in is waited for out loud, and Ctrl-C while waiting does not claim the question
was kept; the hourly limit names its setting. Real SQLite store under DATATHREAD_HOME, the scripted
Messages API; `chat` in a real subprocess where Ctrl-C matters."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from pathlib import Path

import pytest

from bot.terminal_chat import session_key
from core.config import load_settings
from core.sessions import open_store, session_id_for
from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke, recorded_turns, spawn, start_chat
from tests.fakes.process_output import Output

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}
WAITING = "Waiting for another conversation on this session to finish…"


def test_an_unknown_session_is_named_and_started_and_a_known_one_resumes(home, fake_model):
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text("First answer."), text("Resumed."), text("By id."))
    first = invoke(["chat", "--session", "sales"], home, env=env, stdin="how many flights?\n")
    assert first.returncode == 0, first.stderr
    assert f"No session sales in {home.resolve()} yet: starting a new one with that name." in first.stdout

    typo = invoke(["chat", "--session", "slaes"], home, env=env, stdin="")
    assert f"No session slaes in {home.resolve()} yet" in typo.stdout, typo.stdout
    assert len(fake_model.requests) == 1  # nothing asked

    again = invoke(["ask", "and by month?", "--session", "sales"], home, env=env)
    assert again.returncode == 0, again.stderr
    assert "No session" not in again.stderr + again.stdout and again.stdout == "Resumed.\n"
    assert "how many flights?" in str(fake_model.requests[-1]["messages"])

    # the full id, as `audit` and `export` show it, resumes the same conversation
    full_id = session_id_for("terminal", ("sales",))
    by_id = invoke(["ask", "and by day?", "--session", full_id], home, env=env)
    assert by_id.returncode == 0 and "No session" not in by_id.stderr, by_id.stderr
    assert by_id.stderr.strip().endswith("session: sales")
    assert "and by month?" in str(fake_model.requests[-1]["messages"])


@contextlib.contextmanager
def another_turn_holds(home: Path, key: str):
    """The session's lock held as another conversation's turn holds it (the real store's lock, from a
    thread with its own event loop); yields the event that releases it."""
    release, taken = threading.Event(), threading.Event()

    async def hold() -> None:
        store = await open_store(load_settings(_env_file=None, home=home))
        try:
            async with store.lock(session_id_for("terminal", (key,)), ttl_s=30):
                taken.set()
                while not release.is_set():
                    await asyncio.sleep(0.05)
        finally:
            await store.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    holder.start()
    assert taken.wait(30)
    try:
        yield release
    finally:
        release.set()
        holder.join(30)


def test_ask_on_a_busy_session_says_it_waits_then_answers(home, fake_model):
    """The other turn ends only once `ask` has said it waits: on a busy machine `ask` may take longer
    to reach the lock than any fixed delay."""
    fake_model.enqueue(text("Answered after the wait."))
    with another_turn_holds(home, "busy") as release:
        proc = spawn(["ask", "how many?", "--session", "busy"], home, fake_model.url)
        try:
            stdout, stderr = Output(proc.stdout), Output(proc.stderr)
            stderr.wait_for(WAITING)
            release.set()
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr.text
    assert WAITING in stderr.text and stdout.finished() == "Answered after the wait.\n"


@pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")
def test_a_second_chat_on_a_session_says_it_waits_and_ctrl_c_there_keeps_nothing(home, fake_model):
    with another_turn_holds(home, "shared"):
        proc = start_chat(home, fake_model.url, "shared")
        output = Output(proc.stdout)
        try:
            proc.stdin.write("how many flights?\n")
            proc.stdin.flush()
            output.wait_for(WAITING)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C while it waits
            output.wait_for("not kept")
            proc.stdin.close()
            proc.wait(timeout=60)
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
    out = output.text
    assert proc.returncode == 0, err
    assert "Stopped before it started" in out and "kept in this session's history" not in out, out
    assert "Traceback" not in out + err and fake_model.requests == []
    (turn,) = asyncio.run(recorded_turns(home))
    assert turn["question"] == "how many flights?" and turn["ok"] is False and "not kept" in turn["error"]


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        (
            {"DATATHREAD_USER_TURNS_PER_HOUR": "1"},
            "1 an hour per person, set by DATATHREAD_USER_TURNS_PER_HOUR",
        ),
        (
            {"DATATHREAD_USER_TURNS_PER_HOUR": "0", "DATATHREAD_CHANNEL_TURNS_PER_HOUR": "1"},
            "1 an hour per channel, set by DATATHREAD_CHANNEL_TURNS_PER_HOUR",
        ),
    ],
)
def test_the_hourly_limit_names_the_setting_that_controls_it(limits, says, home, fake_model):
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url, **limits}
    fake_model.enqueue(text("One."))
    assert invoke(["ask", "first"], home, env=env).returncode == 0
    limited = invoke(["ask", "second"], home, env=env)
    assert limited.returncode == 1
    assert "You've reached the limit of questions for now" in limited.stderr and says in limited.stderr
    assert "error id" not in limited.stderr  # an expected refusal, not a fault to look up
    assert len(fake_model.requests) == 1


async def test_a_store_gone_while_looking_up_the_session_is_a_sentence_and_the_session_goes_on(settings):
    """Redis gone between start and the `--session` lookup (or SQLite locked past its timeout): one
    sentence, and the conversation goes on under the name given (its turns say why they fail)."""
    from core.analyst import Analyst
    from tests.fakes.redis_server import RedisServer

    server = RedisServer().start()
    try:
        analyst = await Analyst.create(settings.model_copy(update={"redis_url": server.url}))
        server.kill()
        said: list[str] = []
        try:
            key = await session_key(analyst, settings, "sales", lambda line, **_: said.append(line))
        finally:
            await analyst.close()
    finally:
        server.stop()
    assert key == ("sales",)
    assert len(said) == 1 and said[0].startswith("Could not look up session sales: Redis at 127.0.0.1:"), said


def test_an_unknown_session_on_redis_names_the_redis_not_the_home(home, fake_model):
    """With REDIS_URL set, "No session sales in /…/home yet" named a folder the sessions are not in: it
    names the Redis and its database (two tenants of one Redis differ only there), never the password."""
    from tests.fakes.redis_server import RedisServer

    server = RedisServer(password="s3cret-pw-000000").start()
    url = f"redis://:s3cret-pw-000000@127.0.0.1:{server.port}/3"
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url, "REDIS_URL": url}
    fake_model.enqueue(text("First answer."), text("Resumed."))
    try:
        first = invoke(["ask", "how many flights?", "--session", "sales"], home, env=env)
        again = invoke(["ask", "and by month?", "--session", "sales"], home, env=env)
    finally:
        server.stop()
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    said = (
        f"No session sales in the Redis at 127.0.0.1:{server.port}/3 yet: starting a new one with that name."
    )
    assert said in first.stderr and "s3cret" not in first.stderr + first.stdout
    assert "No session" not in again.stderr  # resumed from Redis
