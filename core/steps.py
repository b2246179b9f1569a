"""The step runner: executes one `StepRequest` inside a workspace directory.

This exact code runs in a local sandbox child process and in the Modal sandbox container; it trusts
nothing in the request. It assumes it is already isolated (cwd = the workspace, privileges dropped)
and uses DuckDB's own settings so SQL cannot reach outside the workspace.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import time
import traceback
from pathlib import Path

from core.sandbox import StepRequest, StepResult

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_file_stem(name: str | None, default: str) -> str:
    """A `save_as` from the model becomes a plain file stem: no directories, no odd characters."""
    stem = _SAFE_NAME.sub("_", (name or "").strip()).strip("._")
    for ext in (".parquet", ".csv"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
    return stem[:80] or default


def default_stem(prefix: str) -> str:
    """A result's file name when the model gave none: unique, so two queries in the same second (or
    run at once) never overwrite each other's results (`sql_1764000000_3fa9`)."""
    return f"{prefix}_{int(time.time())}_{os.urandom(2).hex()}"


def snapshot(workspace: Path) -> dict[str, tuple[int, int]]:
    """path → (size, mtime_ns) for every regular file under the workspace, to report what changed."""
    out: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(workspace):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            full = Path(root) / name
            with contextlib.suppress(OSError):
                st = full.lstat()
                if full.is_symlink():
                    continue
                out[str(full.relative_to(workspace))] = (st.st_size, st.st_mtime_ns)
    return out


def changed_files(before: dict, after: dict) -> list[dict]:
    """Files that are new or different after a step, as plain dicts."""
    return [
        {"path": path, "size": size, "kind": Path(path).suffix.lstrip(".").lower()}
        for path, (size, mtime) in sorted(after.items())
        if before.get(path) != (size, mtime)
    ]


def _clip(text: str, limit: int) -> str:
    if len(text.encode()) <= limit:
        return text
    cut = text.encode()[: max(0, limit - 80)].decode(errors="ignore")
    return cut + f"\n… [output cut at {limit} bytes]"


def connect_duckdb(workspace: Path, database: str = ":memory:", read_only: bool = False):
    """A DuckDB connection for untrusted SQL: files only inside `workspace`, no extensions, locked."""
    import duckdb

    con = duckdb.connect(
        database,
        read_only=read_only,
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "threads": 2,
        },
    )
    ws = str(workspace).replace("'", "''")
    con.execute(f"SET allowed_directories=['{ws}']")
    con.execute(f"SET temp_directory='{ws}/.duckdb_tmp'")
    con.execute("SET enable_external_access=false")
    con.execute("SET lock_configuration=true")
    return con


def preview_table(table, rows: int, max_bytes: int) -> str:
    """A bounded, readable preview of an Arrow table (the model sees this, never the whole result)."""
    import pandas as pd

    # No thread pool for a few rows: starting Arrow's would cost each step child more than the rows do,
    # and `warm()` must leave the fork server without threads.
    head = table.slice(0, rows).to_pandas(use_threads=False)
    with pd.option_context("display.max_columns", 30, "display.width", 200, "display.max_colwidth", 60):
        text = head.to_string(index=False)
    return _clip(text, max_bytes)


def save_arrow(table, workspace: Path, stem: str) -> str:
    """Write an Arrow table as `<stem>.parquet` in the workspace; returns the relative name."""
    import pyarrow.parquet as pq

    name = f"{stem}.parquet"
    pq.write_table(table, workspace / name, compression="zstd")
    return name


def describe_arrow(table, request: StepRequest, workspace: Path, unnamed: str) -> StepResult:
    """Save a result table and describe it: file, rows, schema, bounded preview."""
    stem = safe_file_stem(request.save_as, unnamed)
    saved = save_arrow(table, workspace, stem)
    return StepResult(
        ok=True,
        rows=table.num_rows,
        columns=[{"name": f.name, "type": str(f.type)} for f in table.schema],
        preview=preview_table(table, request.preview_rows, request.preview_bytes),
        saved_as=saved,
    )


def warm() -> None:
    """Run the SQL path once on a one-row table, in the fork server before it forks any step.

    Each step child is a fork: whatever the parent has done once, the child finds done. The first
    DuckDB database of a process, pyarrow's pandas shim (set up on the first `to_pandas`), pandas'
    string formatting modules and the zstd parquet writer all cost time the first time only, and
    without this every SQL step paid them again. DuckDB's threads end with its database (closed
    here), so the fork server still forks with no extra threads; nothing is written to disk.
    """
    import pyarrow.parquet as pq

    con = connect_duckdb(Path(tempfile.gettempdir()))  # a one-row query: nothing spills, nothing is written
    try:
        table = con.sql("SELECT 1 AS x, 'a' AS s").to_arrow_table()
    finally:
        con.close()
    preview_table(table, 1, 1000)
    pq.write_table(table, io.BytesIO(), compression="zstd")


def _run_sql(request: StepRequest, workspace: Path) -> StepResult:
    return _query(connect_duckdb(workspace), request, workspace, "sql")


def _query(con, request: StepRequest, workspace: Path, prefix: str) -> StepResult:
    try:
        relation = con.sql(request.code)
        if relation is None:
            return StepResult(ok=True, output="Statement ran; it returned no rows.")
        table = relation.to_arrow_table()
        return describe_arrow(table, request, workspace, unnamed=default_stem(prefix))
    finally:
        con.close()


def _run_warehouse(request: StepRequest, workspace: Path, warehouse: Path) -> StepResult:
    return _query(connect_duckdb(workspace, str(warehouse), read_only=True), request, workspace, "query")


def _run_python(request: StepRequest, workspace: Path) -> StepResult:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    scope: dict = {"__name__": "__main__", "__file__": str(workspace / "step.py")}
    ok, error = True, ""
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            exec(compile(request.code, "step.py", "exec"), scope)
        except SystemExit as exc:
            ok, error = exc.code in (0, None), "" if exc.code in (0, None) else f"SystemExit({exc.code})"
        except BaseException:
            ok = False
            error = _user_traceback()
    plt.close("all")
    return StepResult(ok=ok, output=_clip(buffer.getvalue(), request.output_bytes), error=error)


def _user_traceback() -> str:
    """The traceback of the model's code only (frames of step.py), short enough to act on."""
    lines = traceback.format_exc().splitlines()
    keep: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith('  File "') and "step.py" not in line and "<string>" not in line:
            skipping = True
            continue
        if line.startswith('  File "'):
            skipping = False
        if skipping and line.startswith("    "):
            continue
        keep.append(line)
    return _clip("\n".join(keep[-30:]), 4000)


def run_step(request: StepRequest, workspace: Path, warehouse: Path | None = None) -> StepResult:
    """Run one step in `workspace` (already the cwd) and report output and new files. Never raises."""
    started = time.perf_counter()
    before = snapshot(workspace)
    try:
        if request.kind == "python":
            result = _run_python(request, workspace)
        elif request.kind == "sql":
            result = _run_sql(request, workspace)
        elif request.kind == "warehouse" and warehouse is not None:
            result = _run_warehouse(request, workspace, warehouse)
        else:
            result = StepResult(ok=False, error=f"Unknown step kind {request.kind!r}.")
    except MemoryError:
        result = StepResult(ok=False, killed=True, error="The step ran out of memory (limit reached).")
    except Exception as exc:  # SQL errors and the like: the model can act on the message
        result = StepResult(ok=False, error=_clip(f"{type(exc).__name__}: {exc}", 4000))
    result.files = changed_files(before, snapshot(workspace))
    result.duration_s = round(time.perf_counter() - started, 4)
    return result
