"""Notebook export: the phrase detector, the notebook's shape, and a re-run of an exported thread.

The re-run test drives a scripted thread through the real Analyst (real sandbox, real DuckDB demo
warehouse), exports it, executes the notebook in a real ipykernel with nbclient, and compares the files
it rebuilds with the bot's workspace byte for byte.
"""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import typer

from bot.export import export_session
from core.events import IncomingMessage
from core.notebook import build_notebook, chart_paths
from core.notebook_request import is_export_request
from tests.conftest import DEMO_DB_CACHE
from tests.fakes.anthropic_api import text, tool


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("export this as a notebook", True),
        ("Export this as a notebook please", True),
        ("can you export the notebook?", True),
        ("give me a jupyter notebook of this", True),
        ("<@U012ABC> export notebook", True),
        ("send me the .ipynb", True),
        ("download this thread as ipynb", True),
        ("notebook please", True),
        ("Jupyter notebook?", True),
        ("I want this as a notebook", True),
        ("make a notebook of this thread", True),
        ("notebook version of this, thanks", True),
        ("export this as a CSV", False),
        ("make a chart of notebook sales by brand", False),
        ("get notebook prices by brand", False),
        ("how many flights left JFK in 2013?", False),
        ("what's a notebook?", False),
        ("don't export the notebook yet, first chart delays by month", False),
        ("export sales of notebooks and laptops by month as csv", False),
        (
            "which carriers had the most delayed flights last quarter? chart it and make a notebook-style "
            "summary table for each airport with the worst months",
            False,
        ),
        ("", False),
    ],
)
def test_is_export_request(message: str, expected: bool) -> None:
    assert is_export_request(message) is expected


def _step(step_id: str, tool_: str, input_: dict, *, ok: bool = True, files=(), error: str = "") -> dict:
    return {
        "step_id": step_id,
        "tool": tool_,
        "input": input_,
        "ok": ok,
        "files": list(files),
        "error": error,
    }


PNG = b"\x89PNG\r\n\x1a\n" + b"fake chart"
TURNS = [
    {
        "session_id": "te-abc",
        "question": "delays by carrier?\nchart it",
        "answer": "**F9** is worst.",
        "ok": True,
        "started": 1_700_000_000,
        "steps": [
            _step("t1-1", "list_tables", {}),
            _step(
                "t1-2",
                "query_warehouse",
                {"sql": 'SELECT """x""" AS a', "save_as": "2013 delays.parquet"},
            ),
            _step("t1-3", "query_warehouse", {"sql": "SELECT 1"}, files=["query_1712.parquet"]),
            _step(
                "t1-4", "run_python", {"code": "1/0"}, ok=False, error="Traceback\nZeroDivisionError: boom"
            ),
            _step(
                "t1-4b",
                "run_sql",
                {"sql": "SELECT nonexistent FROM 'f.parquet'"},
                ok=False,
                error='Binder Error: Referenced column "nonexistent" not found in FROM clause!\n'
                'Candidate bindings: "dest", "distance"\n\nLINE 1: SELECT nonexistent FROM ...',
            ),
            _step("t1-5", "run_python", {"code": "plot()"}, files=["c.png", "c.csv"]),
            _step("t1-6", "run_python", {"code": "replot()"}, files=["c.png"]),
            _step("t1-7", "attach_file", {"path": "./x.parquet"}, files=["x.csv"]),
            _step("t1-8", "attach_file", {"path": "c.png"}, files=["c.png"]),
        ],
    },
    {"session_id": "te-abc", "question": "export this as a notebook", "answer": "", "ok": True, "steps": []},
]


def test_build_notebook_shape_duckdb() -> None:
    nb = build_notebook(
        TURNS, warehouse="duckdb", dialect="duckdb", gcp_project=None, chart_bytes={"c.png": PNG}
    )
    nbformat.validate(nb)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    text_ = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "DATATHREAD_WAREHOUSE_PATH" in text_ and "on 2023-11-14" in text_ and "te-abc-work" in text_
    assert "duckdb.connect(str(WAREHOUSE_PATH), read_only=True)" in code[0] and "bigquery" not in code[0]
    # in UTC, as the bot's steps ran: a reader in New York got other daily totals than the thread's
    assert "os.environ['TZ'] = 'UTC'" in code[0] and "warehouse.execute(\"SET TimeZone = 'UTC'\")" in code[0]
    assert "result = warehouse.sql(" in code[1]
    assert "save_parquet(result, '2013_delays.parquet')" in code[1]  # safe_file_stem's name
    assert '\'SELECT """x""" AS a\'' in code[1]  # SQL with triple quotes stays exact
    assert "query_1712 = warehouse.sql(" in code[2] and "'query_1712.parquet'" in code[2]
    assert code[3:5] == ["plot()", "replot()"]  # verbatim, the failed step left out
    assert "pc.write_csv(pq.read_table('x.parquet'), 'x.csv')" in code[5]
    assert "ZeroDivisionError: boom" in text_ and "1/0" not in "\n".join(code)
    # a failed SQL step is noted by what went wrong, not by DuckDB's last line (candidate columns)
    assert '`Binder Error: Referenced column "nonexistent" not found in FROM clause!`' in text_
    assert "Candidate bindings" not in text_ and "nonexistent FROM" not in "\n".join(code)
    assert "`x.csv`, `c.png`" in text_  # attachments listed with the answer
    assert (
        "## 1. Question" in text_ and "## 2." not in text_
    )  # the export request itself is not a question of the thread
    python_cells = [c for c in nb.cells if c.cell_type == "code" and c.source in ("plot()", "replot()")]
    assert python_cells[0].outputs == []  # the chart's final bytes belong to the last step that wrote it
    [output] = python_cells[1].outputs
    assert base64.b64decode(output["data"]["image/png"]) == PNG
    assert chart_paths(TURNS) == ["c.png"]


def test_a_thread_saved_under_older_file_names_replays_with_them() -> None:
    """Saved-result names now keep letters of any script: a thread saved before kept
    `Versp_tung.parquet` for its "Verspätung 東京", and its later cells read that name, but the export
    named the file anew and the next cell failed. A fullwidth ｐｄ (Python's `pd`) rebound pandas."""
    steps = [
        _step(
            "t1-1",
            "query_warehouse",
            {"sql": "SELECT 1", "save_as": "Verspätung 東京"},
            files=["Versp_tung.parquet"],
        ),
        _step("t1-2", "query_warehouse", {"sql": "SELECT 2", "save_as": "ｐｄ"}, files=["ｐｄ.parquet"]),
        _step("t1-3", "query_warehouse", {"sql": "SELECT 3", "save_as": "Flüge 遅延"}),
        _step("t1-4", "query_warehouse", {"sql": "SELECT 4", "save_as": "sum"}),  # a builtin's name
    ]
    turns = [{"session_id": "te-old", "question": "q", "answer": "a", "ok": True, "steps": steps}]
    nb = build_notebook(turns, warehouse="duckdb", dialect="duckdb", gcp_project=None, chart_bytes={})
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "save_parquet(Versp_tung, 'Versp_tung.parquet')" in code[1]
    assert "result = warehouse.sql(" in code[2] and "pd =" not in code[2].replace("ｐｄ", "pd")
    assert "Flüge_遅延 = warehouse.sql(" in code[3] and "'Flüge_遅延.parquet'" in code[3]  # named as now
    assert "result = warehouse.sql(" in code[4] and "'sum.parquet'" in code[4]  # `sum` stays the builtin


def test_a_conversion_into_the_attachments_folder_makes_the_folder_when_rerun() -> None:
    """attach_file converts x.parquet into attachments/x.csv where x.csv is the model's own: the
    notebook's cell must make that folder, or Run All stops there."""
    turns = [
        {
            **TURNS[0],
            "steps": [_step("t1-1", "attach_file", {"path": "x.parquet"}, files=["attachments/x.csv"])],
        }
    ]
    nb = build_notebook(turns, warehouse="duckdb", dialect="duckdb", gcp_project=None, chart_bytes={})
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert (
        "os.makedirs('attachments', exist_ok=True)\npc.write_csv(pq.read_table('x.parquet'), 'attachments/x.csv')"
        in code[1]
    )


def test_build_notebook_bigquery_reads_reader_credentials() -> None:
    nb = build_notebook(
        TURNS[:1],
        warehouse="bigquery",
        dialect="bigquery",
        gcp_project="acme-analytics",
        chart_bytes=None,
        default_dataset="acme-analytics.sales",
    )
    setup = nb.cells[1].source
    assert "bigquery.Client(project=os.environ.get(\"GCP_PROJECT\") or 'acme-analytics')" in setup
    assert "default_dataset='acme-analytics.sales'" in setup and "WAREHOUSE_PATH" not in setup
    assert "client.query(" in nb.cells[3].source and ".to_arrow()" in nb.cells[3].source
    assert "GOOGLE_APPLICATION_CREDENTIALS" in nb.cells[0].source
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.title('Average departure delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
"""
DELAYS = (
    "SELECT carrier, round(avg(dep_delay), 4) AS avg_delay, count(*) AS n FROM flights "
    "GROUP BY carrier ORDER BY avg_delay DESC, carrier"
)
TOP3 = "SELECT carrier, avg_delay FROM 'delays.parquet' ORDER BY avg_delay DESC LIMIT 3"


def _ask(question: str) -> IncomingMessage:
    return IncomingMessage(text=question, surface="terminal", thread_key=("nb1",), user_id="u1")


async def _scripted_thread(analyst, fake_model, recorder) -> str:
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool("attach_file", {"path": "delays.png"}, more=[("attach_file", {"path": "delays.csv"})]),
        text("**F9** had the highest average departure delay."),
    )
    first = await analyst.handle(_ask("which carriers were most delayed? chart it"), recorder)
    assert first.ok, first.error
    fake_model.enqueue(
        tool("run_sql", {"sql": TOP3, "save_as": "top3"}),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights WHERE month = 1"}),
        tool("run_python", {"code": "print(1/0)"}),
        tool("attach_file", {"path": "top3.parquet"}),
        text("The top 3 are attached as a CSV."),
    )
    second = await analyst.handle(_ask("only the top 3, as a CSV"), recorder)
    assert second.ok, second.error
    return first.session_id


async def _execute(nb: nbformat.NotebookNode, run_dir: Path) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        kernel_name="python3",  # the venv's ipykernel (jupyter_client maps "python" to sys.executable)
        timeout=60,
        extra_arguments=["--HistoryManager.enabled=False"],
        resources={"metadata": {"path": str(run_dir)}},
    )
    await client.async_execute()
    return nb


async def test_exported_notebook_reruns_and_rebuilds_the_files(
    analyst, fake_model, recorder, settings, tmp_path, monkeypatch
):
    session_id = await _scripted_thread(analyst, fake_model, recorder)
    ws = settings.workspaces_dir / session_id
    [default_query] = [p.name for p in ws.glob("query_*.parquet")]

    nb = nbformat.reads((await analyst.threads.export_notebook(session_id)).decode(), as_version=4)
    nbformat.validate(nb)
    [chart_cell] = [c for c in nb.cells if c.cell_type == "code" and "savefig" in c.source]
    assert base64.b64decode(chart_cell.outputs[0]["data"]["image/png"]) == (ws / "delays.png").read_bytes()
    assert not any("1/0" in c.source for c in nb.cells if c.cell_type == "code")

    # The reader's environment: only DATATHREAD_HOME (the demo DB's default path); Jupyter state in tmp.
    run_dir = tmp_path / "reader"
    run_dir.mkdir()
    monkeypatch.setenv("DATATHREAD_HOME", str(settings.home))
    monkeypatch.delenv("DATATHREAD_WAREHOUSE_PATH", raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "jupyter-runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLCONFIGDIR", str(DEMO_DB_CACHE / "matplotlib"))  # font cache: built once
    rerun_setup = nbformat.v4.new_code_cell(nb.cells[1].source)  # Run All twice must not nest dirs
    check = nbformat.v4.new_code_cell("assert Path.cwd().name == WORKDIR and not Path(WORKDIR).exists()")
    executed = await _execute(nbformat.from_dict({**nb, "cells": [*nb.cells, rerun_setup, check]}), run_dir)

    work = run_dir / f"{session_id}-work"
    for name in ("delays.csv", "top3.csv"):
        assert (work / name).read_bytes() == (ws / name).read_bytes(), name
    for name in ("delays.parquet", "top3.parquet", default_query):
        pd.testing.assert_frame_equal(pd.read_parquet(work / name), pd.read_parquet(ws / name))
    assert (work / "delays.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [rerun_chart] = [c for c in executed.cells if c.cell_type == "code" and "savefig" in c.source]
    assert any("image/png" in o.get("data", {}) for o in rerun_chart.outputs)
    assert os.environ["DATATHREAD_HOME"] == str(settings.home)

    # The CLI path writes the same notebook without a model or a running sandbox.
    out = await export_session(settings, session_id, tmp_path / "out" / "thread.ipynb")
    exported = nbformat.read(out, as_version=4)
    assert [c.source for c in exported.cells] == [c.source for c in nb.cells]


async def test_export_session_without_turns_fails_in_one_sentence(settings, tmp_path, capsys):
    with pytest.raises(typer.Exit) as exc:
        await export_session(settings, "te-nothing-here", tmp_path / "x.ipynb")
    assert exc.value.exit_code == 1
    err = capsys.readouterr().err
    assert f"No questions recorded under session te-nothing-here in {settings.home.resolve()}" in err
    assert "Traceback" not in err
    assert not (tmp_path / "x.ipynb").exists()


@pytest.mark.parametrize(
    ("warehouse", "project", "dataset", "expected"),
    [
        ("bigquery", "acme", "sales", "acme.sales"),
        ("bigquery", "acme", "other.sales", "other.sales"),
        ("bigquery", None, "sales", "sales"),
        ("bigquery", "acme", None, None),
        ("duckdb", "acme", "sales", None),
    ],
)
def test_export_uses_the_warehouse_default_dataset(warehouse, project, dataset, expected) -> None:
    from core.config import load_settings
    from core.sandbox_factory import configured_default_dataset

    settings = load_settings(
        _env_file=None, warehouse=warehouse, gcp_project=project, bigquery_default_dataset=dataset
    )
    assert configured_default_dataset(settings) == expected


async def test_a_bigquery_notebook_caps_every_query_it_reruns(tmp_path) -> None:
    """Run All re-runs every query of the thread, including ones a person confirmed over the soft cap,
    and its job config had no cap at all: each may now bill at most the bot's hard cap."""
    from core.config import load_settings
    from core.notebook import session_notebook
    from core.sessions import open_store

    settings = load_settings(
        _env_file=None,
        warehouse="bigquery",
        gcp_project="acme",
        home=tmp_path,
        query_hard_cap_bytes=5 * 10**9,
    )
    store = await open_store(settings)
    try:
        # recorded now: the store keeps turn records DATATHREAD_AUDIT_TTL_DAYS after they started
        await store.record_turn(
            {**TURNS[0], "turn_id": "t1", "started": time.time(), "steps": TURNS[0]["steps"][:3]}
        )
        raw = await session_notebook(store=store, sandbox=None, settings=settings, session_id="te-abc")
    finally:
        await store.close()
    setup = nbformat.reads(raw.decode(), as_version=4).cells[1].source
    assert "job_config = bigquery.QueryJobConfig(maximum_bytes_billed=5000000000)" in setup


HOSTILE_TURN = {
    "session_id": "te-hostile",
    "question": "totals please",
    "answer": "done",
    "ok": True,
    "started": 1_700_000_000,
    "steps": [
        _step("h-1", "run_python", {"code": "import os\nprint(dict(os.environ))"}),
        _step("h-2", "run_python", {"code": "import socket\ns = socket.socket()\ns.connect(('10.0.0.5', 5432))"}),
        _step("h-3", "run_python", {"code": "import numpy as np\nnp.ctypeslib.ctypes.CDLL(None).system(b'id')"}),
        _step("h-4", "run_sql", {"sql": "SELECT * FROM read_text('/etc/passwd')"}),
        _step("h-5", "run_python", {"code": "open('/run/lock/x', 'w').write('x')"}, ok=False,
              error="refused: Line 1: `open('/run/lock/x')` outside the workspace"),
        _step("h-6", "run_python", {"code": "import pandas as pd\nprint(pd.read_parquet('t.parquet'))"}),
    ],
}  # fmt: skip


def test_hostile_steps_are_commented_out_with_the_reason_and_run_nothing() -> None:
    import ast

    nb = build_notebook(
        [HOSTILE_TURN], warehouse="duckdb", dialect="duckdb", gcp_project=None, chart_bytes={}
    )
    nbformat.validate(nb)
    assert "Review every cell before you run it" in nb.cells[0].source
    code = [c.source for c in nb.cells if c.cell_type == "code"][1:]  # after the setup cell
    hostile, replayed = code[:4], code[4:]
    for source, why in zip(hostile, ("os.environ", "import socket", ".ctypeslib", "read_text"), strict=True):
        assert source.startswith("# NOT RUN:") and why in source.splitlines()[0], source
        assert ast.parse(source).body == []  # the cell runs nothing at all
    assert replayed == ["import pandas as pd\nprint(pd.read_parquet('t.parquet'))"]
    text_ = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Skipped a failed `run_python` step" in text_ and "/run/lock/x" not in "\n".join(replayed)


async def test_exported_notebook_never_carries_the_bots_secrets(settings, tmp_path):
    """Even a record that (wrongly) kept a secret is redacted on the way out; the setup reads the
    reader's own environment and writes no credential into the notebook."""
    from core.notebook import session_notebook
    from core.sessions import open_store

    key = settings.anthropic_api_key.get_secret_value()
    token = "xoxb-123456789-notebookLEAK"
    turn = {**HOSTILE_TURN, "turn_id": "t-secret", "question": f"use {key}", "answer": f"token {token}"}
    turn["started"] = time.time()  # kept: within DATATHREAD_AUDIT_TTL_DAYS
    turn["steps"] = [_step("s-1", "run_python", {"code": f"print('{key}')"})]
    store = await open_store(settings)
    try:
        await store.record_turn(turn)
        data = await session_notebook(store=store, sandbox=None, settings=settings, session_id="te-hostile")
    finally:
        await store.close()
    assert key not in data.decode() and token not in data.decode() and b"[redacted]" in data


async def test_an_answers_numbers_from_no_query_are_flagged_in_the_notebook_too(
    analyst, fake_model, recorder
):
    """The receipt under the answer flagged a number the model wrote that no step returned; the exported
    notebook carried the same answer as fact (found by a newcomer trial: "United … (27,261)", while the
    notebook's own query printed 12195)."""
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 42 AS answer"}),
        text("The answer is 42, and United had 27,261 delayed departures."),
    )
    done = await analyst.handle(_ask("what is the answer?"), recorder)
    assert done.ok, done.error
    [finished] = [e for e in recorder.events if type(e).__name__ == "TurnFinished"]
    assert finished.receipt.unsupported == ("27,261",)
    nb = nbformat.reads((await analyst.threads.export_notebook(done.session_id)).decode(), as_version=4)
    [answer] = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("**Answer**")]
    assert answer.endswith("⚠ *Not from any query in this turn:* 27,261"), answer


async def test_a_failed_query_is_noted_by_its_error_in_the_notebook_and_the_audit(
    analyst, fake_model, recorder
):
    """A real failed step's record held the model's view of it ("error:\\n…"): the notebook's note read
    `error:` and the audit's summary DuckDB's last line (`Did you mean "pg_sequences"?`)."""
    fake_model.enqueue(tool("query_warehouse", {"sql": "SELECT * FROM nosuch", "save_as": "x"}), text("No."))
    message = IncomingMessage(text="rows of nosuch", surface="api", thread_key=("failed-note",))
    outcome = await analyst.handle(message, recorder)
    assert outcome.ok, outcome.error
    [finished] = recorder.of("step_finished")
    assert finished.record.summary.startswith(
        "failed: CatalogException: Catalog Error: Table with name nosuch"
    )
    assert finished.record.error.startswith("CatalogException: Catalog Error: Table with name nosuch")
    notebook = (await analyst.threads.export_notebook(outcome.session_id)).decode()
    assert (
        "step of the thread:* `CatalogException: Catalog Error: Table with name nosuch does not exist!`"
        in notebook
    )
