"""The curated `verified_queries.yaml` as a data team writes it — and gets it wrong: each mistake stops
start-up with one sentence naming the entry, instead of loading something other than what was meant."""

from __future__ import annotations

import time

import pytest

from core.config import ConfigError
from core.verified import example_block, load_curated
from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke

REFUSED = [  # (sql, what the policy's reason says) — each loaded and was offered as verified
    ("DELETE FROM flights", "DELETE changes data"),
    ("SELECT 1; SELECT 2", "found 2 statements"),
    ("COPY (SELECT * FROM flights) TO '/tmp/x.csv'", "COPY reads or writes files"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv() is not available"),
]


def write(tmp_path, body: str):
    path = tmp_path / "verified_queries.yaml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize("dialect", ["duckdb", "bigquery"])
@pytest.mark.parametrize(("sql", "reason"), REFUSED)
def test_sql_the_policy_refuses_stops_loading_naming_the_entry(tmp_path, sql, reason, dialect):
    path = write(
        tmp_path,
        "queries:\n  - question: Flights from JFK?\n    sql: SELECT count(*) FROM flights\n"
        f'  - question: Total flights?\n    sql: "{sql}"\n',
    )
    with pytest.raises(ConfigError) as caught:
        load_curated(path, dialect)
    message = str(caught.value)
    assert message.startswith(f'Entry 2 of {path} ("Total flights?") has SQL the bot would refuse'), message
    assert reason in message and "\n" not in message


def test_a_refused_entry_stops_ask_before_the_model_sees_it(home, fake_model):
    """The trial's file: asking its question put `DELETE FROM flights` into the model's request as a
    verified example. Now `ask` ends with the entry's sentence, exit 2, and the model is not called."""
    notes = home.parent / "notes"
    notes.mkdir()
    (notes / "notes.yaml").write_text("tables: {}\n")
    (notes / "verified_queries.yaml").write_text(
        "queries:\n  - question: How many flights were there in total?\n    sql: DELETE FROM flights\n"
    )
    fake_model.enqueue(text("336,776 flights."))
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "DATATHREAD_TABLE_NOTES": str(notes / "notes.yaml"),
    }
    result = invoke(["ask", "How many flights were there in total?"], home, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert '("How many flights were there in total?")' in line and "DELETE changes data" in line, line
    assert fake_model.requests == []


ENTRY = (
    "queries:\n  - question: Flights from JFK?\n    sql: SELECT count(*) FROM flights WHERE origin = 'JFK'\n"
)


@pytest.mark.parametrize(
    ("tables", "read"),
    [
        ("flights", ("flights",)),  # was split into f, l, i, g, h, t, s
        ("flights, weather", ("flights", "weather")),
        ("[flights, weather]", ("flights", "weather")),
        ("[]", ("flights",)),  # none named: read from the SQL
    ],
)
def test_tables_as_one_string_are_table_names_not_letters(tmp_path, tables, read):
    (query,) = load_curated(write(tmp_path, ENTRY + f"    tables: {tables}\n"), "duckdb")
    assert query.tables == read


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            "    verfied_by: me\n",
            "has an unknown key `verfied_by` (did you mean `verified_by`?); the keys are ",
        ),
        ("    tables: {flights: 1}\n", "has `tables` that are not a list of table names"),
        ("    verified_by: [a, b]\n", "has a list as `verified_by`; it should be text."),
    ],
)
def test_a_mistake_in_an_entry_is_named(tmp_path, extra, said):
    path = write(tmp_path, ENTRY + extra)
    with pytest.raises(ConfigError) as caught:
        load_curated(path, "duckdb")
    assert str(caught.value).startswith(f'Entry 1 of {path} ("Flights from JFK?") {said}'), caught.value


def test_the_same_entry_twice_is_refused_naming_both(tmp_path):
    """Both loaded, with the same id: listed twice, and `show`/`remove` could only ever mean one."""
    other = "  - question: Flights from LGA?\n    sql: SELECT count(*) FROM flights WHERE origin = 'LGA'\n"
    path = write(tmp_path, ENTRY + other + ENTRY.removeprefix("queries:\n"))
    with pytest.raises(
        ConfigError, match=r'^Entries 1 and 3 of .* are the same verified query \("Flights from JFK\?"\)'
    ):
        load_curated(path, "duckdb")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            "queries:\n  - question: How many: flights\n    sql: SELECT 1\n",
            ' at line 2, column 23: mapping values are not allowed here (a value containing ": " needs quotes).',
        ),
        (
            'queries:\n  - question: "oops\n    sql: SELECT 1\n',
            ": the quote opened at line 2, column 15 is never closed.",
        ),
        (
            "queries:\n\t- question: x\n",
            " at line 2, column 1: found character '\\t' that cannot start any token; YAML indents with spaces, not tabs.",
        ),
        (
            "queries:\n  - question: x\n    sql: SELECT 1\n   - question: y\n",
            ' at line 4, column 4: expected the end of an indented block, but found a list item ("- "); check the indentation.',
        ),
        ("queries: [a, b\n", " at the end of the file: expected ',' or ']', but got the end of the file."),
    ],
)
def test_bad_yaml_says_where_and_what_in_words(tmp_path, body, said):
    """It said `cannot be read: ScannerError.`: no line, nothing a person could act on."""
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_curated(path, "duckdb")
    assert str(caught.value) == f"The verified queries file {path} is not valid YAML{said}"


TODAY = time.strftime("%Y-%m-%d", time.gmtime())


def test_an_entry_without_a_date_claims_none(tmp_path):
    """File entries were "verified on" the file's modification time — today, after any checkout or
    copy — and the model was told so. Without `verified_on` no date is claimed, to the model or in lists."""
    (query,) = load_curated(write(tmp_path, ENTRY + "    verified_by: data-team\n"), "duckdb")
    assert query.verified_at is None
    said = example_block(query)["text"]
    assert "verified by data-team. Use it" in said and TODAY not in said


@pytest.mark.parametrize(
    ("written", "day"),
    [
        ("2025-03-02", "2025-03-02"),
        ("'2025-03-02'", "2025-03-02"),
        ("2025-03-02T23:30:00-05:00", "2025-03-03"),
    ],
)
def test_verified_on_is_the_date_the_model_is_told(tmp_path, written, day):
    (query,) = load_curated(write(tmp_path, ENTRY + f"    verified_on: {written}\n"), "duckdb")
    assert time.strftime("%Y-%m-%d", time.gmtime(query.verified_at)) == day
    assert f"on {day}. Use it" in example_block(query)["text"]


@pytest.mark.parametrize(
    ("written", "said"),
    [("last week", "that is not a date: write it as 2026-03-02"), ("2999-01-01", "in the future")],
)
def test_a_verified_on_that_is_no_true_date_is_refused(tmp_path, written, said):
    path = write(tmp_path, ENTRY + f"    verified_on: {written}\n")
    with pytest.raises(
        ConfigError, match=f'^Entry 1 of .* \\("Flights from JFK\\?"\\) has a `verified_on` {said}'
    ):
        load_curated(path, "duckdb")
