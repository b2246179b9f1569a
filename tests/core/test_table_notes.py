"""Table notes (DATATHREAD_TABLE_NOTES) reach the model on the demo DuckDB warehouse as on BigQuery —
in the system prompt and in describe_table (list_tables shows a table's own comment first, as BigQuery's description) — and a broken notes file is one sentence
at start, never ignored."""

from __future__ import annotations

import asyncio

import pytest

from core.config import ConfigError
from core.policy import TableAllowlist
from core.table_notes import load_table_notes
from core.warehouse import DuckDBWarehouse
from tests.conftest import demo_database

NOTES = """
overview: Flights out of New York in 2013.
tables:
  flights: |
    One row per departure. dep_delay is in minutes; negative means early.
    Cancelled flights have a null dep_time.
"""


def test_the_demo_warehouse_gives_the_model_the_notes(tmp_path):
    path = tmp_path / "notes.yml"
    path.write_text(NOTES)
    warehouse = DuckDBWarehouse(demo_database(), None, notes=load_table_notes(path))  # type: ignore[arg-type]
    everything = TableAllowlist(())

    prompt = warehouse.prompt_notes()
    assert "Notes from the data team:\nFlights out of New York in 2013." in prompt
    assert "- flights: One row per departure." in prompt
    described = asyncio.run(warehouse.describe_table("flights", everything))
    assert "Notes from the data team:" in described and "Cancelled flights have a null dep_time." in described
    assert described.index("Notes from the data team:") < described.index("Columns:")


def test_without_notes_the_demo_warehouse_is_as_before():
    warehouse = DuckDBWarehouse(demo_database(), None)  # type: ignore[arg-type]
    assert "Notes from the data team" not in warehouse.prompt_notes()
    described = asyncio.run(warehouse.describe_table("flights", TableAllowlist(())))
    assert "Notes from the data team" not in described and "Columns:" in described


def test_a_broken_notes_file_is_one_sentence_with_its_line(tmp_path):
    path = tmp_path / "notes.yml"
    path.write_text("tables:\n  flights: [\n")
    with pytest.raises(ConfigError) as caught:
        load_table_notes(path)
    message = str(caught.value)
    assert message.startswith(f"DATATHREAD_TABLE_NOTES ({path}) is not valid YAML: ")
    assert "\n" not in message and message.endswith("(line 3).")
