"""A byte that is not valid UTF-8 in a question, through the real console script (core/text_repair.py).

Python decodes argv and stdin with `surrogateescape`, so `datathread ask "$(cat q.txt)"` with a Latin-1
"M\\xfcnchen" reached the core as "M\\udcfcnchen": the Messages API request could not be encoded ("Something
went wrong on my side"), and, the question kept in the session's history, neither could any later
request of that session, for good; `export` of it failed with a traceback. Under `LC_ALL=C` with
Python's UTF-8 mode off, every non-ASCII question did the same. A session broken that way before
heals as it is loaded."""

from __future__ import annotations

import json
import os
import sqlite3

from core.sessions import session_id_for
from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke, run

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "LC_ALL": "C.UTF-8"}
ADD = ["schedule", "add", "--cron", "0 9 * * mon", "--tz", "Europe/Berlin", "--surface", "slack"]
ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


def sent(request: dict) -> str:
    """What a request told the model, as the SDK encodes it (it failed there on a lone surrogate)."""
    return json.dumps(request["messages"], ensure_ascii=False).encode("utf-8").decode("utf-8")


def test_ask_with_an_undecodable_byte_in_argv_is_answered_and_its_session_goes_on(home, fake_model):
    fake_model.enqueue(text("12 flights went to Munich."))
    fake_model.enqueue(text("And 3 came back."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    first = run(["ask", "flights to M\udcfcnchen?", "--session", "bytes"], home, env=env)
    assert first.returncode == 0, first.stderr
    assert "12 flights went to Munich." in first.stdout
    follow_up = run(["ask", "and back?", "--session", "bytes"], home, env=env)
    assert follow_up.returncode == 0, follow_up.stderr
    assert "And 3 came back." in follow_up.stdout
    asked, again = (sent(r) for r in fake_model.requests)
    assert "flights to München?" in asked  # the byte read as Latin-1/Windows-1252 reads it
    assert "flights to München?" in again and "and back?" in again  # the history replayed whole


def test_chat_with_an_undecodable_byte_on_stdin_answers_it_and_the_next_question(home, fake_model):
    fake_model.enqueue(text("12 flights went to Munich."))
    fake_model.enqueue(text("And 3 came back."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    chat = run(["chat", "--session", "piped"], home, env=env, stdin="flights to M\udcfcnchen?\nand back?\n")
    assert chat.returncode == 0, chat.stderr
    assert "12 flights went to Munich." in chat.stdout and "And 3 came back." in chat.stdout
    assert "went wrong" not in chat.stdout
    assert "flights to München?" in sent(fake_model.requests[1])


def test_non_ascii_questions_work_under_an_ascii_locale(home, fake_model):
    """`LC_ALL=C` with UTF-8 mode and locale coercion off: Python decodes a UTF-8 terminal's "ü" as two
    escaped bytes; they are UTF-8, and read as such."""
    fake_model.enqueue(text("12 flights went to Munich."))
    fake_model.enqueue(text("7 went to Cologne."))
    env = {**KEY, **ASCII_LOCALE, "ANTHROPIC_BASE_URL": fake_model.url}
    asked = run(["ask", "flights to München?", "--session", "c-locale"], home, env=env)
    assert asked.returncode == 0, asked.stderr
    assert "12 flights went to Munich." in asked.stdout
    chat = run(["chat", "--session", "c-locale"], home, env=env, stdin="und nach Köln?\n")
    assert chat.returncode == 0, chat.stderr
    assert "7 went to Cologne." in chat.stdout and "went wrong" not in chat.stdout
    assert "und nach Köln?" in sent(fake_model.requests[1])
    assert "flights to München?" in sent(fake_model.requests[1])


def test_a_session_saved_with_a_lone_surrogate_works_again_and_exports(home, fake_model):
    """The session as the old code left it: the question's escape kept in the history and the audit
    record ("\\udcfc" in their JSON). Its next question and its notebook export failed, every time."""
    fake_model.enqueue(text("12 flights went to Munich."))
    fake_model.enqueue(text("And 3 came back."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    assert run(["ask", "flights to Munich?", "--session", "old"], home, env=env).returncode == 0
    with sqlite3.connect(home / "state.sqlite3") as db:  # the JSON escape, as json.dumps wrote it
        db.execute("UPDATE history SET messages = replace(messages, 'to Munich?', 'to M\\udcfcnchen?')")
        db.execute("UPDATE turns SET data = replace(data, 'to Munich?', 'to M\\udcfcnchen?')")
        session = session_id_for("terminal", ("old",))
        (history,) = db.execute("SELECT messages FROM history WHERE session_id=?", (session,)).fetchone()
        (record,) = db.execute("SELECT data FROM turns WHERE session_id=?", (session,)).fetchone()
    assert "to M\\udcfcnchen?" in history and "to M\\udcfcnchen?" in record
    follow_up = run(["ask", "and back?", "--session", "old"], home, env=env)
    assert follow_up.returncode == 0, follow_up.stderr
    assert "flights to München?" in sent(fake_model.requests[1])
    exported = run(["export", "old", "-o", "-"], home, env=env)
    assert exported.returncode == 0, exported.stderr
    cells = "".join("".join(c["source"]) for c in json.loads(exported.stdout)["cells"])
    assert "flights to München?" in cells


def test_a_session_key_with_an_undecodable_byte_names_one_session_everywhere(home, fake_model):
    """`--session "$(cat key.txt)"` with a Latin-1 byte: ask, export and audit each ended in a
    UnicodeEncodeError traceback from the store's look-up."""
    fake_model.enqueue(text("12 flights went to Munich."))
    fake_model.enqueue(text("And 3 came back."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    first = run(["ask", "flights to Munich?", "--session", "m\udcfcnchen"], home, env=env)
    assert first.returncode == 0, first.stderr
    assert "session: münchen" in first.stderr
    again = run(["ask", "and back?", "--session", "m\udcfcnchen"], home, env=env)
    assert again.returncode == 0 and "No session" not in again.stderr, again.stderr
    assert "flights to Munich?" in sent(fake_model.requests[1])  # the same session, its history replayed
    exported = run(["export", "m\udcfcnchen", "-o", "-"], home, env=env)
    assert exported.returncode == 0, exported.stderr
    audit = run(["audit", "--session", "m\udcfcnchen"], home, env=env)
    assert audit.returncode == 0, audit.stderr
    assert [json.loads(line)["question"] for line in audit.stdout.splitlines()] == [
        "flights to Munich?",
        "and back?",
    ]


def test_a_byte_in_any_argument_reads_as_in_a_question_in_every_command(home):
    """Every command's arguments are read once, at the entry (bot/cli_arguments.py): an id with a byte
    argv could not decode is an unknown id like any other — one sentence, the same exit code — where
    `schedule pause`, `verified show` and `audit --user` ended in a UnicodeEncodeError traceback from
    the store's look-up."""
    for args, code, said in [
        (["schedule", "pause", "ab\udcfc"], 2, "No schedule has the id 'abü'"),
        (["verified", "show", "ab\udcfc"], 2, "There is no verified query or correction with id abü."),
        (["audit", "--user", "ab\udcfc"], 0, "No recorded turns in"),
    ]:
        result = run(args, home, env=KEY, merged=True)
        assert result.returncode == code, result.stdout
        assert said in result.stdout and "Traceback" not in result.stdout
        assert len(result.stdout.strip().splitlines()) == 1, result.stdout


def test_a_schedule_is_stored_with_its_question_readable(home):
    """`schedule add` stored the escape, repaired only on each read of it. (Compared as ascii(): a lone
    surrogate in a failure's diff stops a pytest-xdist worker.)"""
    added = invoke([*ADD, "--channel", "C1", "flights to M\udcfcnchen?"], home, env=KEY)
    assert added.returncode == 0, added.stderr
    with sqlite3.connect(home / "state.sqlite3") as db:
        (stored,) = db.execute("SELECT data FROM records WHERE kind='schedule'").fetchone()
    assert "\\udcfc" not in stored and ascii(json.loads(stored)["question"]) == ascii("flights to München?")
    listed = invoke(["schedule", "list", "--json"], home, env=KEY)
    assert [ascii(s["question"]) for s in json.loads(listed.stdout)] == [ascii("flights to München?")]


def test_a_file_name_with_an_undecodable_byte_names_that_file(home, fake_model):
    """File names are the exception: `export -o` with the byte 0xFC in the name writes that file, not
    one named "Mxc3xbcnchen"."""
    fake_model.enqueue(text("12 flights went to Munich."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    assert invoke(["ask", "flights to Munich?", "--session", "k"], home, env=env).returncode == 0
    exported = run(["export", "k", "-o", "M\udcfcnchen.ipynb"], home, env=env)
    assert exported.returncode == 0, exported.stderr
    assert b"M\xfcnchen.ipynb" in os.listdir(bytes(home.parent))
