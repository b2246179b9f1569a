"""7. Large results: a ~1,000,000-row warehouse result written to parquet in the workspace by the
sandbox's warehouse step, against plain pandas (`duckdb → DataFrame → to_parquet`) in a fresh
subprocess doing the same work, both with time and peak memory (RSS of the working process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from bench.harness import BenchResult, Figure, MemorySampler, demo_database, median, ratio, temp_dir

SQL = "SELECT f.* FROM flights AS f CROSS JOIN range({copies}) AS r(copy)"

BASELINE = """
import json, sys, time
import duckdb, pandas, pyarrow, pyarrow.parquet
db, sql, out = sys.argv[1:4]
con = duckdb.connect(db, read_only=True)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
df = con.sql(sql).df()
t1 = time.perf_counter()
df.to_parquet(out)
t2 = time.perf_counter()
print(json.dumps({"rows": len(df), "query_s": t1 - t0, "write_s": t2 - t1, "total_s": t2 - t0}), flush=True)
"""


def _baseline(db: str, sql: str, out: str) -> tuple[dict, float]:
    """Run the pandas baseline in a subprocess; (its timings, its peak RSS in MB while working)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", BASELINE, db, sql, out],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin and proc.stdout
    try:
        proc.stdout.readline()  # imports done: measure only the work, like a warm worker
        with MemorySampler(proc.pid, metric="rss", every_s=0.02) as mem:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return json.loads(line), mem.peak_single_kb / 1024


async def run(*, quick: bool = False) -> BenchResult:
    """Median time and peak RSS of the warehouse step vs the pandas baseline, same query, same rows."""
    from core.sandbox import StepRequest
    from core.sandbox_local import LocalSandbox

    result = BenchResult("large", "7. Large results")
    copies, repeats = (1, 1) if quick else (3, 3)
    sql = SQL.format(copies=copies)
    db = demo_database()
    step_t, step_mem, base_t, base_write, base_mem, rows, size = [], [], [], [], [], 0, 0
    with temp_dir("large") as tmp:
        sandbox = LocalSandbox(workspaces=tmp / "ws", warehouse=db)
        await sandbox.start()
        try:
            assert sandbox._proc is not None
            for n in range(repeats):
                req = StepRequest(
                    kind="warehouse", session_id="bench-large", code=sql, save_as=f"big{n}", timeout_s=600
                )
                with MemorySampler(sandbox._proc.pid, include_root=False, metric="rss", every_s=0.02) as mem:
                    started = time.perf_counter()
                    res = await sandbox.run(req)
                    step_t.append(time.perf_counter() - started)
                if not res.ok:
                    raise RuntimeError(f"large step failed: {res.error}")
                step_mem.append(mem.peak_single_kb / 1024)
                rows = res.rows or 0
                size = (tmp / "ws" / "bench-large" / res.saved_as).stat().st_size
                timings, peak = _baseline(str(db), sql, str(tmp / f"pandas{n}.parquet"))
                base_t.append(timings["total_s"])
                base_write.append(timings["write_s"])
                base_mem.append(peak)
        finally:
            await sandbox.close()
        pandas_size = (tmp / "pandas0.parquet").stat().st_size
    st, bt = median(step_t), median(base_t)
    sm, bm = median(step_mem), median(base_mem)
    result.add(
        Figure(
            name=f"large: {rows:,} rows → parquet via the warehouse step (time)",
            value=st,
            unit="s",
            baseline=bt,
            baseline_name="duckdb → pandas → to_parquet, warm subprocess",
            ratio=ratio(st, bt),
        )
    )
    result.add(
        Figure(
            name=f"large: {rows:,} rows → parquet via the warehouse step (peak RSS)",
            value=sm,
            unit="MB",
            baseline=bm,
            baseline_name="the pandas subprocess",
            ratio=ratio(sm, bm),
        )
    )
    result.note(
        f"Median of {repeats}. The step round trip includes fork, isolation, the query, Arrow → parquet "
        f"(zstd) and a bounded preview; the file is {size / 1e6:.1f} MB (pandas/snappy: "
        f"{pandas_size / 1e6:.1f} MB). The baseline's to_parquet alone takes {median(base_write):.2f} s. "
        "Peak memory is the RSS of the process doing the work, sampled every 20 ms, preloaded "
        "libraries included in both (the step child shares them with the fork server)."
    )
    return result
