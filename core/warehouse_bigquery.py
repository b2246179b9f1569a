"""BigQuery as the warehouse: discovery from table metadata, and queries that never surprise the bill.

`core/tools.py` has already parsed the SQL (one read-only statement, allowed tables only); `query` checks
it again under `effective_allowlist` (no allowlist = the billing project's datasets) before anything is
sent to Google. Then every query is dry-run first (free): BigQuery itself says the statement type (only SELECT runs — BigQuery
would run a multi-statement string as a script), the tables it reads (checked against the allowlist
again, as BigQuery resolved them) and the bytes it would scan. The estimate then meets the caps (run,
ask the person, refuse) and the byte budgets; the job runs with `maximum_bytes_billed`, a timeout and
labels, and its result lands in the session workspace as parquet with a preview for the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core import bigquery_metadata
from core.bigquery_client import (
    ANSWER_GRACE_S,
    DRY_RUN_S,
    LISTING_S,
    ClientConfig,
    NoAnswer,
    build_client,
    off_loop,
    resolve_config,
)
from core.bigquery_cost import (
    MIN_BILLED_BYTES,
    CostLimits,
    budgets,
    decide,
    format_cost,
    job_labels,
    over_budget_message,
)
from core.bigquery_errors import (
    ResultTooLarge,
    ResultUndelivered,
    ResultUnsaved,
    billed_by_failed,
    describe_error,
    is_unsavable,
    risky_columns,
    service_errors,
)
from core.bigquery_jobs import JobSpec, dry_run, run_job
from core.bigquery_listing import (
    LIST_S,
    PARTIAL_TTL_S,
    Found,
    Run,
    TableListing,
    dataset_to_list,
    gather,
    render,
)
from core.bigquery_metadata import describe, per_call
from core.bigquery_save import save_result
from core.bigquery_views import ViewCheck, late_tables
from core.config import Settings
from core.confirm import CONFIRM_TIMEOUT_S
from core.events import ConfirmRequest
from core.policy import TableAllowlist, check_sql
from core.sandbox import Sandbox, StepResult, WorkspaceFull
from core.table_notes import TableNotes, load_table_notes
from core.warehouse import QueryContext


class BigQueryWarehouse:
    """The production warehouse. One client per process; metadata cached for `metadata_ttl` seconds."""

    dialect = "bigquery"

    def __init__(
        self,
        client: Any,
        sandbox: Sandbox,
        *,
        limits: CostLimits,
        default_dataset: str | None = None,
        notes: TableNotes | None = None,
        metadata_ttl: float = 600.0,
        use_storage_api: bool = False,
    ):
        self.client = client
        self.sandbox = sandbox
        self.limits = limits
        self.default_project: str | None = client.project
        self.default_dataset = _qualify_dataset(default_dataset, client.project)
        self.notes = notes or TableNotes()
        self.metadata_ttl = metadata_ttl
        self.use_storage_api = use_storage_api
        self._cache: dict[tuple, tuple[float, Any]] = {}
        self.views = ViewCheck(client, metadata_ttl)

    @classmethod
    def from_settings(cls, settings: Settings, sandbox: Sandbox, *, config: ClientConfig | None = None):
        """Build the client (credentials in memory) and read caps, budgets and notes once."""
        client = build_client(config or resolve_config(settings))
        return cls(
            client,
            sandbox,
            limits=CostLimits.from_settings(settings),
            default_dataset=settings.bigquery_default_dataset,
            notes=load_table_notes(settings.table_notes),
            metadata_ttl=settings.bigquery_metadata_ttl,
            use_storage_api=settings.bigquery_use_storage_api,
        )

    # --- prompt and discovery -----------------------------------------------------------------
    def prompt_notes(self) -> str:
        """Dialect and naming rules; stable bytes so the system prompt caches."""
        default = (
            f" Bare table names resolve in the default dataset `{self.default_dataset}`."
            if self.default_dataset
            else ""
        )
        text = (
            "The warehouse is Google BigQuery (SQL dialect: BigQuery GoogleSQL). Refer to tables as "
            f"`project.dataset.table` in backticks; `dataset.table` means project {self.default_project}."
            f"{default} Queries are billed by bytes scanned: select only the columns you need, filter on "
            "partitioning columns (describe_table shows them), and aggregate in SQL. Call list_tables, "
            "then describe_table before querying a table. Expensive queries may be refused or need the "
            "person's confirmation."
        )
        return text + self.notes.prompt_section()

    def effective_allowlist(self, allowlist: TableAllowlist) -> TableAllowlist:
        """An empty allowlist means every dataset of the billing project, never the whole of BigQuery;
        names compared as BigQuery's are, dataset and table names case-sensitive."""
        if allowlist.allow_all:
            return TableAllowlist((f"{self.default_project}.*",), case_sensitive=True)
        return allowlist.for_dialect(self.dialect)

    async def list_tables(
        self, allowlist: TableAllowlist, *, call_s: float | None = None, dataset: str | None = None
    ) -> TableListing:
        """[{name, rows?, description}] for tables the allowlist admits (of one `dataset`, if given),
        from (free) table metadata, with notes on what is left out (core/bigquery_listing.py); each call
        given up after `call_s` (default CALL_S), and the listing at its bounds with what it found."""
        allow = self.effective_allowlist(allowlist)
        where = dataset_to_list(dataset, allow, self.default_project) if dataset else None
        key = ("tables", allow.patterns, where)
        hit = self._cache.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        # A listing's own bound (LIST_S) comes first, with what it found; LISTING_S is for a server
        # that drips its answers, which no call's timeout ends.
        run, found = Run.start(call_s, min(LIST_S, LISTING_S)), Found()
        try:
            await off_loop(
                gather,
                self.client,
                allow,
                self.default_project,
                run,
                found,
                dataset=where,
                deadline_s=LISTING_S,
            )
        except NoAnswer as exc:
            if not any(found.tables.values()):
                raise LookupError(describe_error(exc)) from None
            run.ran_out = run.ran_out or f"its {LISTING_S:g} s"
        except service_errors() as exc:  # unreachable, refused, quota: one sentence for the model
            raise LookupError(describe_error(exc, timeout_s=run.call_s)) from None
        except asyncio.CancelledError:  # help's own timeout, a Stop: what was found saves the next one
            run.stop()
            with contextlib.suppress(Exception):
                if found.datasets:
                    self._keep(key, render(found, run, self.notes), partial=True)
            raise
        finally:  # done, given up or cancelled: no worker calls again
            run.stop()
        try:
            listing = render(found, run, self.notes)
        except service_errors() as exc:
            raise LookupError(describe_error(exc, timeout_s=run.call_s)) from None
        return self._keep(key, listing, partial=listing.partial)

    def _keep(self, key: tuple, listing: TableListing, *, partial: bool) -> TableListing:
        """Cache a listing: a partial one briefly (it may be whole next time), a whole one for the TTL."""
        ttl = min(self.metadata_ttl, PARTIAL_TTL_S) if partial else self.metadata_ttl
        self._cache[key] = (time.monotonic() + ttl, listing)
        return listing

    async def describe_table(self, table: str, allowlist: TableAllowlist) -> str:
        """Columns, partitioning, clustering, curated notes and a few free sample rows."""
        full, allow = self._qualify_table(table), self.effective_allowlist(allowlist)
        if full is None or not allow.allows(full):
            raise LookupError(f"No table named {table!r} that you may use. Call list_tables to see them.")
        schema = allow.allows_prefix(full.rsplit(".", 1)[0] + ".")  # its INFORMATION_SCHEMA may be queried
        return await self._cached(
            ("describe", full, schema),
            lambda: describe(self.client, full, table, self.notes, can_query_schema=schema),
        )

    async def freshness(self, tables: Sequence[str]) -> datetime | None:
        """The oldest `lastModifiedTime` of `tables` (a free metadata call, cached like the rest)."""
        times = []
        for table in tables:
            full = self._qualify_table(table)
            if full is None:
                continue
            try:
                modified = await self._cached(
                    ("modified", full),
                    lambda f=full: self.client.get_table(f, **per_call()).modified,
                )
            except Exception:  # a receipt without a date beats an answer without a receipt
                continue
            if modified is not None:
                times.append(modified)
        return min(times, default=None)

    def _qualify_table(self, table: str) -> str | None:
        """`project.dataset.table` of a name as the model wrote it: dataset and table keep their case
        (BigQuery's are case-sensitive: lower-cased, `Analytics.Events` was "not found"), the project
        id is lower case."""
        parts = [p for p in table.strip().replace("`", "").split(".") if p]
        if len(parts) == 1 and self.default_dataset:
            parts = self.default_dataset.split(".") + parts
        if len(parts) == 2 and self.default_project:
            parts = [self.default_project, *parts]
        return ".".join([parts[0].lower(), *parts[1:]]) if len(parts) == 3 else None

    async def _cached(self, key: tuple, build, *, call_s: float | None = None):
        hit = self._cache.get(key)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        try:
            value = await off_loop(build, deadline_s=LISTING_S)  # describe: a few calls of CALL_S each
        except service_errors() as exc:  # unreachable, refused, quota: one sentence for the model
            raise LookupError(describe_error(exc, timeout_s=call_s or bigquery_metadata.CALL_S)) from None
        self._cache[key] = (time.monotonic() + self.metadata_ttl, value)
        return value

    # --- queries ------------------------------------------------------------------------------
    async def query(self, sql: str, save_as: str | None, ctx: QueryContext) -> StepResult:
        """Dry run, caps, confirmation, budgets, then the job; every failure is an actionable error."""
        started = time.perf_counter()
        try:
            result = await self._query(sql, save_as, ctx)
        except (ResultTooLarge, ResultUnsaved, ResultUndelivered, WorkspaceFull) as exc:
            result = StepResult(ok=False, error=str(exc))
        except Exception as exc:  # BigQuery and transport errors: words for the model, no traceback
            result = StepResult(ok=False, error=describe_error(exc, timeout_s=ctx.timeout_s))
        result.duration_s = round(time.perf_counter() - started, 3)
        return result

    async def _query(self, sql: str, save_as: str | None, ctx: QueryContext) -> StepResult:
        allow = self.effective_allowlist(ctx.allowlist)
        # The policy again, here, under the effective allowlist: even a dry run sends the SQL to Google
        # (and names other projects' tables in its errors), so nothing leaves before this passes.
        verdict = check_sql(
            sql,
            dialect="bigquery",
            allowlist=allow,
            default_project=self.default_project,
            default_dataset=self.default_dataset,
        )
        if not verdict.allowed:
            return _refuse(verdict.reason)
        dry_started = time.monotonic()
        dry_s = min(ctx.timeout_s, DRY_RUN_S)  # seconds for BigQuery: one dead was a whole step's wait
        try:
            dry = await off_loop(dry_run, self._spec(), sql, dry_s, deadline_s=dry_s + ANSWER_GRACE_S)
        except service_errors() as exc:  # given up at the dry run's bound: "within 120 s" said 20 s
            return StepResult(ok=False, error=describe_error(exc, timeout_s=dry_s))
        # The step's time limit covers the dry run and the job together (not each: twice the limit).
        run_s = max(ctx.timeout_s - (time.monotonic() - dry_started), 1.0)
        if (dry.statement_type or "").upper() != "SELECT":
            kind = dry.statement_type or "unknown"
            return _refuse(f"Only a single SELECT may run; BigQuery sees a {kind} statement.")
        names = [f"{r.project}.{r.dataset_id}.{r.table_id}" for r in dry.referenced_tables or []]
        outside = [name for name in names if not allow.allows(name)]
        if outside:  # the base tables of an allowed view, perhaps (core/bigquery_views.py)
            unaccounted = await self.views.unaccounted(
                sql,
                verdict.tables,
                outside,
                allow,
                dataset=self.default_dataset,
            )
            if unaccounted:
                return _refuse(f"Table `{unaccounted[0]}` is not allowed here. {_ONLY_LISTED}")
        estimate = int(dry.total_bytes_processed or 0)
        lim = self.limits
        decision = decide(
            estimate, soft_cap=lim.soft_cap, hard_cap=lim.hard_cap, price_per_tib=lim.price_per_tib
        )
        if decision.action == "refuse":
            return _refuse(decision.message)
        if decision.action == "confirm" and not await self._confirmed(decision.message, ctx):
            return _refuse(
                f"Not run: the query would scan {format_cost(estimate, lim.price_per_tib)} and the person did "
                "not confirm it. Narrow it (fewer columns, a partition filter) or ask before running it again."
            )
        counted = self._budgets(ctx)
        room, reserved = decision.maximum_bytes_billed, []
        # Reserve the estimate before running (atomic increments), so concurrent turns of one user or
        # channel cannot each spend the whole remaining budget; settle to the billed bytes afterwards.
        for budget in counted:
            used = await ctx.store.add_usage(budget.key, estimate, ttl_s=budget.ttl_s) - estimate
            reserved.append(budget)
            if used + estimate > budget.limit:
                await self._settle(ctx, reserved, -estimate)
                return _refuse(over_budget_message(budget, used, estimate, lim.price_per_tib))
            room = min(room, budget.limit - used)
        billed: int | None = None  # unknown: the reservation stands (see billed_by_failed)
        try:
            spec = self._spec(ctx)
            job, rows = await run_job(spec, sql, max(room, MIN_BILLED_BYTES), run_s, ANSWER_GRACE_S)
            billed = int(job.total_bytes_billed or 0)
        except BaseException as exc:
            billed = billed_by_failed(exc)
            raise
        finally:
            if billed is not None:
                await self._settle(ctx, reserved, billed - estimate)
        if late := late_tables(job, allow, outside):  # a view redefined since the dry run, say
            return _refuse(f"Table `{late[0]}` is not allowed here; the result is not kept. {_ONLY_LISTED}")
        try:
            table = await off_loop(
                rows.to_arrow, create_bqstorage_client=self.use_storage_api, deadline_s=LISTING_S
            )
            return await save_result(
                self.sandbox, table, job, billed, save_as, ctx, self.limits.price_per_tib
            )
        except NoAnswer:  # it ran and billed: "did not answer … try again" had it run (and bill) again
            raise ResultUndelivered(billed, LISTING_S) from None
        except Exception as exc:
            if is_unsavable(exc):
                raise ResultUnsaved(billed, exc, risky_columns(rows.schema)) from None
            raise exc from None

    def _spec(self, ctx: QueryContext | None = None) -> JobSpec:
        labels = {}
        if ctx is not None:
            labels = job_labels(
                surface=ctx.surface, channel_id=ctx.channel_id, user_id=ctx.user_id, session_id=ctx.session_id
            )
        return JobSpec(self.client, self.default_dataset, labels)

    @staticmethod
    async def _settle(ctx: QueryContext, budgets_: list, delta: int) -> None:
        for budget in budgets_:
            if delta:
                await ctx.store.add_usage(budget.key, delta, ttl_s=budget.ttl_s)

    def _budgets(self, ctx: QueryContext):
        if ctx.store is None:
            return []
        lim = self.limits
        return budgets(
            surface=ctx.surface,
            channel_id=ctx.channel_id,
            user_id=ctx.user_id,
            turn_id=ctx.turn_id,
            per_turn=lim.per_turn,
            per_user_day=lim.per_user_day,
            per_channel_day=lim.per_channel_day,
        )

    async def _confirmed(self, prompt: str, ctx: QueryContext) -> bool:
        """Ask the person; no way to ask, a decline, a timeout or a failure all mean no."""
        if ctx.confirm is None:
            return False
        request = ConfirmRequest(
            turn_id=ctx.turn_id, step_id=f"{ctx.turn_id}-bq-{uuid.uuid4().hex[:6]}", prompt=prompt
        )
        try:
            return bool(await asyncio.wait_for(ctx.confirm(request), CONFIRM_TIMEOUT_S))
        except Exception:
            return False

    async def close(self) -> None:
        """Close the HTTP session of the client."""
        await asyncio.to_thread(self.client.close)


_ONLY_LISTED = "Query only tables from list_tables."


def _refuse(reason: str) -> StepResult:
    return StepResult(ok=False, error=reason)


def _qualify_dataset(dataset: str | None, project: str | None) -> str | None:
    if not dataset:
        return None
    dataset = dataset.strip().strip("`")
    return dataset if "." in dataset or not project else f"{project}.{dataset}"
