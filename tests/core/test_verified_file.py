"""The curated `verified_queries.yaml` as a data team writes it — and gets it wrong: each mistake stops
start-up with one sentence naming the entry, instead of loading something other than what was meant."""

from __future__ import annotations

import pytest

from core.config import ConfigError
from core.verified import load_curated
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
