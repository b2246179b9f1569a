"""A thread as a runnable Jupyter notebook, built from the session's turn records.

The turn records (`SessionStore.list_turns`) keep every step's SQL or code, its file names and their
order — the same records behind "Show SQL & code". Replaying the successful steps in order, in a fresh
working directory, with the official warehouse client and the reader's own credentials, reproduces the
thread's files. Failed steps are left out: the bot's model saw the error and retried, so the working
steps alone rebuild the files, and a notebook that stops at a known error is not "run all"-able.
The notebook's opening (intro, setup cell) is core/notebook_setup.py's.
"""

from __future__ import annotations

import base64
import builtins
import keyword
import re
import unicodedata
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

import nbformat
from nbformat import v4

from core.config import Settings
from core.file_stems import safe_file_stem
from core.notebook_request import is_export_request
from core.notebook_safety import step_hazard
from core.notebook_setup import SETUP_NAMES, intro_text, setup_code
from core.redact import Redactor
from core.turn_records import NothingToExport
from core.wording import error_line, in_code_span

MAX_CHART_BYTES = 5 * 1024 * 1024  # bigger images stay files; the notebook rebuilds them anyway


def build_notebook(
    turns: list[dict],
    *,
    warehouse: str,
    dialect: str,
    gcp_project: str | None,
    chart_bytes: dict[str, bytes] | None,
    default_dataset: str | None = None,
    max_bytes_billed: int | None = None,
) -> nbformat.NotebookNode:
    """The notebook of a thread: intro, setup, then per turn the question, its steps and the answer.
    `chart_bytes` (workspace path → PNG) become outputs of the Python cell that last wrote them."""
    session_id = next((t.get("session_id") for t in turns if t.get("session_id")), "thread")
    bigquery = warehouse == "bigquery"
    charts = _chart_owners(turns, chart_bytes or {})
    cells = [
        v4.new_markdown_cell(intro_text(session_id, turns, bigquery, dialect)),
        v4.new_code_cell(setup_code(session_id, bigquery, gcp_project, default_dataset, max_bytes_billed)),
    ]
    number = 0
    for turn in turns:
        if _is_export_turn(turn):
            continue
        number += 1
        cells += _turn_cells(number, turn, bigquery, charts)
    nb = v4.new_notebook(cells=cells)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "datathread": {"session_id": session_id, "warehouse": warehouse, "dialect": dialect},
    }
    return nb


def _turn_cells(number: int, turn: dict, bigquery: bool, charts: dict[str, list]) -> list:
    question = (turn.get("question") or "").strip() or "(no text)"
    cells = [v4.new_markdown_cell(f"## {number}. Question\n\n" + _quote(question))]
    attached: list[str] = []
    for step in turn.get("steps") or []:
        if not step.get("ok"):
            cells.append(v4.new_markdown_cell(_skipped(step)))
            continue
        cell = _step_cell(step, bigquery, attached)
        hazard = step_hazard(
            step.get("tool") or "", step.get("input") or {}, dialect="bigquery" if bigquery else "duckdb"
        )
        if hazard and cell is not None and cell.cell_type == "code":
            cell = v4.new_code_cell(_commented_out(cell.source, step, hazard))
        if cell is None:
            continue
        if cell.cell_type == "code":
            cell.outputs = charts.get(step.get("step_id") or "", [])
        cells.append(cell)
    cells.append(v4.new_markdown_cell(_answer(turn, attached)))
    return cells


def _step_cell(step: dict, bigquery: bool, attached: list[str]) -> Any:
    tool, args = step.get("tool"), step.get("input") or {}
    if tool == "query_warehouse" and isinstance(args.get("sql"), str):
        name = _parquet_name(step, "query")
        call = (
            f"client.query({_literal(args['sql'])}, job_config=job_config).to_arrow()"
            if bigquery
            else f"warehouse.sql({_literal(args['sql'])}).to_arrow_table()"
        )
        return _save_cell(f"# query_warehouse → {name}", name, call)
    if tool == "run_sql" and isinstance(args.get("sql"), str):
        name = _parquet_name(step, "sql")
        call = f"duckdb.sql({_literal(args['sql'])}).to_arrow_table()"
        return _save_cell(f"# run_sql over the working directory's files → {name}", name, call)
    if tool == "run_python" and isinstance(args.get("code"), str):
        return v4.new_code_cell(args["code"].strip("\n"))
    if tool == "attach_file":
        return _attach_cell(step, args, attached)
    if tool in ("list_tables", "describe_table"):
        return None
    files = ", ".join(f"`{f}`" for f in step.get("files") or ())
    if not files:
        return None
    if tool == "shared_file" and isinstance(args.get("shared_as"), str):  # named as the person knows it
        kept = "it" if len(step.get("files") or ()) == 1 else "those files"
        return v4.new_markdown_cell(
            f"The file shared with this question as `{in_code_span(args['shared_as'])}` is not in this "
            f"notebook; the bot kept it as {files}. Place {kept} in the working directory before "
            "running the next cells."
        )
    return v4.new_markdown_cell(
        f"The bot's `{tool}` step is not replayed here; it produced {files}. "
        "Place those files in the working directory before running the next cells."
    )


def _save_cell(comment: str, name: str, call: str) -> Any:
    stem = name[: -len(".parquet")]
    python = unicodedata.normalize("NFKC", stem)  # the name Python sees: a fullwidth "ｐｄ" is `pd`
    usable = (
        stem.isidentifier()
        and not keyword.iskeyword(python)
        and python not in SETUP_NAMES
        and not hasattr(builtins, python)  # `sum = …` would break every later cell that sums
    )
    var = stem if usable else "result"
    return v4.new_code_cell(f"{comment}\n{var} = {call}\nsave_parquet({var}, {name!r})")


def _attach_cell(step: dict, args: dict, attached: list[str]) -> Any:
    raw = str(args.get("path") or "").strip()
    path = raw[2:] if raw.startswith("./") else raw
    if PurePosixPath(path).suffix.lower() == ".parquet":
        csv_name = next(iter(step.get("files") or ()), str(PurePosixPath(path).with_suffix(".csv")))
        attached.append(csv_name)
        folder = str(PurePosixPath(csv_name).parent)
        makedirs = f"os.makedirs({folder!r}, exist_ok=True)\n" if folder != "." else ""
        return v4.new_code_cell(
            f"# attach_file: the bot converts parquet to CSV before uploading it\n"
            f"{makedirs}pc.write_csv(pq.read_table({path!r}), {csv_name!r})"
        )
    attached.append(next(iter(step.get("files") or ()), path))
    return None


def _parquet_name(step: dict, prefix: str) -> str:
    """The file the bot saved, as recorded; else `<save_as>.parquet` as core/steps.py names it now (a
    thread saved before a change of that naming keeps its names: its later cells read them)."""
    recorded = [f for f in step.get("files") or () if str(f).endswith(".parquet")]
    if recorded:
        return str(recorded[0])
    stem = safe_file_stem((step.get("input") or {}).get("save_as"), "")
    if stem:
        return f"{stem}.parquet"
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9]+', '_', str(step.get('step_id') or 'result'))}.parquet"


def _literal(text: str) -> str:
    """A readable Python literal for SQL: triple-quoted when that is exact, else repr()."""
    body = text.strip("\n")
    if '"""' in body or "\\" in body or body.endswith('"'):
        return repr(body)
    return f'"""\n{body}\n"""'


def _quote(text: str) -> str:
    return "\n".join("> " + line if line.strip() else ">" for line in text.splitlines())


def _commented_out(source: str, step: dict, hazard: str) -> str:
    """A cell that runs nothing: why the step is not replayed, then its code as comments to read."""
    reason = " ".join(hazard.split(" — ")[0].split())
    lines = [
        f"# NOT RUN: this `{step.get('tool')}` step reaches outside the data stack ({reason}).",
        "# The bot ran it inside its sandbox; here it would run with your permissions. Read it, and run it",
        "# yourself only if you are sure it is safe. Later cells may need the files it wrote.",
        "#",
    ]
    return "\n".join(lines + [f"# {line}" if line else "#" for line in source.splitlines()])


def _skipped(step: dict) -> str:
    """A failed step's note: what went wrong in one line — the exception of a Python traceback, the
    first line of a SQL error (its last line was DuckDB's list of candidate columns)."""
    line = error_line(step.get("error") or step.get("summary") or "") or "it failed"
    return f"*Skipped a failed `{step.get('tool')}` step of the thread:* `{line}`"


def _answer(turn: dict, attached: list[str]) -> str:
    answer = (turn.get("answer") or "").strip()
    if not turn.get("ok", True) and turn.get("error"):
        answer = (answer + "\n\n" if answer else "") + f"*This turn failed: {turn['error']}*"
    text = "**Answer**\n\n" + (answer or "*(no answer)*")
    if unsupported := turn.get("unsupported"):  # the receipt's flag, kept with the turn
        text += "\n\n⚠ *Not from any query in this turn:* " + ", ".join(str(n) for n in unsupported)
    if attached:
        text += "\n\nFiles attached in the thread: " + ", ".join(f"`{a}`" for a in attached)
    return text


def _is_export_turn(turn: dict) -> bool:
    return not turn.get("steps") and is_export_request(turn.get("question") or "")


def chart_paths(turns: Iterable[dict]) -> list[str]:
    """PNG files written by successful Python steps: the charts to read and embed."""
    out: list[str] = []
    for turn in turns:
        for step in turn.get("steps") or []:
            if step.get("ok") and step.get("tool") == "run_python":
                out += [f for f in step.get("files") or () if f.lower().endswith(".png") and f not in out]
    return out


def _chart_owners(turns: list[dict], chart_bytes: dict[str, bytes]) -> dict[str, list]:
    """step_id → display_data outputs; a chart belongs to the last step that wrote it (its final bytes)."""
    owner: dict[str, str] = {}
    for turn in turns:
        for step in turn.get("steps") or []:
            if step.get("ok") and step.get("tool") == "run_python":
                for path in step.get("files") or ():
                    if path in chart_bytes:
                        owner[path] = step.get("step_id") or ""
    outputs: dict[str, list] = {}
    for path, step_id in owner.items():
        data = chart_bytes[path]
        if not data.startswith(b"\x89PNG") or len(data) > MAX_CHART_BYTES:
            continue
        outputs.setdefault(step_id, []).append(
            v4.new_output(
                "display_data",
                data={"image/png": base64.b64encode(data).decode(), "text/plain": f"<chart {path}>"},
                metadata={"datathread": {"path": path}},
            )
        )
    return outputs


# --- from a session --------------------------------------------------------------------------


async def session_notebook(
    *, store: Any, sandbox: Any, settings: Settings, session_id: str, default_dataset: str | None = None
) -> bytes:
    """The .ipynb bytes of a session, from any store and sandbox (the CLI needs no model or Analyst)."""
    turns = await store.list_turns(session_id=session_id)
    if not turns:
        raise NothingToExport(session_id)
    turns = Redactor(settings.secret_values()).data(turns)  # records are redacted; this makes sure
    charts: dict[str, bytes] = {}
    for path in chart_paths(turns):
        try:
            charts[path] = await sandbox.read_file(session_id, path)
        except (FileNotFoundError, PermissionError, OSError):
            continue  # the file is gone (workspace cleaned up): the notebook still rebuilds it
    nb = build_notebook(
        turns,
        warehouse=settings.warehouse,
        dialect="bigquery" if settings.warehouse == "bigquery" else "duckdb",
        gcp_project=settings.gcp_project,
        chart_bytes=charts,
        default_dataset=default_dataset,
        max_bytes_billed=settings.query_hard_cap_bytes if settings.warehouse == "bigquery" else None,
    )
    return nbformat.writes(nb).encode()
