"""The final result of a turn: the last successful query step that saved a parquet file."""

from __future__ import annotations

from core.events import StepRecord
from core.final_result import final_query


def step(tool: str, sql: str = "", *, ok: bool = True, files: tuple[str, ...] = ()) -> StepRecord:
    return StepRecord(
        step_id="s", tool=tool, input={"sql": sql}, ok=ok, summary="", duration_s=0, files=files
    )


def test_the_last_successful_query_wins_over_later_python_and_failed_queries():
    steps = [
        step("query_warehouse", "SELECT 1", files=("a.parquet",)),
        step("run_sql", "SELECT 2", files=("b.parquet",)),
        step("query_warehouse", "SELECT broken", ok=False),
        step("run_python", files=("chart.png",)),
    ]
    final = final_query(steps)
    assert (final.tool, final.sql, final.path) == ("run_sql", "SELECT 2", "b.parquet")
    assert final_query(steps, tools=("query_warehouse",)).sql == "SELECT 1"


def test_stored_turn_records_work_too_and_no_query_is_none():
    record = {"tool": "query_warehouse", "ok": True, "input": {"sql": "SELECT 3"}, "files": ["c.parquet"]}
    assert final_query([record]).path == "c.parquet"
    assert final_query([step("describe_table"), step("run_python")]) is None
