"""The step code itself (`core/steps.py`), run directly in a workspace directory as the sandbox runs it."""

from __future__ import annotations

import os
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


_SHOWN_AT_ONCE = """
import duckdb, sys
from pathlib import Path

real = duckdb.connect


class Shown:
    # the connection with its bar drawn from the first millisecond (not after 2 s), and "<ready>" said
    # before its first statement past the settings (the settings' own run draws a bar of its own)
    def __init__(self, con):
        con.execute("SET progress_bar_time=0")  # (this turns the bar on too)
        self._con, self._ready = con, False

    def __getattr__(self, name):
        return getattr(self._con, name)

    def execute(self, sql, *args, **kwargs):
        if not self._ready and not sql.startswith("SET"):
            print("<ready>", flush=True)
            self._ready = True
        return self._con.execute(sql, *args, **kwargs)


def connect(*args, **kwargs):
    return Shown(real(*args, **kwargs))

duckdb.connect = connect
from core.steps import connect_duckdb
from core.warehouse import build_demo_database

work = Path(sys.argv[1])
con = connect_duckdb(work, ":memory:")
con.execute("SELECT count(*) FROM range(20000000) t(i) WHERE i > 3").fetchall()
print("<build>", flush=True)
build_demo_database(work / "demo.duckdb")
print("done")
"""


def test_no_duckdb_connection_draws_a_progress_bar(tmp_path):
    """DuckDB draws a progress bar on stdout for a query past 2 s: on a slow host it landed in a step's
    output and, while the demo database was built, on the person's terminal and in front of the JSON a
    child process answered with (a CI run's failure). Here DuckDB is made to draw it at once, in a child
    process whose stdout is read whole."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _SHOWN_AT_ONCE, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.split("<ready>")
    assert len(said) == 3 and said[-1].endswith("done\n"), done.stdout[-300:]
    for after in said[1:]:  # what each connection's queries drew, up to what came next
        assert "%" not in after.split("<build>")[0], after[:300]
