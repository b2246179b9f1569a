"""`core.steps.warm()`: the fork server runs the SQL path once before it forks step children, so each
child inherits DuckDB's, pyarrow's and pandas' one-time start-up. It must leave the process as fit to
fork as before (no extra thread) and the children's SQL steps must work as ever."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import demo_database

ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = """
import json, os, sys, tempfile
from pathlib import Path
from core.zygote import _preload
_preload()
threads_before = len(os.listdir("/proc/self/task"))
from core import steps
from core.sandbox import StepRequest
steps.warm()
threads_after = len(os.listdir("/proc/self/task"))
results = []
for kind, code in (("sql", "SELECT 41 + 1 AS x"), ("warehouse", "SELECT count(*) AS n FROM airlines")):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ws = Path(tempfile.mkdtemp())
        res = steps.run_step(StepRequest(kind=kind, session_id="s", code=code, save_as="out"), ws, Path(sys.argv[1]))
        os.write(w, json.dumps([res.ok, res.rows, res.preview, sorted(f["path"] for f in res.files)]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    results.append(json.loads(data))
print(json.dumps({"before": threads_before, "after": threads_after, "results": results}))
"""


def test_warm_leaves_no_thread_behind_and_forked_sql_steps_still_work():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(demo_database())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["after"] == report["before"]  # DuckDB's threads ended with its closed database
    (sql_ok, sql_rows, sql_preview, sql_files), (wh_ok, wh_rows, wh_preview, wh_files) = report["results"]
    assert sql_ok and sql_rows == 1 and "42" in sql_preview and sql_files == ["out.parquet"]
    assert wh_ok and wh_rows == 1 and "16" in wh_preview and wh_files == ["out.parquet"]  # 16 airlines
