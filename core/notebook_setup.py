"""The opening of an exported notebook: the review warning, how to run it (the packages and the
reader's own credentials), and the setup cell that makes the working directory and the warehouse
client the replayed steps use.

Kept apart from core/notebook.py, which turns each turn's steps into cells: what a reader must set
up, and what the setup cell defines for the cells after it, changes here.
"""

from __future__ import annotations

from datetime import UTC, datetime

REVIEW_WARNING = (
    "> **⚠️ Review every cell before you run it.** The code below was written by an AI model during a "
    "chat. In the bot it ran in a sandbox with no credentials, no network and no files but its own; here "
    "it runs as *you*, with your files, network and credentials. Steps that failed in the thread, or that "
    "reached outside the data stack (environment variables, processes, sockets, native code, files "
    "outside the working directory), are left out or commented out, with the reason. This notebook holds "
    "no credentials: it reads yours from your environment."
)
DIALECTS = {"duckdb": "DuckDB", "bigquery": "BigQuery"}
# What the setup cell defines: a result saved under one of these names would shadow it for later cells.
SETUP_NAMES = {"warehouse", "client", "job_config", "duckdb", "pd", "pq", "pc", "os", "Path", "save_parquet"}


def intro_text(session_id: str, turns: list[dict], bigquery: bool, dialect: str) -> str:
    """The first cell: the review warning, when the questions were asked, and how to run the notebook."""
    started = min((t["started"] for t in turns if t.get("started")), default=0)
    when = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%d") if started else "unknown date"
    if bigquery:
        env = (
            "- `GOOGLE_APPLICATION_CREDENTIALS` — your service-account key file (or `gcloud auth "
            "application-default login`);\n- `GCP_PROJECT` — the project that runs (and pays for) the queries."
        )
        packages = "google-cloud-bigquery pyarrow pandas matplotlib duckdb"
    else:
        env = (
            "- `DATATHREAD_WAREHOUSE_PATH` — the DuckDB warehouse file, or\n"
            "- `DATATHREAD_HOME` — then the demo database `$DATATHREAD_HOME/warehouse/nycflights13.duckdb` "
            "is used (default `./.datathread`)."
        )
        packages = "duckdb pyarrow pandas matplotlib"
    return (
        f"# datathread thread `{session_id}`\n\n" + REVIEW_WARNING + "\n\n"
        f"Questions asked on {when}, with every query and step the bot ran ({DIALECTS.get(dialect, dialect)} SQL), in order.\n\n"
        "**How to run it:** `pip install " + packages + "`, set in *your* environment\n\n" + env + "\n\n"
        f"then, once you have read them, run the cells in order. The setup cell creates "
        f"`./{session_id}-work` and works there: running the notebook top to bottom on the same data "
        "rebuilds the thread's files (parquet results, charts, CSVs). Steps that failed in the thread "
        "are not repeated."
    )


def setup_code(
    session_id: str,
    bigquery: bool,
    gcp_project: str | None,
    dataset: str | None,
    max_bytes_billed: int | None,
) -> str:
    """The setup cell: UTC as the bot's steps ran, the working directory, the warehouse client and
    `save_parquet`, which the replayed steps use (`SETUP_NAMES`)."""
    lines = [
        "# Setup: a working directory for the thread's files, and the warehouse client.",
        "import os",
        "import time",
        "from pathlib import Path",
        "",
        "os.environ['TZ'] = 'UTC'  # as the bot's steps ran: the same day boundaries, the same totals",
        "if hasattr(time, 'tzset'):  # Unix; elsewhere the SET TimeZone below still gives UTC days",
        "    time.tzset()",
        "",
        "import duckdb",
        "import pandas as pd",
        "import pyarrow.csv as pc",
        "import pyarrow.parquet as pq",
        "",
        f"WORKDIR = {session_id + '-work'!r}",
    ]
    if not bigquery:
        lines += [
            'if "WAREHOUSE_PATH" not in globals():  # resolved once, before changing directory',
            "    WAREHOUSE_PATH = Path(",
            '        os.environ.get("DATATHREAD_WAREHOUSE_PATH")',
            '        or Path(os.environ.get("DATATHREAD_HOME", ".datathread")) / "warehouse" / "nycflights13.duckdb"',
            "    ).resolve()",
        ]
    lines += [
        "if Path.cwd().name != WORKDIR:  # re-running this cell must not nest directories",
        "    Path(WORKDIR).mkdir(exist_ok=True)",
        "    os.chdir(WORKDIR)",
        "",
    ]
    if bigquery:
        lines += [
            "from google.cloud import bigquery",
            "",
            f'client = bigquery.Client(project=os.environ.get("GCP_PROJECT") or {gcp_project!r})',
            "# Run All re-runs every query of the thread: each may bill at most the bot's own cap per query.",
            "job_config = bigquery.QueryJobConfig("
            + ", ".join(
                ([f"default_dataset={dataset!r}"] if dataset else [])
                + ([f"maximum_bytes_billed={max_bytes_billed}"] if max_bytes_billed else [])
            )
            + ")",
        ]
    else:
        lines += [
            "if not WAREHOUSE_PATH.exists():",
            '    raise FileNotFoundError(f"No DuckDB warehouse at {WAREHOUSE_PATH}: set DATATHREAD_WAREHOUSE_PATH.")',
            "warehouse = duckdb.connect(str(WAREHOUSE_PATH), read_only=True)",
            "warehouse.execute(\"SET TimeZone = 'UTC'\")",
        ]
    lines += ["duckdb.execute(\"SET TimeZone = 'UTC'\")  # run_sql's connection"]
    lines += [
        "",
        "",
        "def save_parquet(table, name):",
        '    """Save a result the way the bot did (parquet, zstd) and show its first rows."""',
        '    pq.write_table(table, name, compression="zstd")',
        '    print(f"{name}: {table.num_rows:,} rows")',
        "    return table.slice(0, 10).to_pandas()",
    ]
    return "\n".join(lines)
