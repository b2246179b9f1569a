"""`datathread ask` and `chat` as people run them — real processes, a real redis-server — when Redis
stops answering while Claude writes the answer (SIGSTOP: a long fork, a failover pause). `ask` erased
its spinner, showed nothing for 45 s, then printed an error and never the answer it had received;
`chat` printed the answer and gave no prompt for 45 s. Both said "this answer was not saved", while the
thawed Redis kept it. Now the answer is printed, the person hears within seconds that it may not be
kept for follow-ups, and the session goes on once Redis is back."""

from __future__ import annotations

import json
import time

import pytest

from tests.fakes.anthropic_api import text
from tests.fakes.cli import run, spawn
from tests.fakes.process_output import Output
from tests.fakes.stalled_store import StalledStore

ANSWER = "There were 336,776 flights in 2013."
TOLD_WITHIN_S = 3.0 + 2.0  # the turn's end deadline (core/turn_end.py), and some slack for a busy host


@pytest.fixture
def frozen(home):
    store = StalledStore("redis", home)
    yield store
    store.stop()


def freeze_then_answer(store: StalledStore, answered: list[float]):
    def reply(body: dict) -> dict:
        store.freeze()  # as the model writes: the turn's end finds Redis taking bytes and never answering
        answered.append(time.monotonic())
        return text(ANSWER)

    return reply


def test_ask_prints_the_answer_it_was_given_and_says_soon_that_it_may_not_be_kept(home, fake_model, frozen):
    answered: list[float] = []
    fake_model.enqueue(freeze_then_answer(frozen, answered))
    proc = spawn(["ask", "how many flights?", "--session", "fz"], home, fake_model.url, env=frozen.env)
    try:
        out, err = proc.communicate(timeout=90)
        ended = time.monotonic()
    finally:
        proc.kill()
        frozen.thaw()
    assert proc.returncode == 1, err
    assert out.splitlines()[0] == ANSWER, (out, err)  # the answer on stdout, as for any answer
    said = " ".join(err.split())
    assert "may not be kept for follow-ups" in said and "not saved" not in said, said
    assert "Traceback" not in err
    assert ended - answered[0] < TOLD_WITHIN_S + 1.5, (
        f"ask ended {ended - answered[0]:.1f} s after the answer"
    )

    # Redis is back: the same session goes on, and the thawed Redis kept the answer for this follow-up.
    fake_model.enqueue(text("Yes."))
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": fake_model.url, **frozen.env}
    again = run(["ask", "sure?", "--session", "fz"], home, env=env)
    assert again.returncode == 0 and again.stdout.startswith("Yes."), again.stderr
    assert ANSWER in json.dumps(fake_model.requests[-1]["messages"])


def test_chat_prints_the_answer_and_is_back_at_the_prompt_within_seconds(home, fake_model, frozen):
    answered: list[float] = []
    fake_model.enqueue(freeze_then_answer(frozen, answered))
    proc = spawn(["chat", "--session", "fzc"], home, fake_model.url, stdin=True, env=frozen.env)
    screen = Output(proc.stdout)
    try:
        screen.wait_for("› ")
        proc.stdin.write("how many flights?\n")
        proc.stdin.flush()
        screen.wait_for(ANSWER)
        deadline = time.monotonic() + 60
        while screen.text.count("› ") < 2:  # the prompt again, under the turn's last words
            assert time.monotonic() < deadline, screen.text
            time.sleep(0.05)
        prompt = time.monotonic()
    finally:
        frozen.thaw()
    try:
        shown = " ".join(screen.text.split())
        assert "may not be kept for follow-ups" in shown and "not saved" not in shown, shown
        assert prompt - answered[0] < TOLD_WITHIN_S, f"the prompt came {prompt - answered[0]:.1f} s after"

        fake_model.enqueue(text("Yes, 336,776."))  # Redis is back: the conversation goes on
        proc.stdin.write("sure?\n")
        proc.stdin.flush()
        screen.wait_for("Yes, 336,776.", timeout=60)
        proc.stdin.write("exit\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
        assert ANSWER in json.dumps(fake_model.requests[-1]["messages"])
    finally:
        proc.kill()
