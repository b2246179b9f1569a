"""The six tools the model sees: typed inputs, one description each, and what a call does.

Schemas come from the pydantic input models, so a tool's contract lives in one place. Every call is
checked by `core/policy.py` before it reaches a warehouse or the sandbox, and every outcome — success
or failure — is a `ToolOutcome` the loop turns into a `tool_result` (failures with `is_error`).
"""

from __future__ import annotations

import mimetypes
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.attachment_words import CONTROL_CHARS, MAX_ALT_TEXT_CHARS, alt_text, attachment_title
from core.events import ArtifactReady, Confirmer
from core.policy import TableAllowlist, Verdict, check_python, check_sql
from core.redact import redact_clipped
from core.sandbox import Sandbox, StepKind, StepRequest
from core.text_repair import readable
from core.tool_outcome import ToolOutcome, describe_saved, describe_step, refused
from core.warehouse import QueryContext, Warehouse
from core.wording import counted

if TYPE_CHECKING:
    from core.s3 import S3Source
    from core.schedules_tool import ScheduleDesk

MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024
MIN_CONTENT_CHARS = 64_000
MAX_SUMMARY_CHARS = 300
MAX_ERROR_CHARS = 2000  # a step record keeps this much of its error (audit, notebook, Show SQL & code)
LISTED_FILES = 30  # file names a refused attach_file lists (a workspace may hold 100,000)
# Not .xlsx: its formula cells (`=HYPERLINK(…)`) would open live in Excel, and only CSV's are neutralised.
ATTACHABLE = {"png", "jpg", "jpeg", "svg", "csv", "parquet", "txt", "json", "pdf", "md", "html"}


class ToolInput(BaseModel):
    """Base of every tool's input model: unknown fields are refused, so a typo is an error."""

    model_config = ConfigDict(extra="forbid")


class ListTablesInput(ToolInput):
    """List the warehouse tables you may query, with row counts and descriptions. A long listing is cut
    short with a note naming what it left out: then ask for one dataset."""

    dataset: str | None = Field(
        None, description="Only this dataset's tables (BigQuery: `project.dataset` or `dataset`)."
    )


class DescribeTableInput(ToolInput):
    """Show a table's columns with types, notes and a few sample rows. Call before querying a new table."""

    table: str = Field(description="Table name as list_tables shows it.")


class QueryWarehouseInput(ToolInput):
    """Run ONE read-only SELECT in the warehouse's SQL dialect. The full result is saved in the workspace as
    <save_as>.parquet; you get the file name, row count, schema and a short preview, never all rows.
    Aggregate in SQL where you can."""

    sql: str = Field(description="A single read-only SELECT (or WITH … SELECT) statement.")
    save_as: str | None = Field(None, description="File stem for the result, e.g. 'delays_by_carrier'.")


class RunSqlInput(ToolInput):
    """Run ONE read-only DuckDB query over workspace files (results, files people shared) by relative
    path, e.g. SELECT * FROM 'delays.parquet'. The result is saved as <save_as>.parquet with a preview."""

    sql: str = Field(description="A single read-only DuckDB SELECT over workspace files.")
    save_as: str | None = Field(None, description="File stem for the result.")


class RunPythonInput(ToolInput):
    """Run Python in the workspace (working directory) with pandas, numpy, matplotlib (Agg backend) and duckdb.
    Read earlier results with pd.read_parquet('name.parquet'); save charts with plt.savefig('chart.png',
    dpi=150, bbox_inches='tight') and tables with df.to_csv('name.csv', index=False). print() what you need
    to see: stdout, errors and the list of new files come back. No network."""

    code: str = Field(description="Python source to run.")


class AttachFileInput(ToolInput):
    """Upload a workspace file (a chart PNG, a CSV) into the conversation for the person. A .parquet file is
    converted to CSV first. Attach only what answers the question. Give every chart an alt_text."""

    path: str = Field(description="Relative path of the file in the workspace.")
    title: str | None = Field(None, description="Short title shown with the file.")
    alt_text: str | None = Field(
        None,
        description="For a chart or image: what it shows, for people who can't see it — the kind of chart, "
        f"what is plotted, the key values. Plain text, one to three sentences (at most {MAX_ALT_TEXT_CHARS} characters).",
    )


@dataclass
class ToolContext:
    """What a tool call may use: the session's sandbox and warehouse, under its policy."""

    session_id: str
    turn_id: str
    sandbox: Sandbox
    warehouse: Warehouse
    query: QueryContext
    allowlist: TableAllowlist = field(default_factory=TableAllowlist)
    confirm: Confirmer | None = None
    step_timeout_s: float = 120.0
    step_memory_mb: int = 4096
    step_file_mb: int = 1024
    step_output_bytes: int = 20_000
    s3: S3Source | None = None  # set only when S3 buckets are configured
    tools: Mapping[str, Tool] = field(default_factory=lambda: TOOLS_BY_NAME)  # what this turn offers
    redact: Callable[[str], str] | None = None  # secrets hygiene for tool results (core/redact.py)
    schedules: ScheduleDesk | None = None  # where create_schedule may post (None: not from here)

    def step_request(self, kind: StepKind, code: str = "", **given: Any) -> StepRequest:
        """A step in this session under this turn's limits (`given` replaces any of them): one place
        for the tools, the S3 copies and the shared files' reads."""
        limits = {
            "timeout_s": self.step_timeout_s,
            "memory_mb": self.step_memory_mb,
            "file_mb": self.step_file_mb,
            "output_bytes": self.step_output_bytes,
            "preview_rows": self.query.preview_rows,
            "preview_bytes": self.query.preview_bytes,
            "shared": self.query.shared,
        }
        return StepRequest(kind=kind, session_id=self.session_id, code=code, **(limits | given))

    def sql_verdict(self, sql: str) -> Verdict:
        """Whether the warehouse may run `sql` here: this conversation's allowlist as the warehouse
        applies it (BigQuery: never all of BigQuery). Queries, and the verified examples offered."""
        w = self.warehouse
        return check_sql(
            sql,
            dialect=w.dialect,
            allowlist=w.effective_allowlist(self.allowlist),
            default_project=w.default_project,
            default_dataset=w.default_dataset,
        )

    def permits(self, sql: str) -> bool:
        return self.sql_verdict(sql).allowed


async def list_tables(args: ListTablesInput, ctx: ToolContext) -> ToolOutcome:
    try:
        tables = await ctx.warehouse.list_tables(ctx.allowlist, dataset=args.dataset)
    except LookupError as exc:  # the warehouse could not be asked (BigQuery unreachable, say)
        return refused(str(exc).strip("'\""))
    notes = list(getattr(tables, "notes", ()))  # what a long or partial listing left out, and why
    if not tables:
        return ToolOutcome(
            content="\n".join(["No tables are available to you here.", *notes]), summary="no tables"
        )
    lines = [
        f"- {t['name']}{_rows(t)}" + (f": {t['description']}" if t.get("description") else "") for t in tables
    ]
    return ToolOutcome(content="\n".join(lines + notes), summary=f"{len(tables)} tables")


def _rows(table: dict) -> str:
    """` (3 rows)`; ` (rows not counted)` for a view; nothing where the listing did not look it up."""
    if "rows" not in table:
        return ""
    return f" ({counted(table['rows'], 'row') if table['rows'] is not None else 'rows not counted'})"


async def describe_table(args: DescribeTableInput, ctx: ToolContext) -> ToolOutcome:
    try:
        text = await ctx.warehouse.describe_table(args.table, ctx.allowlist)
    except LookupError as exc:
        return refused(str(exc).strip("'\""))
    return ToolOutcome(content=text, summary=f"described {args.table}")


async def query_warehouse(args: QueryWarehouseInput, ctx: ToolContext) -> ToolOutcome:
    verdict = ctx.sql_verdict(args.sql)
    if not verdict.allowed:
        return refused(verdict.reason)
    result = await ctx.warehouse.query(args.sql, args.save_as, ctx.query)
    return replace(
        describe_saved(result, args.save_as, ctx.query.shared, what="query"), tables=verdict.tables
    )


# DuckDB's words for a table run_sql does not have ("Table with name flights does not exist!"): a
# warehouse table, most likely, asked for next to a file a person shared.
NO_SUCH_TABLE = "Catalog Error: Table with name "
WAREHOUSE_JOIN = (
    "run_sql reads workspace files only, not the warehouse's tables. To join a warehouse table with "
    "a file here: query_warehouse with save_as (filter or aggregate there, e.g. save_as='by_carrier'), "
    "then run_sql over both files, e.g. ... FROM 'by_carrier.parquet' b JOIN 'sales.csv' s ON ..."
)


async def run_sql(args: RunSqlInput, ctx: ToolContext) -> ToolOutcome:
    verdict = check_sql(args.sql, dialect="duckdb", workspace_files=True)
    if not verdict.allowed:
        return refused(verdict.reason)
    result = await ctx.sandbox.run(_request(ctx, "sql", args.sql, args.save_as))
    outcome = replace(
        describe_saved(result, args.save_as, ctx.query.shared, what="sql"), tables=verdict.tables
    )
    if not result.ok and NO_SUCH_TABLE in result.error:
        outcome = replace(outcome, content=f"{outcome.content}\n{WAREHOUSE_JOIN}")
    return outcome


async def run_python(args: RunPythonInput, ctx: ToolContext) -> ToolOutcome:
    verdict = check_python(args.code)
    if not verdict.allowed:
        return refused(verdict.reason)
    result = await ctx.sandbox.run(_request(ctx, "python", args.code, None))
    return describe_step(result, what="python")


def _request(ctx: ToolContext, kind, code: str, save_as: str | None) -> StepRequest:
    return ctx.step_request(kind, code, save_as=save_as)


# Result rows are untrusted text: cells that would run as spreadsheet formulas are neutralised. Types a
# CSV cannot write as people read them (a duration, a Period, DuckDB's infinity) go as text first.
_CONVERT = """
import os, pyarrow.parquet as pq, pyarrow.csv as pc
from core.csv_cells import neutralise_table
from core.portable_columns import portable
os.makedirs(os.path.dirname({dst!r}) or ".", exist_ok=True)
pc.write_csv(neutralise_table(portable(pq.read_table({src!r}))[0]), {dst!r})
"""
CONVERTED = "attachments"  # where a parquet's CSV goes when its own name is taken


async def attach_file(args: AttachFileInput, ctx: ToolContext) -> ToolOutcome:
    path = PurePosixPath(args.path.strip().removeprefix("./"))
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return refused(f"'{args.path}' is not a relative path inside the workspace.")
    if CONTROL_CHARS.search(args.path):
        return refused(f"{args.path!r} has control characters in its name: save it under a plain name.")
    files = {f["path"]: f for f in await ctx.sandbox.list_files(ctx.session_id)}
    name = str(path)
    if name not in files:
        names = sorted(files)
        listing = ", ".join(names[:LISTED_FILES]) or "none"
        more = (
            f" (and {len(names) - LISTED_FILES:,} more: list_files shows them)"
            if len(names) > LISTED_FILES
            else ""
        )
        return refused(f"No file '{name}' in the workspace. Files: {listing}{more}.")
    if path.suffix.lower() == ".parquet":
        csv_name = str(path.with_suffix(".csv"))
        if csv_name in files:  # the model's own CSV of that name (a summary, say): never overwritten
            csv_name = str(CONVERTED / path.with_suffix(".csv"))
        code = _CONVERT.format(src=name, dst=csv_name)
        result = await ctx.sandbox.run(_request(ctx, "python", code, None))
        if not result.ok:
            return refused(f"Could not convert {name} to CSV: {result.error.splitlines()[-1]}")
        files = {f["path"]: f for f in await ctx.sandbox.list_files(ctx.session_id)}
        name = csv_name
    kind = PurePosixPath(name).suffix.lstrip(".").lower()
    if kind not in ATTACHABLE:
        return refused(f"Files of type .{kind} are not attached. Use PNG for charts and CSV for data.")
    size = files[name]["size"]
    if size > MAX_ATTACHMENT_BYTES:
        return refused(
            f"{name} is {size / 1e6:.1f} MB, over the {MAX_ATTACHMENT_BYTES // 10**6} MB limit for "
            "attachments. Aggregate or filter it, or attach a sample."
        )
    mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
    title = attachment_title(args.title, PurePosixPath(name).name)
    alt, described = alt_text(args.alt_text, title=title, name=PurePosixPath(name).name, mime=mime)
    artifact = ArtifactReady(
        turn_id=ctx.turn_id,
        session_id=ctx.session_id,
        path=name,
        name=PurePosixPath(name).name,
        title=title,
        size=size,
        mime=mime,
        alt_text=alt,
        described=described,
    )
    return ToolOutcome(
        content=f"Attached {name} ({size:,} bytes) to the conversation as '{title}'.",
        summary=f"attached {name}",
        files=(name,),
        artifact=artifact,
    )


@dataclass(frozen=True)
class Tool:
    """A tool: its name, input model (schema + description) and handler."""

    name: str
    input_model: type[ToolInput]
    handler: Callable[..., Awaitable[ToolOutcome]]
    title: str

    def spec(self) -> dict:
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        doc = " ".join((self.input_model.__doc__ or "").split())
        return {"name": self.name, "description": doc, "input_schema": schema}


TOOLS: tuple[Tool, ...] = (
    Tool("list_tables", ListTablesInput, list_tables, "Listing tables"),
    Tool("describe_table", DescribeTableInput, describe_table, "Reading a table's schema"),
    Tool("query_warehouse", QueryWarehouseInput, query_warehouse, "Querying the warehouse"),
    Tool("run_sql", RunSqlInput, run_sql, "Running SQL on workspace files"),
    Tool("run_python", RunPythonInput, run_python, "Running Python"),
    Tool("attach_file", AttachFileInput, attach_file, "Attaching a file"),
)
TOOLS_BY_NAME = {t.name: t for t in TOOLS}


def tool_specs(tools: tuple[Tool, ...] = TOOLS) -> list[dict]:
    """The tool list sent to the model — identical bytes on every request, so it caches."""
    return [t.spec() for t in tools]


def step_detail(name: str, raw_input: dict) -> str:
    """The SQL or code of a call, for progress displays; other inputs as `name: value` pairs (a
    schedule's card read `{"cron": "0 9 * * mon", "question": …}`)."""
    for key in ("sql", "code", "table", "path"):
        if isinstance(raw_input.get(key), str):
            return raw_input[key]
    pairs = [f"{k}: {v}" for k, v in raw_input.items() if isinstance(v, str | int | float) and str(v)]
    return " · ".join(pairs)[:200]


async def call_tool(name: str, raw_input: object, ctx: ToolContext) -> ToolOutcome:
    """Validate and run one tool call. Unknown names, bad inputs and crashes are errors the model sees."""
    tool = ctx.tools.get(name)
    if tool is None:
        return refused(f"Unknown tool '{name}'. Available tools: {', '.join(ctx.tools)}.")
    try:
        args = tool.input_model.model_validate(raw_input if isinstance(raw_input, dict) else {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
        return refused(f"Invalid input for {name}: {problems}.")
    try:
        outcome = await tool.handler(args, ctx)
    except Exception as exc:  # a tool crashed: the model gets the error, the turn goes on
        outcome = refused(f"The tool failed: {type(exc).__name__}: {str(exc)[:500]}")
    # Clipped before redaction, so a flood of step output costs bounded work on the event loop; and
    # redacted, so a secret in data or code never comes back to the model. Readable (core/text_repair.py)
    # first, so redaction sees what the model would: a file a step named with bytes that are not UTF-8
    # (`open(b'M\\xfcnchen.csv', 'w')`) came back as a lone surrogate, and the next model request could not
    # be encoded (the workspace finds it by its readable name: core/workspace_paths.py `named`).
    outcome.content = redact_clipped(readable(outcome.content), content_limit(ctx), ctx.redact)
    outcome.summary = redact_clipped(readable(outcome.summary), MAX_SUMMARY_CHARS, ctx.redact)
    outcome.error = redact_clipped(readable(outcome.error), MAX_ERROR_CHARS, ctx.redact)
    outcome.files = tuple(readable(f) for f in outcome.files)
    return outcome


def content_limit(ctx: ToolContext) -> int:
    """The most a tool result may say to the model: output and preview limits plus schema and files."""
    return max(MIN_CONTENT_CHARS, ctx.step_output_bytes + ctx.query.preview_bytes + 16_000)
