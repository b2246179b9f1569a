"""The step runner: executes one `StepRequest` inside a workspace directory.

This exact code runs in a local sandbox child process and in the Modal sandbox container; it trusts
nothing in the request. It assumes it is already isolated (cwd = the workspace, privileges dropped)
and uses DuckDB's own settings so SQL cannot reach outside the workspace.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from core.file_stems import default_stem, safe_file_stem
from core.portable_columns import far_dates, portable, portable_parquet, saved_note
from core.preview import clip as _clip
from core.preview import preview_table
from core.sandbox import StepRequest, StepResult
from core.shared_names import unshared_stem


def workspace_files(workspace: Path, *, limit: int | None = None) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of every file under the workspace, not links, not dot-names; at most
    `limit` of them. One `stat` per entry, nothing kept: a step walks its workspace before and after
    it runs, and the bot for every attachment."""
    pending, found = [""], 0
    while pending:
        rel = pending.pop()
        with contextlib.suppress(OSError), os.scandir(workspace / rel) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                path = f"{rel}/{entry.name}" if rel else entry.name
                if stat.S_ISDIR(st.st_mode):
                    pending.append(path)
                elif not stat.S_ISLNK(st.st_mode):
                    yield path, st
                    found += 1
                    if limit is not None and found >= limit:
                        return


def snapshot(workspace: Path) -> dict[str, tuple[int, int]]:
    """path → (size, mtime_ns) for every file under the workspace, to report what changed."""
    return {path: (st.st_size, st.st_mtime_ns) for path, st in workspace_files(workspace)}


def changed_files(before: dict, after: dict) -> list[dict]:
    """Files that are new or different after a step, as plain dicts."""
    return [
        {"path": path, "size": size, "kind": Path(path).suffix.lstrip(".").lower()}
        for path, (size, mtime) in sorted(after.items())
        if before.get(path) != (size, mtime)
    ]


# No extension is fetched or loaded behind the policy's back.
_DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
STEP_THREADS = 2  # DuckDB worker threads a step's query may use (started in the step, never before)


def open_database():
    """An empty in-memory DuckDB database for the fork server to open once, before it forks.

    Opening a database costs a step 25-45 ms of CPU (DuckDB builds its catalog of built-in functions
    per database, then starts and later joins its threads); a fork inherits this one ready-made.
    DuckDB is not fork-safe with live threads, so this one has none: `threads=1` keeps queries on the
    calling thread and `async_threads=0` stops the I/O pool (which `threads` alone leaves at 8). Each
    step child gets its own copy-on-write copy, so nothing a step does reaches the fork server or
    another step. Nothing is locked yet: `connect_duckdb` confines it in the child."""
    import duckdb

    con = duckdb.connect(":memory:", config={**_DUCKDB_CONFIG, "threads": 1, "async_threads": 0})
    con.sql("SELECT 1 AS x, 'a' AS s").to_arrow_table()  # the first query's one-time set-up, done here
    return con


def connect_duckdb(
    workspace: Path,
    database: str = ":memory:",
    read_only: bool = False,
    *,
    opened=None,
    memory_mb: int | None = None,
):
    """A DuckDB connection for untrusted SQL: files only inside `workspace`, no extensions, locked;
    with `memory_mb` (the step's memory limit) DuckDB spills to the workspace before it reaches it.

    `opened` is the fork server's `open_database()` as this step child inherited it: used instead of
    opening a new database (a `database` file is then attached read-only and made the default, under
    its usual name: the file's stem). It is confined here, in the child, before any SQL of the step."""
    import duckdb

    if opened is None or not _attachable(database, read_only):
        con = duckdb.connect(
            database, read_only=read_only, config={**_DUCKDB_CONFIG, "threads": STEP_THREADS}
        )
    else:
        con = opened
        con.execute(f"SET threads={STEP_THREADS}")
        if database != ":memory:":
            name = _catalog_name(database).replace('"', '""')
            con.execute(f"ATTACH '{_quote(database)}' AS \"{name}\" (READ_ONLY)")
            con.execute(f'USE "{name}"')
    if memory_mb:  # set, not read from the cgroup: the inherited database was opened outside it
        con.execute(f"SET memory_limit='{max(64, memory_mb * 3 // 4)}MB'")
    ws = _quote(str(workspace))
    con.execute(f"SET allowed_directories=['{ws}']")
    con.execute(f"SET temp_directory='{ws}/.duckdb_tmp'")
    con.execute("SET enable_external_access=false")
    con.execute("SET enable_progress_bar=false")  # DuckDB draws one on stdout past 2 s: the step's output
    con.execute("SET lock_configuration=true")
    return con


def _quote(text: str) -> str:
    return text.replace("'", "''")


def _attachable(database: str, read_only: bool) -> bool:
    """A database the pre-opened one can stand in for: itself, or a file attached read-only under a
    name that is not one of DuckDB's own catalogs."""
    if database == ":memory:":
        return not read_only
    return read_only and _catalog_name(database).lower() not in ("memory", "system", "temp", "main", "")


def _catalog_name(database: str) -> str:
    """The name DuckDB gives a database file it opens: the file name up to its first dot."""
    return Path(database).name.split(".")[0]


PARTIAL = ".partial"  # a result being written: `.<name>.parquet.partial`, renamed into place when whole
STALE_PARTIAL_S = 120.0  # untouched this long: a write that was killed, not one still going


def save_arrow(table, workspace: Path, stem: str) -> str:
    """Write an Arrow table as `<stem>.parquet` in the workspace; returns the relative name.

    Written beside it under a dot-name (which no listing shows) and renamed into place: a step stopped
    at its time limit keeps what it wrote, and a result written in place then was half a file that
    had replaced the earlier, good result of the same name. A step killed mid-write leaves its
    dot-name behind, unseen but counted against the workspace's quota: each write first removes
    those nobody has written to for STALE_PARTIAL_S (on Modal two steps of a session may write at
    once, each to its own name: a fresh one is another step's, still being written)."""
    import pyarrow.parquet as pq

    stale = time.time() - STALE_PARTIAL_S
    with contextlib.suppress(OSError), os.scandir(workspace) as entries:
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(".parquet" + PARTIAL):
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_mtime < stale:
                        os.unlink(entry.path)
    name = f"{stem}.parquet"
    partial = workspace / f".{name}{PARTIAL}"
    try:
        pq.write_table(table, partial, compression="zstd")
        os.replace(partial, workspace / name)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return name


def unique_names(names: list[str], *, first_suffix: int = 1) -> list[str]:
    """Column names made unique as DuckDB reads them back (`a, a_1, A_2`: case does not tell them
    apart): `SELECT 1 AS a, 2 AS a` saved a file pandas and the CSV conversion then refused
    ("Multiple matches for FieldRef"). `first_suffix`: the number the first repeat gets (a
    workbook's header says a second "Revenue" is "Revenue_2", core/excel_reading.py)."""
    seen: set[str] = set()
    out = []
    for name in names:
        unique, n = name, first_suffix - 1
        while unique.lower() in seen:
            n += 1
            unique = f"{name}_{n}"
        seen.add(unique.lower())
        out.append(unique)
    return out


def describe_arrow(table, request: StepRequest, workspace: Path, unnamed: str) -> StepResult:
    """Save a result table and describe it: file, rows, schema, bounded preview."""
    if len({n.lower() for n in table.column_names}) < table.num_columns:
        table = table.rename_columns(unique_names(table.column_names))
    # Intervals as text; ±infinity dates kept (DuckDB reads them, SQL compares them), named for the model
    table, changed = portable(table, dates=False)
    stem = safe_file_stem(request.save_as, unnamed)
    # never over a file a person shared: `flights-2.parquet` for save_as="flights" (core/shared_names.py)
    stem = unshared_stem(stem, request.shared, exists=lambda name: os.path.lexists(workspace / name))
    saved = save_arrow(table, workspace, stem)
    return StepResult(
        ok=True,
        output=saved_note(changed, far_dates(table)),
        rows=table.num_rows,
        columns=[{"name": f.name, "type": str(f.type)} for f in table.schema],
        preview=preview_table(table, request.preview_rows, request.preview_bytes),
        saved_as=saved,
    )


def warm() -> None:
    """Run the SQL path once on a one-row table, in the fork server before it forks any step.

    Each step child is a fork: whatever the parent has done once, the child finds done. The first
    DuckDB database of a process, Arrow's conversion of values to Python objects (the preview) and
    the zstd parquet writer all cost time the first time only, and
    without this every SQL step paid them again. This database has no threads (as `open_database`'s)
    and is closed, so the fork server still forks with no extra threads; nothing is written to disk.
    """
    import pyarrow.parquet as pq

    con = open_database()  # a constant query in memory: nothing spills, nothing is written
    try:
        table = con.sql("SELECT 1 AS x, 'a' AS s").to_arrow_table()
    finally:
        con.close()
    preview_table(table, 1, 1000)
    pq.write_table(table, io.BytesIO(), compression="zstd")


def prime(opened) -> None:
    """In a step's runner, before its request arrives: take the SQL path once on the inherited database.

    The fork server has paid each first-time cost (`warm`), but a forked process's first statement
    still costs ~2 ms (copy-on-write faults in DuckDB's and Arrow's memory): a SQL step's round trip
    paid it, 5.6 → 3.4 ms for confinement plus a one-row query (median of 20 forks). The runner waits
    for its request anyway. Thread-free like `open_database` (the runner has yet to enter its
    namespaces, which a thread would forbid); it reads no file and writes nothing."""
    preview_table(opened.sql("SELECT 1 AS x, 'a' AS s").to_arrow_table(), 1, 1000)


def _query(con, request: StepRequest, workspace: Path, prefix: str, *, close: bool) -> StepResult:
    try:
        relation = con.sql(request.code)
        if relation is None:
            return StepResult(ok=True, output="Statement ran; it returned no rows.")
        table = relation.to_arrow_table()
        return describe_arrow(table, request, workspace, unnamed=default_stem(prefix))
    finally:
        if close:  # the inherited database is not: the step child exits right after (no join, no flush)
            con.close()


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
        except MemoryError:  # the traceback ends in a bare "MemoryError": say which limit, and what helps
            ok = False
            error = _user_traceback() + (
                f"\n(The step's memory limit is {request.memory_mb} MB: work on less data at once, "
                "or let SQL aggregate before pandas.)"
            )
        except BaseException:
            ok = False
            error = _user_traceback()
    plt.close("all")
    return StepResult(ok=ok, output=_clip(buffer.getvalue(), request.output_bytes), error=error)


def _portable_files(workspace: Path, before: dict, after: dict) -> str:
    """Make the parquet files model code wrote readable by every engine (`core/portable_columns.py`:
    pandas' timedelta and Period columns as text, or `run_sql` read 648 for 2024-01); a line saying
    which changed, for the model, or "". A file that cannot be read is left as it is.

    `after` is the step's closing snapshot, brought up to date for each file rewritten here: walking
    the workspace again cost every python step of a 2,000-file workspace 16 ms (24 → 40 ms)."""
    notes = []
    for file in changed_files(before, after):
        if file["kind"] == "parquet":
            path = workspace / file["path"]
            try:
                changed = portable_parquet(path)
            except Exception:  # not parquet after all, or half-written: the model's own affair
                continue
            if changed:
                with contextlib.suppress(OSError):
                    st = path.stat()
                    after[file["path"]] = (st.st_size, st.st_mtime_ns)
                notes.append(f"{file['path']}: {', '.join(changed)}")
    if not notes:
        return ""
    return (
        "Saved as text, as DuckDB and the CSV cannot read them (pd.to_timedelta or pd.PeriodIndex "
        f"read them back): {'; '.join(notes)}."
    )


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


def run_step(
    request: StepRequest, workspace: Path, warehouse: Path | None = None, *, opened=None
) -> StepResult:
    """Run one step in `workspace` (already the cwd) and report output and new files. Never raises.

    `opened`: the fork server's `open_database()`, inherited by this (one-step) child; SQL steps then
    use it instead of opening a database of their own."""
    started = time.perf_counter()
    before, after = snapshot(workspace), None
    try:
        if request.kind == "python":
            result = _run_python(request, workspace)
            after = snapshot(workspace)
            if note := _portable_files(workspace, before, after):  # the output as printed, the note below
                result.output = "\n".join(x for x in (result.output.rstrip("\n"), note) if x)
        elif request.kind == "sql" or (request.kind == "warehouse" and warehouse is not None):
            database, prefix = (
                (str(warehouse), "query") if request.kind == "warehouse" else (":memory:", "sql")
            )
            con = connect_duckdb(
                workspace,
                database,
                read_only=request.kind == "warehouse",
                opened=opened,
                memory_mb=request.memory_mb,
            )
            result = _query(con, request, workspace, prefix, close=con is not opened)
        else:
            result = StepResult(ok=False, error=f"Unknown step kind {request.kind!r}.")
    except MemoryError:
        result = StepResult(ok=False, killed=True, error="The step ran out of memory (limit reached).")
    except Exception as exc:  # SQL errors and the like: the model can act on the message
        result = StepResult(ok=False, error=_clip(f"{type(exc).__name__}: {exc}", 4000))
    result.files = changed_files(before, snapshot(workspace) if after is None else after)
    result.duration_s = round(time.perf_counter() - started, 4)
    return result
