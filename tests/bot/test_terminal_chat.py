"""Ctrl-C in `datathread chat` (bot/terminal_chat.py), as a person does it: SIGINT to the foreground
process group of a real subprocess while a sandbox step runs. The first stops the turn (the step dies),
keeps the question in a valid history and the audit trail, and returns to the prompt; a second one
while a turn is stopping quits. At the prompt, Ctrl-C clears the line and Ctrl-D or `exit` quits."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import text, tool
from tests.fakes.cli import DATATHREAD, invoke, recorded_turns, spawn, start_chat
from tests.fakes.process_output import Output
from tests.fakes.scenarios import assert_valid

HEARTBEAT = """
import time
while True:
    with open('beat', 'a') as f:
        f.write('.')
    time.sleep(0.1)
"""

pytestmark = pytest.mark.usefixtures("ctrl_c_as_a_terminal_has_it")  # see tests/conftest.py


def wait_for(predicate, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def step_processes(chat_pid: int, *, stopped: int | None = None) -> list[int]:
    """The running step's processes, from the host's /proc: what a step child of chat's fork server
    started (the runner, and on root/userns the step's init) — three generations below chat. The
    youngest step child is the idle spare, whose runner (and init) wait for the next step: not counted.
    The step's files cannot show it running: on root/userns they reach the workspace only once it ends.
    With `stopped` (the step child of a step that was stopped) the idle spare must exist and be younger
    than it: else the step's own processes would be what is not counted, and an empty list would prove
    nothing."""
    parents, started = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue
            if fields[0] != "Z":
                parents[int(entry)], started[int(entry)] = int(fields[1]), int(fields[19])

    def line(pid: int) -> list[int]:  # pid, its parent, ... up to chat
        chain = [pid]
        for _ in range(8):
            if chain[-1] == chat_pid:
                return chain
            chain.append(parents.get(chain[-1], 0))
        return []

    spares = [pid for pid in parents if len(line(pid)) == 3]  # step children of the fork server
    idle = max(spares, key=lambda pid: (started[pid], pid), default=None)
    if stopped is not None:
        assert idle is not None and idle != stopped, (idle, stopped, "no idle spare beside the stopped step")
        assert started[idle] >= started.get(stopped, 0), (idle, stopped)
    return [pid for pid in parents if len(line(pid)) >= 4 and idle not in line(pid)]


def step_child(chat_pid: int, pid: int) -> int:
    """The step child (a child of the fork server) that `pid`, one of the step's processes, is under."""
    chain = [pid]
    while chain[-1] not in (0, 1):
        try:
            chain.append(int(Path(f"/proc/{chain[-1]}/stat").read_text().rsplit(")", 1)[1].split()[1]))
        except (OSError, ValueError):
            break
        if len(chain) >= 3 and chain[-1] == chat_pid:
            return chain[-3]
    raise AssertionError(f"{pid} is not a step's process under {chat_pid}: {chain}")


def ctrl_c(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C


def ask_until_its_step_runs(proc: subprocess.Popen, question: str) -> int:
    """Ask `question` in chat (scripted to run HEARTBEAT) and wait until its step runs; its step child."""
    proc.stdin.write(f"{question}\n")
    proc.stdin.flush()
    wait_for(lambda: step_processes(proc.pid))  # the step is running
    running = step_child(proc.pid, step_processes(proc.pid)[0])
    time.sleep(0.5)  # and well into its heartbeat loop
    return running


def test_ctrl_c_stops_the_turn_keeps_the_question_and_returns_to_the_prompt(home, fake_model):
    fake_model.enqueue(tool("run_python", {"code": HEARTBEAT}), text("Second answer."))
    proc = start_chat(home, fake_model.url, "cc")
    output = Output(proc.stdout)
    try:
        running = ask_until_its_step_runs(proc, "first question")
        ctrl_c(proc)
        # the turn has wound down (its sentence, then the prompt again): its step is gone
        wait_for(lambda: "›" in output.text.partition("stopped before it finished")[2])
        left = step_processes(proc.pid, stopped=running)
        assert left == [], "the sandbox step still runs after Ctrl-C"
        assert proc.poll() is None, "Ctrl-C during a turn must not end chat"
        proc.stdin.write("second question\n")
        proc.stdin.close()
        proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    out = output.finished()
    assert proc.returncode == 0, err
    # Told once, in the core's words (the same sentence as in a thread), not again by chat itself
    assert out.count("This answer was stopped before it finished. Ask again to carry on.") == 1, out
    assert "Stopped." not in out and "Second answer." in out and "Traceback" not in out + err
    second = fake_model.requests[-1]["messages"]
    assert_valid([*second, {"role": "assistant", "content": "x"}])
    assert "first question" in json.dumps(second) and "stopped" in json.dumps(second)
    turns = asyncio.run(recorded_turns(home))
    first = next(t for t in turns if t["question"] == "first question")
    assert first["ok"] is False and "stopped" in first["error"]


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["terminal-closed", "sigterm"])
def test_a_closed_terminal_or_sigterm_mid_turn_keeps_the_question(sig, home, fake_model):
    """Closing the terminal window (SIGHUP) or `timeout`/a logout (SIGTERM) killed chat at once, and the
    question asked was in neither the session's history nor the audit. Now the turn is stopped as by
    Ctrl-C, recorded, its step ended, and chat exits with 128 + the signal."""
    fake_model.enqueue(tool("run_python", {"code": HEARTBEAT}))
    proc = start_chat(home, fake_model.url, f"hup-{sig}")
    output = Output(proc.stdout)
    try:
        running = ask_until_its_step_runs(proc, "the question asked")
        proc.send_signal(sig)
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    output.finished()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    wait_for(lambda: not Path(f"/proc/{running}").exists())  # the stopped step's processes are gone
    turns = asyncio.run(recorded_turns(home))
    asked = next(t for t in turns if t["question"] == "the question asked")
    assert asked["ok"] is False and "stopped" in asked["error"]


def test_chat_started_under_nohup_carries_on_when_its_terminal_closes(home, fake_model):
    """`nohup datathread chat < questions.txt &` asks that a closed terminal not end it: SIGHUP arrives
    ignored, and chat keeps it so — the turn in progress answers and chat goes on to the next line."""
    fake_model.enqueue(
        tool("run_python", {"code": "import time\ntime.sleep(1.5)\nprint('slept')"}),
        text("Answered despite the closed terminal."),
    )
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it (the fixture restores the handler)
    proc = start_chat(home, fake_model.url, "nohup")
    output = Output(proc.stdout)
    try:
        ask_until_its_step_runs(proc, "the question asked")
        proc.send_signal(signal.SIGHUP)
        proc.stdin.close()  # the next line: the end of the input, so chat quits once the answer is out
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    out = output.finished()
    assert proc.returncode == 0, err
    assert "Answered despite the closed terminal." in out
    (asked,) = asyncio.run(recorded_turns(home))
    assert asked["ok"] is True


def test_ask_stopped_by_sigterm_keeps_the_question_and_says_so(home, fake_model):
    """`timeout 60 datathread ask …` (SIGTERM) ended `ask` at once, silently, and the question was
    neither in the session's history nor in the audit: now it is stopped as chat's turns are."""
    fake_model.enqueue(tool("run_python", {"code": HEARTBEAT}))
    proc = spawn(["ask", "the question asked", "--session", "ask-term"], home, fake_model.url)
    try:
        wait_for(lambda: step_processes(proc.pid))
        running = step_child(proc.pid, step_processes(proc.pid)[0])
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.splitlines() == [
        f"No session ask-term in {home.resolve()} yet: starting a new one with that name.",
        "error: This answer was stopped before it finished. Ask again to carry on.",
        "session: ask-term",
    ], err
    assert out == ""
    wait_for(lambda: not Path(f"/proc/{running}").exists())
    (asked,) = asyncio.run(recorded_turns(home))
    assert asked["question"] == "the question asked" and "stopped" in asked["error"]


@contextlib.contextmanager
def chat_at_a_terminal(home, fake_model, session: str):
    """`datathread chat` under a real pseudo-terminal, as a person runs it: yields `typed(keys,
    then)`, which sends keys as typed or pasted and waits for `then` on the screen; ends with `exit`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env |= {
        "DATATHREAD_HOME": str(home),
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "TERM": "xterm-256color",
        "COLUMNS": "120",
    }
    main, terminal = os.openpty()
    proc = subprocess.Popen(
        [DATATHREAD, "chat", "--session", session],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        cwd=home.parent,
        start_new_session=True,
        # the pseudo-terminal as chat's controlling terminal (after the new session): a typed Ctrl-C
        # (\x03) is then SIGINT to chat's process group, sent by the terminal as a person's would be
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(terminal)
    keep = os.fdopen(main, "rb", buffering=0)  # closes `main` once collected: held to the end
    screen = Output(keep)

    def typed(keys: str, then: str, *, prompt: bool = True) -> None:
        seen = len(screen.text)
        os.write(main, keys.encode())
        if prompt:  # and the prompt again
            wait_for(lambda: "›" in screen.text[seen:].partition(then)[2], timeout=60)
        else:  # on the screen (a key typed: its echo)
            wait_for(lambda: then in screen.text[seen:], timeout=60)

    try:
        wait_for(lambda: "›" in screen.text, timeout=60)
        yield typed
        os.write(main, b"exit\r")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        screen.finished()
        keep.close()
    assert proc.returncode == 0, screen.text


def test_at_a_terminal_arrow_keys_edit_the_question_and_recall_the_last(home, fake_model):
    """Under a real pseudo-terminal, as a person types: ← moves the cursor within the question and ↑
    brings the last question back (readline), rather than `^[[D` ending up in what Claude is asked."""
    fake_model.enqueue(text("First answer."), text("Second answer."))
    with chat_at_a_terminal(home, fake_model, "tty") as typed:
        typed("helo\x1b[D\x1b[DX\r", "First answer.")  # ← ← then X: "heXlo"
        typed("\x1b[A\r", "Second answer.")  # ↑ and Enter: the same question again
    asked = [r["messages"][-1] for r in fake_model.requests]
    assert len(asked) == 2 and all("heXlo" in json.dumps(m) for m in asked), asked
    assert "\\u001b" not in json.dumps(asked) and "[D" not in json.dumps(asked), asked


def test_a_question_pasted_over_several_lines_is_one_question(home, fake_model):
    """A terminal delivers a paste as keys arriving at once, each line ending in Enter: readline
    returns the first line, and the rest must join it, not become questions (and model calls) of
    their own. A question typed after an answer is still a question of its own."""
    fake_model.enqueue(text("First answer."), text("Second answer."))
    with chat_at_a_terminal(home, fake_model, "paste") as typed:
        typed("which carriers\rhad the most delays?\r\rchart it\r", "First answer.")
        typed("and in march?\r", "Second answer.")
    asked = [json.dumps(r["messages"][-1]) for r in fake_model.requests]
    assert len(asked) == 2, asked
    assert "which carriers\\nhad the most delays?\\n\\nchart it" in asked[0], asked[0]
    assert "and in march?" in asked[1] and "carriers" not in asked[1], asked[1]


def test_ctrl_c_at_the_prompt_clears_the_line_and_chat_goes_on(home, fake_model):
    """Ctrl-C at the prompt ended chat (and a newcomer's half-typed question with it), where Python's
    REPL and ipython clear the line: now it drops what was typed, says how to quit (Ctrl-D or exit),
    and the next question goes on in the same session. Typed at a real terminal, which sends SIGINT."""
    fake_model.enqueue(text("First answer."))
    with chat_at_a_terminal(home, fake_model, "clear") as typed:
        typed("half a thought", "thought", prompt=False)  # in readline's line, echoed
        typed("\x03", "exit quits")  # then Ctrl-C
        typed("\x03", "exit quits")  # at an empty prompt too
        typed("how many flights?\r", "First answer.")
    (asked,) = [json.dumps(r["messages"]) for r in fake_model.requests]
    assert "how many flights?" in asked and "half a thought" not in asked, asked


def test_a_second_ctrl_c_while_the_turn_is_still_stopping_quits(home, fake_model):
    """A stop that lasts (here the session database is held by another process, so the stopped
    question cannot be saved yet) says so after a moment, and a second Ctrl-C then quits, saying how to
    resume. (A second Ctrl-C once the prompt is back clears the line: the test above.)"""
    fake_model.enqueue(tool("run_python", {"code": HEARTBEAT}))
    proc = start_chat(home, fake_model.url, "cq")
    out = Output(proc.stdout)
    other = sqlite3.connect(home / "state.sqlite3", isolation_level=None)
    try:
        proc.stdin.write("a long question\n")
        proc.stdin.flush()
        wait_for(lambda: step_processes(proc.pid))
        other.execute("BEGIN EXCLUSIVE")  # until it ends, the stopped turn cannot save its history
        ctrl_c(proc)
        # Two presses, not one coalesced signal: the second once chat has shown it took the first (a
        # busy machine may not run chat between two quick signals, and the kernel then keeps one).
        wait_for(lambda: "Press Ctrl-C again to quit" in out.text)
        assert out.text.index("Stopping…") < out.text.index("Still stopping…")
        ctrl_c(proc)
        time.sleep(2)  # taken (chat's loop reads it at once), then the database is free again
        other.execute("ROLLBACK")
        proc.wait(timeout=60)  # stdin stays open: it is the second Ctrl-C that ends chat, not an EOF
        err = proc.stderr.read()
    finally:
        other.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert "datathread chat --session cq" in out.finished()


def test_two_presses_that_arrive_before_chat_can_react_are_two():
    """Both SIGINTs reach the process while its main thread runs no Python code (here: SIGINT blocked
    on it, so they land on another thread; on a loaded machine, not being scheduled has that effect):
    a plain signal handler would run once for both and only stop the turn; counted one by one, the
    second quits."""
    from bot.terminal_chat import run_interruptibly

    stops = []
    go = threading.Event()

    def press_twice() -> None:
        go.wait(10)
        for _ in range(2):  # to this thread, so each is taken before the next is sent (the kernel
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # merges pending duplicates)

    async def turn() -> None:
        presser = threading.Thread(target=press_twice)
        presser.start()  # before blocking: this thread can take the signals
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            go.set()
            presser.join(10)  # both presses arrive while this thread runs no Python code
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        await asyncio.sleep(30)

    with asyncio.Runner() as runner, pytest.raises(KeyboardInterrupt):
        run_interruptibly(runner, turn(), on_stop=lambda: stops.append(1))
    assert stops == [1]  # the first press stopped the turn (and said so), the second quit
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C at the prompt quits


def test_one_press_stops_the_turn_and_returns():
    from bot.terminal_chat import run_interruptibly

    async def turn() -> None:
        asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
        await asyncio.sleep(30)

    with asyncio.Runner() as runner:
        started = time.monotonic()
        assert run_interruptibly(runner, turn()) is False
        assert time.monotonic() - started < 10
        assert run_interruptibly(runner, asyncio.sleep(0)) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("word", ["exit", "quit", "QUIT ", "/exit"])
def test_exit_or_quit_at_the_prompt_quits_without_asking_claude(home, fake_model, word):
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    fake_model.enqueue(text("First answer."))
    result = invoke(["chat"], home, env=env, stdin=f"how many flights?\n{word}\nnever asked\n")
    assert result.returncode == 0, result.stderr
    assert "First answer." in result.stdout and "Resume with: datathread chat --session" in result.stdout
    assert len(fake_model.requests) == 1  # neither the quit word nor what follows reached the model
