"""The console script as a user runs it: real subprocesses of `.venv/bin/datathread` against the
scripted Messages API on loopback — one per behaviour of the entry point (an answer with its files,
a missing key, a chat read from stdin); what a second call checks runs the same app in process."""

from __future__ import annotations

from pathlib import Path

import click
import typer.main

from bot.cli import app
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.cli import invoke, run


def test_ask_prints_answer_and_attached_file_paths(home, fake_model):
    fake_model.enqueue(
        tool(
            "query_warehouse",
            {
                "sql": "SELECT origin, count(*) AS n FROM flights GROUP BY 1 ORDER BY 1",
                "save_as": "by_origin",
            },
        ),
        tool("attach_file", {"path": "by_origin.parquet", "title": "Flights by origin"}),
        text("EWR had the most departures."),
    )
    result = run(
        ["ask", "flights by origin airport?", "--session", "by-origin"],
        home,
        env={"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "EWR had the most departures."
    csv_path = Path(lines[-1])
    assert csv_path.name == "by_origin.csv" and csv_path.read_text().splitlines() == [
        '"origin","n"',
        '"EWR",120835',
        '"JFK",111279',
        '"LGA",104662',
    ]
    assert "Traceback" not in result.stderr


def test_a_later_answer_attaching_the_same_name_keeps_the_earlier_file(home, fake_model):
    """ "only the top 3, as a CSV", then later the bottom 2 saved and attached as `top3` again: the
    second answer's file replaced the first at the path printed under the first answer, which then
    held other data without a word. Now each keeps its own path; the same bytes again, the same path."""
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    by_origin = "SELECT origin, count(*) AS n FROM flights GROUP BY 1 ORDER BY n {} LIMIT {}"
    paths = []
    for order, limit in [("DESC", 3), ("ASC", 2), ("DESC", 3)]:
        fake_model.enqueue(
            tool("query_warehouse", {"sql": by_origin.format(order, limit), "save_as": "top3"}),
            tool("attach_file", {"path": "top3.parquet", "title": "Top 3"}),
            text("Attached."),
        )
        result = invoke(["ask", "only the top 3, as a CSV", "--session", "top3"], home, env=env)
        assert result.returncode == 0, result.stderr
        paths.append(Path(result.stdout.strip().splitlines()[-1]))
    assert [p.name for p in paths] == ["top3.csv", "top3-2.csv", "top3.csv"]
    assert paths[0].read_text().splitlines()[1:] == ['"EWR",120835', '"JFK",111279', '"LGA",104662']
    assert paths[1].read_text().splitlines()[1:] == ['"LGA",104662', '"JFK",111279']


def test_ask_prints_the_answer_with_secrets_masked_as_chat_and_the_audit_do(home, fake_model):
    """A model that repeats a key: chat and the audit trail showed `[redacted]`, and `ask` printed the
    key and a Slack token in the clear (it printed the answer from the outcome, not from the events)."""
    key = "sk-ant-api03-FAKEFAKEFAKEFAKE1234567890"
    env = {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text(f"The key is {key} and slack xoxb-1234-5678-abcdefghijkl, fine?"))
    result = invoke(["ask", "what is the key?", "--session", "keys"], home, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The key is [redacted] and slack [redacted], fine?"
    assert key not in result.stderr and "xoxb-" not in result.stderr


def test_ask_read_through_a_pipe_that_is_not_utf8_shows_the_answer_first_and_whole(home, fake_model):
    """`datathread ask … 2>&1 | less` on a terminal that is not UTF-8: the answer had been made, then
    printing it raised UnicodeEncodeError — a traceback, exit 1, the answer lost; characters it cannot
    show are now `?`. And stdout, flushed only at exit, came after the receipt and session id that
    stderr printed at once: the answer now comes first."""
    fake_model.enqueue(text("Ready \U0001f680 — 16 carriers."))
    env = {
        "ANTHROPIC_BASE_URL": fake_model.url,
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "PYTHONIOENCODING": "ascii",
        "PYTHONUNBUFFERED": "",  # stdout into a pipe is block-buffered, as in a user's shell
    }
    result = run(["ask", "how many carriers?", "--session", "ascii"], home, env=env, merged=True)
    assert result.returncode == 0 and "Traceback" not in result.stdout, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith("No session ascii in ") and lines[-1] == "session: ascii", lines
    assert lines[1] == "Ready ? ? 16 carriers." and "1 model call" in lines[2]  # the receipt, under it


def test_ask_without_key_is_one_clear_sentence(home):
    result = run(["ask", "hi"], home)
    assert result.returncode != 0
    assert "ANTHROPIC_API_KEY" in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_a_mistyped_command_line_is_one_sentence_with_exit_code_2(home):
    """click drew a usage line, a hint and a box of five lines around the error."""
    cases = {
        ("ask",): "error: Missing argument 'question'; `datathread ask --help` says more.",
        ("frobnicate",): "error: No such command 'frobnicate'; `datathread --help` says more.",
        ("ask", "--bogus", "x"): "error: No such option: --bogus; `datathread ask --help` says more.",
    }
    for args, said in cases.items():
        result = run(list(args), home)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", said + "\n"), args
    bare = run([], home)  # a bare command still shows its help
    assert bare.returncode == 2 and "Usage: datathread [OPTIONS] COMMAND" in bare.stdout + bare.stderr


def test_ask_help_answers_without_a_key(home):
    """`help` is answered without the model, as in chat: `ask help` asked for a key it never needed."""
    result = invoke(["ask", "help"], home)
    assert result.returncode == 0, result.stderr
    assert "Tables I can see:" in result.stdout and "`flights`" in result.stdout
    assert "ANTHROPIC_API_KEY" not in result.stderr + result.stdout and "Traceback" not in result.stderr


def test_steps_without_a_sandbox_are_said_on_the_terminal(home):
    """DATATHREAD_ISOLATION=none (or a host that allows no isolation) ran model code unconfined with
    nothing on the terminal: the warning went to the log file only, which chat and ask do not show."""
    unconfined = invoke(["ask", "help"], home, env={"DATATHREAD_ISOLATION": "none"})
    assert unconfined.returncode == 0, unconfined.stderr
    assert unconfined.stderr.startswith("warning: steps run without a sandbox here")
    assert unconfined.stderr.count("warning") == 1  # then only the session line, as always
    from core.isolation_backends import preview

    if "back end" not in preview("best", masked=[]).missing:  # this host isolates steps by default
        assert "warning" not in invoke(["ask", "help"], home).stderr


def test_every_option_and_argument_says_what_it_is():
    """`audit --help` listed --session, --user, --channel and --limit with no word on them."""

    def walk(command: click.Command, path: str):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{path} {name}".strip())
        for param in command.params:
            yield path, param

    params = walk(typer.main.get_command(app), "")
    assert [f"{path} {param.opts[0]}" for path, param in params if not param.help] == []


def test_ask_with_rejected_key_fails_with_exit_1_and_a_message(home, fake_model):
    fake_model.enqueue(error(401, "authentication_error", "invalid x-api-key"))
    result = invoke(
        ["ask", "hi"],
        home,
        env={"ANTHROPIC_API_KEY": "sk-ant-wrong-123456", "ANTHROPIC_BASE_URL": fake_model.url},
    )
    assert result.returncode == 1
    assert "API key was rejected" in result.stderr and "Traceback" not in result.stderr
    # the terminal's reader runs the bot: told to check the key, not that "an admin needs to"
    assert "The Claude API key was rejected. Check ANTHROPIC_API_KEY." in result.stderr
    assert "sk-ant-wrong-123456" not in result.stderr + result.stdout


def test_chat_reads_questions_and_resumes_a_session(home, fake_model):
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text("First answer."), text("Second answer."))
    first = run(["chat", "--session", "abc"], home, env=env, stdin="how many flights?\nand by month?\n")
    assert first.returncode == 0, first.stderr
    assert "First answer." in first.stdout and "Second answer." in first.stdout
    assert "datathread chat --session abc" in first.stdout
    fake_model.enqueue(text("Third."))
    again = invoke(["chat", "--session", "abc"], home, env=env, stdin="one more\n")  # a new process's view
    assert "Third." in again.stdout
    sent = str(fake_model.requests[-1]["messages"])
    assert "how many flights?" in sent and "and by month?" in sent
