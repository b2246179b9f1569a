"""Suite files: what loads, what is refused (one sentence naming the question), and the demo suite."""

from __future__ import annotations

import contextlib
from pathlib import Path

import duckdb
import pytest

from core.eval_suite import DEMO_SUITE, SuiteError, expected_rows, load_suite, parse_suite


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_a_minimal_suite_loads_with_defaults_applied(tmp_path):
    suite = load_suite(
        write(
            tmp_path,
            "defaults: {tolerance: 0.01}\n"
            "questions:\n"
            "  - {id: a, question: 'How many?', gold_sql: SELECT 1}\n"
            "  - {id: 2, question: 'Which?', expected: [[JFK, 3]], tolerance: 0, ordered: true}\n",
        )
    )
    first, second = suite.questions
    assert first.rules().tolerance == 0.01 and second.rules().tolerance == 0
    assert second.key == "2" and second.rules().ordered


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("questions: [", "is not valid YAML at line"),
        ("- just a list", "needs a top-level `questions:` list"),
        ("questions: []", "questions"),
        ("questions:\n  - {id: a, question: q}", "question 1 ('a') of"),
        ("questions:\n  - {id: a, question: q}", "give exactly one of gold_sql or expected"),
        ("questions:\n  - {id: a, question: q, gold_sql: SELECT 1, expected: 1}", "exactly one"),
        ("questions:\n  - {question: q, gold_sql: SELECT 1}", "id is missing"),
        ("questions:\n  - {id: a, gold_sql: SELECT 1}", "question is missing"),
        (
            "questions:\n  - {id: a, question: q, gold_sql: x}\n  - {id: a, question: r, gold_sql: y}",
            "used twice",
        ),
        ("questions:\n  - {id: a, question: q, gold_sql: x, tolerance: -1}", "tolerance"),
        ("questions:\n  - {id: a, question: q, gold_sql: x, order_by: [n]}", "order_by only applies"),
        ("questions:\n  - {id: a, question: q, expected: [[1, 2], [3]]}", "same number of values"),
        ("questions:\n  - {id: a, question: q, expected: {a: 1}}", "not a mapping"),
        ("defaults: {tolerence: 1}\nquestions:\n  - {id: a, question: q, gold_sql: x}", "`defaults:`"),
        ("questions: 3", "questions"),
    ],
)
def test_bad_suites_are_one_sentence(tmp_path, text, message):
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value) and str(caught.value).endswith(".")


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("questions: []", "there are no questions: add at least one under `questions:`."),
        (
            "questions:\n  - {id: a, question: q, gold_sql: x}\n  - {id: a, question: r, gold_sql: y}",
            "the id 'a' is used twice.",
        ),
    ],
)
def test_whole_suite_problems_read_as_sentences_not_pydantic(tmp_path, text, sentence):
    """They read "questions List should have at least 1 item after validation, not 0" and "questions
    the id 'a' is used twice"."""
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert str(caught.value) == f"In {path}: {sentence}"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (  # PyYAML gives up at the end of the stream: it said "at line 5" of this 4-line file
            'questions:\n  - id: a\n    question: "How many flights?\n    gold_sql: SELECT 1\n',
            ": the quote opened at line 3 is never closed.",
        ),
        (
            "questions:\n  - id: a\n    question: 'How many flights?\n    gold_sql: SELECT 1\n",
            ": the quote opened at line 3 is never closed.",
        ),
        (  # the next question's opening quote closed it: the error surfaces lines below the cause
            'questions:\n  - id: a\n    question: "How many\n    gold_sql: SELECT 1\n'
            '  - id: b\n    question: "Which?"\n    gold_sql: SELECT 2\n',
            " at line 6: the quote opened at line 3 only closes there, so line 3 lacks its closing quote.",
        ),
        ("questions: [\n", " at line 1."),  # not line 2 of a 1-line file
        ("questions:\n\t- id: a\n", " at line 2 (a tab: YAML indents with spaces)."),
        ("questions:\n  - id: a\n   question: x\n", " at line 3."),
    ],
)
def test_invalid_yaml_points_at_the_line_where_the_problem_starts(tmp_path, text, problem):
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert str(caught.value) == f"The suite {path} is not valid YAML{problem}"


def test_a_missing_file_is_one_sentence(tmp_path):
    with pytest.raises(SuiteError, match="There is no suite file"):
        load_suite(tmp_path / "nope.yaml")


def test_unknown_keys_are_warnings_not_errors():
    suite = parse_suite({"questions": [{"id": "a", "question": "q", "gold_sql": "x", "tolerence": 1}]})
    assert suite.warnings() == ["question 'a': unknown key 'tolerence' ignored"]


@pytest.mark.parametrize(
    ("expected", "rows"),
    [
        (336776, [(336776,)]),
        (["JFK", "LGA"], [("JFK",), ("LGA",)]),
        ([["JFK", 1], ["LGA", 2]], [("JFK", 1), ("LGA", 2)]),
        ([{"origin": "JFK", "n": 1}], [("JFK", 1)]),
        ([], []),
    ],
)
def test_expected_values_become_rows(expected, rows):
    assert expected_rows(expected)[1] == rows


def test_the_demo_suite_is_big_enough_and_spans_the_levels():
    suite = load_suite(DEMO_SUITE)
    assert len(suite.questions) >= 40 and not suite.warnings()
    levels = {q.level for q in suite.questions}
    assert levels == {"easy", "medium", "hard"}
    sql = " ".join(q.gold_sql or "" for q in suite.questions).lower()
    for feature in ("over (", "join weather", "join planes", "make_date", "lag("):
        assert feature in sql, feature


def test_every_demo_gold_sql_returns_rows_on_the_demo_warehouse(home):
    suite = load_suite(DEMO_SUITE)
    with contextlib.closing(
        duckdb.connect(str(home / "warehouse" / "nycflights13.duckdb"), read_only=True)
    ) as con:
        for q in suite.questions:
            rows = con.sql(q.gold_sql).fetchall()
            assert rows, q.id
            assert all(v is not None for row in rows for v in row), q.id


def test_the_demo_suite_ships_in_the_package():
    # hatch includes every file under a package folder; the suite must sit inside `core/`.
    assert DEMO_SUITE.is_relative_to(Path(__file__).resolve().parents[2] / "core")


Q = "questions:\n  - {id: a, question: q, gold_sql: x"


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (Q + ", tolerance: -1}", "question 1 ('a') of {path}: tolerance must be 0 or more."),
        (Q + ", tolerance: 2}", "question 1 ('a') of {path}: tolerance must be less than 1."),
        (Q + ", tolerance: lots}", "question 1 ('a') of {path}: tolerance must be a number."),
        (Q + ", ordered: maybe}", "question 1 ('a') of {path}: ordered must be true or false."),
        (Q + ", ordered: true, order_by: n}", "question 1 ('a') of {path}: order_by must be a list."),
        (
            Q + ", ordered: true, order_by: [[n]]}",
            "question 1 ('a') of {path}: order_by item 1 must be text.",
        ),
        (Q + ", question: [q]}", "question 1 ('a') of {path}: question must be text."),
        (Q + ", question: ''}", "question 1 ('a') of {path}: question must not be empty."),
        (  # a union: pydantic's loc was `id.str`, its message the string member's alone
            "questions:\n  - {id: [1], question: q, gold_sql: x}",
            "question 1 ([1]) of {path}: id must be text or a whole number.",
        ),
        ("questions:\n  - just text", "question 1 of {path}: it must be a mapping (`key: value` lines)."),
        ("questions: 3", "{path}: questions must be a list."),
        ("name: [x]\n" + Q + "}", "{path}: name must be text."),
        (  # the question inherited the value: the sentence says where it was set
            "defaults: {tolerance: -1}\n" + Q + "}",
            "question 1 ('a') of {path}: tolerance (under `defaults:`) must be 0 or more.",
        ),
        (  # our validator's sentence names its key: not "expected expected mixes …"
            "questions:\n  - {id: a, question: q, expected: [[1, 2], 3]}",
            "question 1 ('a') of {path}: expected mixes rows and single values.",
        ),
    ],
)
def test_invalid_values_read_as_one_sentence_about_the_key(tmp_path, text, sentence):
    """pydantic's own message was glued to the key: "tolerance Input should be greater than or equal to 0"."""
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    assert str(caught.value) == "In " + sentence.format(path=path)
