"""The one fold of a turn's events that Slack, Teams and the terminal draw."""

from __future__ import annotations

import pytest

from bot.transcript import (
    WAITING,
    WORKING,
    Change,
    StepLine,
    Throttle,
    Transcript,
    brief,
    confirmation_said,
    format_bytes,
    step_outcome,
)
from core.events import (
    AnswerReady,
    ArtifactReady,
    StepFinished,
    StepRecord,
    StepStarted,
    Thinking,
    TurnFailed,
    TurnFinished,
    TurnStarted,
    TurnStats,
    Waiting,
)


def record(step_id: str, *, ok: bool = True, **kw) -> StepRecord:
    base = {
        "step_id": step_id,
        "tool": "query_warehouse",
        "input": {},
        "ok": ok,
        "summary": "",
        "duration_s": 0.25,
    }
    return StepRecord(**{**base, **kw})


def test_the_fold_keeps_titles_order_outcomes_answer_and_status():
    t = Transcript()
    assert t.apply(TurnStarted(turn_id="t", session_id="s", question="q")) is Change.STARTED
    assert t.apply(Thinking(turn_id="t")) is Change.THINKING and t.rows() == []  # the bare ping adds nothing
    assert t.apply(Thinking(turn_id="t", text="Let me  look\nat flights")) is Change.THINKING
    assert (
        t.apply(
            StepStarted(
                turn_id="t",
                step_id="a",
                tool="query_warehouse",
                title="Querying the warehouse",
                detail="SELECT 1\nFROM t",
            )
        )
        is Change.STEP
    )
    assert t.last == StepLine("a", "Querying the warehouse", detail="SELECT 1 FROM t")
    assert t.apply(StepFinished(turn_id="t", record=record("a", rows=16))) is Change.STEP
    assert (
        t.apply(StepFinished(turn_id="t", record=record("b", ok=False, error="boom\n  at line 2")))
        is Change.STEP
    )
    assert t.rows() == [
        "Let me look at flights",
        StepLine("a", "Querying the warehouse", "SELECT 1 FROM t", "done", "16 rows · 0.2 s"),
        StepLine("b", "query_warehouse", "", "failed", "boom at line 2"),
    ]
    artifact = ArtifactReady(
        turn_id="t", session_id="s", path="x.png", name="x.png", title="X", size=3, mime="image/png"
    )
    assert t.apply(artifact) is Change.ARTIFACT
    assert t.apply(AnswerReady(turn_id="t", text="42")) is Change.NOTHING and t.answer == "42"
    assert t.status() == WORKING
    stats = TurnStats(steps=2, duration_s=1.25)
    assert t.apply(TurnFinished(turn_id="t", session_id="s", ok=True, stats=stats)) is Change.FINISHED
    assert t.status() == "Done — 2 steps in 1.2 s"


def test_an_answer_without_steps_is_done_without_counting_none():
    """A text-only answer left its Teams progress card saying "Done — 0 steps in 2.1 s"."""
    t = Transcript()
    t.apply(TurnFinished(turn_id="t", session_id="s", ok=True, stats=TurnStats(duration_s=2.14)))
    assert t.status() == "Done in 2.1 s"


def test_a_failed_turn_keeps_its_failure_and_says_stopped():
    t = Transcript()
    t.apply(TurnFailed(turn_id="t", error_id="e1", message="Nope."))
    t.apply(TurnFinished(turn_id="t", session_id="s", ok=False, stats=TurnStats()))
    assert t.failure is not None and t.failure.message == "Nope." and t.status() == "Stopped"


def test_a_step_still_running_when_the_turn_ends_is_drawn_as_stopped():
    """A turn stopped mid-step (Ctrl-C, a shutdown) ends without that step's finish: its line kept
    "running" — a spinner in the Slack thread — under the sentence that said the answer stopped."""
    t = Transcript()
    t.apply(StepStarted(turn_id="t", step_id="a", tool="query_warehouse", title="Querying", detail="x"))
    t.apply(StepFinished(turn_id="t", record=record("a")))
    t.apply(StepStarted(turn_id="t", step_id="b", tool="run_python", title="Running Python", detail="y"))
    t.apply(TurnFailed(turn_id="t", error_id="", message="This answer was stopped before it finished."))
    t.apply(TurnFinished(turn_id="t", session_id="s", ok=False, stats=TurnStats()))
    assert [(line.step_id, line.status) for line in t.rows()] == [("a", "done"), ("b", "failed")]
    assert t.cut_short == [t.steps["b"]] and t.steps["b"].outcome == "stopped before it finished"


TRACEBACK = 'error:\nTraceback (most recent call last):\n  File "step.py", line 2, in <module>\n'
MEMORY_HINT = (
    "(The step's memory limit is 512 MB: work on less data at once, or let SQL aggregate before pandas.)"
)


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (TRACEBACK + "ZeroDivisionError: division by zero", "ZeroDivisionError: division by zero"),
        (  # what it printed first, the line of code and Python's ^^^ marks: all for the model
            "stdout:\nloading\n" + TRACEBACK + "    df['nope']\n    ~~^^^^^^^^\nKeyError: 'nope'",
            "KeyError: 'nope'",
        ),
        (
            'error:\nTraceback (most recent call last):\n  File "step.py", line 1\n    print(1\n         ^\n'
            "SyntaxError: '(' was never closed",
            "SyntaxError: '(' was never closed",
        ),
        (  # an exception raised while handling another: the last one
            TRACEBACK + "KeyError: 'a'\n\nDuring handling of the above exception, another exception "
            'occurred:\n\nTraceback (most recent call last):\n  File "step.py", line 4, in <module>\n'
            "ValueError: no a",
            "ValueError: no a",
        ),
        (TRACEBACK + "MemoryError\n" + MEMORY_HINT, brief("MemoryError " + MEMORY_HINT, 150)),
        (
            "error:\nCatalog Error: Table with name nope does not exist!",
            "error: Catalog Error: Table with name nope does not exist!",
        ),  # no traceback: as it was
    ],
)
def test_a_failed_python_step_shows_its_exception_not_the_traceback(error, shown):
    """A Python step's card read "error: Traceback (most recent call last): File "step.py", line 2, in
    <module> ZeroDivisionError: …": the frames are for the model, the person needs the exception."""
    assert step_outcome(record("a", ok=False, tool="run_python", error=error)) == shown


def test_a_turn_waiting_for_its_threads_previous_one_says_so_until_it_runs():
    """The status line (Slack's status message, Teams' card) said "Working on it…" — or a stream sat
    empty — while the question only waited for the thread's previous one."""
    t = Transcript()
    t.apply(TurnStarted(turn_id="t", session_id="s", question="q"))
    assert t.apply(Waiting(turn_id="t")) is Change.WAITING and t.waiting and t.status() == WAITING
    t.apply(Thinking(turn_id="t"))  # its model call starts: it runs now
    assert not t.waiting and t.status() == WORKING


def test_step_outcome_brief_and_bytes():
    assert (
        step_outcome(record("a", rows=1234, bytes_scanned=1_500_000, duration_s=2.0))
        == "1,234 rows · 1.5 MB scanned · 2.0 s"
    )
    assert (
        step_outcome(record("a", rows=1, duration_s=0.1)) == "1 row · 0.1 s"
    )  # was "1 rows" (Slack tasks, chat)
    assert step_outcome(record("a", ok=False, summary="")) == "failed"
    assert brief("x" * 10, 5) == "xxxx…" and brief("a\n b") == "a b"
    assert [format_bytes(n) for n in (0, 1500, 12_000_000)] == ["0 B", "1.5 KB", "12 MB"]


def test_throttle_allows_one_redraw_per_interval():
    now = [100.0]
    throttle = Throttle(1.0, clock=lambda: now[0])
    assert throttle.wait_s() == 0
    throttle.mark()
    now[0] += 0.25
    assert throttle.wait_s() == 0.75
    now[0] += 1
    assert throttle.wait_s() == 0


@pytest.mark.parametrize(
    ("yes", "answer", "said"),
    [
        ("", True, "Running it."),
        ("Create", True, "Creating it."),
        ("Create", False, "Cancelled."),
        ("", None, "No answer, so I didn't run it."),
        ("Create", None, "No answer, so I didn't create the schedule."),
    ],
)
def test_a_confirmation_is_answered_in_the_words_of_what_it_asked(yes, answer, said):
    """Slack and Teams say the same: a schedule (its button says Create) is created, not "run"."""
    assert confirmation_said(yes, answer) == said
