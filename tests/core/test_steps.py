"""The step code itself (`core/steps.py`), run directly in a workspace directory as the sandbox runs it."""

from __future__ import annotations

import time
from types import SimpleNamespace

from core import steps
from core.sandbox import StepRequest
from core.steps import run_step


def test_unnamed_results_never_overwrite_each_other(tmp_path, monkeypatch):
    """Two queries without `save_as` in the same second (or at once) each keep their own file."""
    same_second = SimpleNamespace(time=lambda: 1_764_000_000.0, perf_counter=time.perf_counter)
    monkeypatch.setattr(steps, "time", same_second)
    saved = []
    for n in (1, 2):
        request = StepRequest(kind="sql", session_id="s-steps", code=f"SELECT {n} AS n", timeout_s=30)
        result = run_step(request, tmp_path, None)
        assert result.ok, result.error
        saved.append(result.saved_as)
    assert saved[0] != saved[1] and all(name.startswith("sql_") for name in saved)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == sorted(saved)
    named = run_step(
        StepRequest(
            kind="sql", session_id="s-steps", code="SELECT 3 AS n", timeout_s=30, save_as="three.parquet"
        ),
        tmp_path,
        None,
    )
    assert named.saved_as == "three.parquet"


def test_a_result_stopped_while_written_leaves_the_earlier_result_of_its_name_whole(tmp_path, monkeypatch):
    """`save_as="res"`, then a second query saving as `res` stopped at the time limit while its parquet
    was being written: the step keeps what it wrote, and the half-written file had replaced the first
    result ("No magic bytes found at end of file 'res.parquet'" for every later read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = pa.table({"n": [1, 2, 3]})
    assert steps.save_arrow(first, tmp_path, "res") == "res.parquet"
    real_write = pq.write_table

    def stopped_mid_way(table, where, **kwargs):
        with open(where, "wb") as out:
            out.write(b"PAR1 half a file")
        raise TimeoutError("the step's time limit")

    monkeypatch.setattr(pq, "write_table", stopped_mid_way)
    try:
        steps.save_arrow(pa.table({"n": list(range(10))}), tmp_path, "res")
    except TimeoutError:
        pass
    else:
        raise AssertionError("the write was not stopped")
    monkeypatch.setattr(pq, "write_table", real_write)
    assert pq.read_table(tmp_path / "res.parquet").equals(first)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.parquet"]  # nothing half-written left
    assert steps.save_arrow(pa.table({"n": [7]}), tmp_path, "res") == "res.parquet"  # a later write lands
    assert pq.read_table(tmp_path / "res.parquet").column("n").to_pylist() == [7]


def test_what_killed_writes_left_is_removed_by_the_next_write(tmp_path):
    """A step killed at its time limit mid-write (SIGKILL: no cleanup runs) leaves its dot-name behind:
    unseen by people and the model, but counted against the workspace's quota — and an unnamed result's
    name is never written again. The next result written removes every such leftover that nobody has
    written to for a while (a fresh one may be another step's, on Modal)."""
    import os
    import time

    import pyarrow as pa

    for left in (".sql_1764000000_3fa9.parquet.partial", ".res.parquet.partial"):
        (tmp_path / left).write_bytes(b"PAR1 half" * 1000)
        killed = time.time() - steps.STALE_PARTIAL_S - 5
        os.utime(tmp_path / left, (killed, killed))
    # on Modal another step of the session may be writing its own result right now: left alone
    (tmp_path / ".busy.parquet.partial").write_bytes(b"PAR1 being written")
    (tmp_path / ".keep").write_text("a dot-file of the model's own")
    assert steps.save_arrow(pa.table({"n": [1]}), tmp_path, "other") == "other.parquet"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".busy.parquet.partial", ".keep", "other.parquet"]


def test_pandas_durations_and_periods_a_python_step_saves_are_text_for_the_sql_after_it(
    tmp_path, monkeypatch
):
    """`df.to_parquet` with a timedelta and a Period column, then `SELECT *`: the model read `td int64,
    per int64` and 93784500000 and 648 (µs, and months since 1970) for a day and two hours, and 2024-01."""
    code = (
        "import pandas as pd\n"
        "pd.DataFrame({'td': pd.to_timedelta(['1 days 02:03:04.5', None]),\n"
        "              'per': pd.period_range('2024-01', periods=2, freq='M')}).to_parquet('pd.parquet')\n"
        "print('written')\n"
    )
    monkeypatch.chdir(tmp_path)  # as the sandbox runs a step: in its workspace
    wrote = run_step(StepRequest(kind="python", session_id="s-steps", code=code, timeout_s=60), tmp_path)
    assert wrote.ok, wrote.error
    assert wrote.output.splitlines()[-1] == (
        "Saved as text, as DuckDB and the CSV cannot read them (pd.to_timedelta or pd.PeriodIndex read "
        "them back): pd.parquet: td (duration), per (period[M])."
    )
    assert wrote.files == [
        {"path": "pd.parquet", "size": (tmp_path / "pd.parquet").stat().st_size, "kind": "parquet"}
    ]
    sql = StepRequest(kind="sql", session_id="s-steps", code="SELECT * FROM 'pd.parquet'", timeout_s=30)
    read = run_step(sql, tmp_path)
    assert read.ok, read.error
    assert read.columns == [{"name": "td", "type": "string"}, {"name": "per", "type": "string"}]
    assert read.preview.splitlines() == [
        "td                per",
        "1 day 02:03:04.5  2024-01",
        "NULL              2024-02",
    ]


def test_a_saved_date_holding_infinity_stays_a_date_for_the_sql_after_it(tmp_path, monkeypatch):
    """A slowly-changing dimension's open end (`'infinity'::DATE`) made the whole column text, and the
    next step's `valid_to > DATE '2022-01-01'` failed ("Cannot compare values of type VARCHAR and
    DATE"). The model is told which column holds it and how pandas can read it."""
    save = StepRequest(
        kind="sql",
        session_id="s-steps",
        timeout_s=30,
        save_as="scd",
        code="SELECT * FROM (VALUES (1, DATE '2020-03-05', 'infinity'::DATE), "
        "(2, DATE '2021-07-01', DATE '2023-01-01')) v(id, valid_from, valid_to)",
    )
    monkeypatch.chdir(tmp_path)  # as the sandbox runs a step: in its workspace
    saved = run_step(save, tmp_path, None)
    assert saved.ok, saved.error
    assert saved.columns[2] == {"name": "valid_to", "type": "date32[day]"}
    assert "valid_to (date32[day]: infinity)" in saved.output and "pd.read_parquet" in saved.output
    assert saved.preview.splitlines()[1].split() == ["1", "2020-03-05", "infinity"]
    later = StepRequest(
        kind="sql",
        session_id="s-steps",
        timeout_s=30,
        code="SELECT id FROM 'scd.parquet' WHERE valid_to > DATE '2022-01-01' ORDER BY id",
    )
    result = run_step(later, tmp_path, None)
    assert result.ok, result.error
    assert result.rows == 2 and result.output == ""


def test_a_python_step_walks_its_workspace_twice_not_three_times(tmp_path, monkeypatch):
    """Before and after the code; the files made portable update the closing walk, not a third one
    (16 ms a step in a 2,000-file workspace). The rewritten file's new size is what is reported."""
    walks = []
    real = steps.snapshot
    monkeypatch.setattr(steps, "snapshot", lambda workspace: walks.append(1) or real(workspace))
    monkeypatch.chdir(tmp_path)
    code = "import pandas as pd\npd.DataFrame({'td': pd.to_timedelta(['1 s'])}).to_parquet('td.parquet')\n"
    result = run_step(StepRequest(kind="python", session_id="s-steps", code=code, timeout_s=60), tmp_path)
    assert result.ok, result.error
    assert len(walks) == 2
    assert result.files == [
        {"path": "td.parquet", "size": (tmp_path / "td.parquet").stat().st_size, "kind": "parquet"}
    ]
