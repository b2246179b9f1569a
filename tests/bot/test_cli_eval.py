"""`datathread eval` as a user (or CI) runs it, against the scripted Messages API: the console script
as a real subprocess for its exit codes and one-sentence errors, the same typer app in process for the
scored runs (each subprocess would start its own sandbox fork server)."""

from __future__ import annotations

import json

from tests.fakes.anthropic_scripts import by_question
from tests.fakes.cli import invoke, run

SUITE = """
questions:
  - id: jfk
    question: How many flights left JFK?
    gold_sql: SELECT count(*) FROM flights WHERE origin = 'JFK'
  - id: airlines
    question: How many airlines are there?
    expected: 16
  - id: by_origin
    question: Flights per origin?
    gold_sql: SELECT origin, count(*) FROM flights GROUP BY origin
  - id: lga
    question: How many flights left LGA?
    gold_sql: SELECT count(*) FROM flights WHERE origin = 'LGA'
"""

SCRIPT = {
    "How many flights left JFK?": "SELECT count(*) AS n FROM flights WHERE origin = 'JFK'",
    "How many airlines are there?": "SELECT count(*) FROM airlines",
    "Flights per origin?": "SELECT origin, count(*) AS n FROM flights GROUP BY 1",
    "How many flights left LGA?": "SELECT count(*) FROM flights WHERE origin = 'EWR'",  # wrong filter
}


def test_eval_reports_accuracy_and_exits_1_below_the_minimum(home, fake_model, tmp_path):
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE)
    report_path, md_path = tmp_path / "out" / "report.json", tmp_path / "report.md"
    fake_model.enqueue(*[by_question(SCRIPT)] * 12)
    args = [
        "eval",
        str(suite),
        "--output",
        str(report_path),
        "--markdown",
        str(md_path),
        "--concurrency",
        "2",
    ]
    result = invoke([*args, "--min-accuracy", "0.8"], home, env=env)  # the entry point: tests below
    assert result.returncode == 1, result.stderr
    assert "Accuracy 75.0% is below the minimum of 80.0%." in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    report = json.loads(report_path.read_text())
    assert report["accuracy"] == 0.75
    assert [(q["id"], q["correct"]) for q in report["questions"]] == [
        ("jfk", True),
        ("airlines", True),
        ("by_origin", True),
        ("lga", False),
    ]
    assert "accuracy 75.0% (3/4)" in result.stdout  # the terminal table's title
    assert "**Accuracy 75.0%** (3/4 correct" in md_path.read_text()

    requests_before = len(fake_model.requests)
    again = invoke([*args, "--resume", "--min-accuracy", "0.75"], home, env=env)
    assert again.returncode == 0, again.stderr
    assert "Resuming: 4 questions already scored" in again.stderr
    assert len(fake_model.requests) == requests_before  # nothing asked twice
    assert json.loads(report_path.read_text())["accuracy"] == 0.75


def test_a_bad_suite_exits_2_with_one_sentence(home, tmp_path):
    suite = tmp_path / "bad.yaml"
    suite.write_text("questions:\n  - id: a\n    question: no gold here\n")
    result = run(["eval", str(suite)], home)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "give exactly one of gold_sql or expected" in lines[0]
    assert "Traceback" not in result.stderr


def test_a_missing_suite_and_a_bad_resume_exit_2(home, tmp_path):
    assert invoke(["eval", str(tmp_path / "nope.yaml")], home).returncode == 2
    assert invoke(["eval"], home).returncode == 2
    not_a_report = tmp_path / "r.json"
    not_a_report.write_text("{}")
    resumed = invoke(["eval", "--demo", "--resume", "--output", str(not_a_report)], home)
    assert resumed.returncode == 2 and "cannot resume from" in resumed.stderr
    # one sentence each, not pydantic's report over three lines or "[Errno 21] Is a directory: '…'"
    not_a_report.write_text("not json")
    resumed = invoke(["eval", "--demo", "--resume", "--output", str(not_a_report)], home)
    assert (
        resumed.stderr
        == f"error: cannot resume from {not_a_report}: it is not a report of `datathread eval`.\n"
    )
    folder = invoke(["eval", str(tmp_path)], home)
    assert (
        folder.returncode == 2
        and folder.stderr == f"error: Cannot read the suite {tmp_path}: is a directory.\n"
    )


def test_a_report_never_overwrites_its_suite(home, tmp_path):
    """`--output SUITE.yaml` replaced the suite written by hand with the JSON report (a newcomer trial)."""
    suite = tmp_path / "mine.yaml"
    suite.write_text(SUITE)
    for args in (
        ["--output", str(suite)],
        ["--markdown", str(suite)],
        ["-o", "r.json", "--markdown", "r.json"],
    ):
        result = invoke(["eval", str(suite), *args], home)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "overwrite the suite" in result.stderr or "both name r.json" in result.stderr
    assert suite.read_text() == SUITE


def test_demo_refuses_a_bigquery_warehouse_in_one_sentence(home):
    """The demo suite's gold SQL names the DuckDB demo tables: on BigQuery every answer would score wrong."""
    result = invoke(
        ["eval", "--demo"], home, env={"DATATHREAD_WAREHOUSE": "bigquery", "ANTHROPIC_API_KEY": "sk-x"}
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "demo DuckDB warehouse" in lines[0] and "Traceback" not in result.stderr


def test_demo_without_a_key_ends_with_the_key_sentence(home):
    result = invoke(["eval", "--demo"], home)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0] and "Traceback" not in result.stderr


def test_an_unreachable_model_stops_the_demo_early_with_one_sentence(home, tmp_path):
    """Every question would fail the same way: stop after a few, say why and where to look, exit 2.
    The count is of the failures printed: the questions running when the third failure in a row came
    (four at once by default) finish too, and it said "Stopped after 3 …" under six of them."""
    report_path = tmp_path / "report.json"
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-0", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}  # nothing there
    result = run(["eval", "--demo", "--output", str(report_path)], home, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout and result.stdout == ""  # no results table
    *progress, last = result.stderr.strip().splitlines()
    failed = [line for line in progress if line.startswith("! ")]
    assert last.startswith(
        f"error: Stopped after {len(failed)} questions failed because the Claude API could"
    )
    assert "`datathread doctor`" in last and f"`--resume` from {report_path}" in last
    report = json.loads(report_path.read_text())
    assert report["stopped_by"] == "unreachable"
    assert 3 <= len(failed) == len(report["questions"]) < report["totals"]["questions"]  # not the whole suite
    assert all(q["fault"] == "unreachable" for q in report["questions"])


def test_counts_of_one_are_singular(home, fake_model, tmp_path):
    """The totals said "1 model calls", the Markdown "1 errors" and a resume "1 questions"."""
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "questions:\n"
        "  - {id: airlines, question: 'How many airlines are there?', expected: 16}\n"  # one call: no query
        "  - {id: broken, question: 'Never asked', gold_sql: SELECT no_such_column FROM flights}\n"
    )
    report_path, md_path = tmp_path / "report.json", tmp_path / "report.md"
    fake_model.enqueue(by_question({}))
    args = ["eval", str(suite), "--output", str(report_path), "--markdown", str(md_path)]
    result = invoke(args, home, env=env)
    assert result.returncode == 0, result.stderr
    assert "1 model call ·" in result.stdout, result.stdout  # the table's caption
    assert "(0/2 correct, 1 wrong, 1 error)" in md_path.read_text()
    again = invoke([*args, "--resume"], home, env=env)
    assert again.returncode == 0, again.stderr
    assert f"Resuming: 1 question already scored in {report_path}." in again.stderr
