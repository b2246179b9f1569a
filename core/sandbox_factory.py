"""The composition root: builds the parts the settings select — session store, sandbox (local/Modal),
warehouse (DuckDB/BigQuery), model — and the thread seam for commands that only read a thread (export)
and so need no model, warehouse or fork server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from core.access import AccessPolicy
from core.config import Settings
from core.model import ModelClient, build_model
from core.sandbox import Sandbox
from core.schedules_tool import SCHEDULE_TOOLS
from core.secret_files import secret_files
from core.sessions import SessionStore, open_store
from core.table_notes import load_table_notes
from core.thread import Threads
from core.tools import TOOLS, Tool
from core.warehouse import DuckDBWarehouse, Warehouse, build_demo_database


@dataclass
class Parts:
    """The production parts an Analyst runs on; tests build them with fakes at the network edge."""

    settings: Settings
    store: SessionStore
    sandbox: Sandbox
    warehouse: Warehouse
    model: ModelClient


async def build_parts(
    settings: Settings, *, model: ModelClient | None = None, start_sandbox: bool = True
) -> Parts:
    """Build every part the settings name (store, sandbox, warehouse, model) and warm the sandbox —
    or, with `start_sandbox=False` (`ask`, `chat`), let the local one start with the first step: a
    question that needs no step (a rejected key, an empty question, help) then costs no fork server."""
    model = model or build_model(settings)
    store = await open_store(settings)
    sandbox, warehouse = await build_sandbox_and_warehouse(settings, start=start_sandbox)
    return Parts(settings=settings, store=store, sandbox=sandbox, warehouse=warehouse, model=model)


async def build_sandbox_and_warehouse(settings: Settings, *, start: bool = True) -> tuple[Sandbox, Warehouse]:
    """The sandbox (started and warm, unless `start` is False for a local one) and the warehouse that
    sends its queries there."""
    home = settings.home.resolve()
    demo = build_demo_database(settings.demo_warehouse) if settings.warehouse == "duckdb" else None
    notes = load_table_notes(settings.table_notes)  # a broken file: one sentence before anything starts
    if settings.sandbox == "modal":
        from core.sandbox_modal import ModalSandbox

        sandbox: Sandbox = ModalSandbox.from_settings(settings)
    else:
        from core.sandbox_local import LocalSandbox

        sandbox = LocalSandbox(
            workspaces=settings.workspaces_dir,
            warehouse=demo,
            masked=secret_files(settings),
            hidden=[home],
            workspace_mb=settings.workspace_mb,
            isolation_policy=settings.isolation or "best",
        )
    if start or settings.sandbox != "local":  # a local sandbox starts itself on its first step
        await sandbox.start()
    if settings.warehouse == "bigquery":
        from core.warehouse_bigquery import BigQueryWarehouse

        return sandbox, BigQueryWarehouse.from_settings(settings, sandbox)
    assert demo is not None
    return sandbox, DuckDBWarehouse(
        demo,
        sandbox,
        step_memory_mb=settings.step_memory_mb,
        step_file_mb=settings.step_file_mb,
        notes=notes,
    )


def file_reader(settings: Settings) -> Sandbox:
    """A sandbox client used only for workspace files: the local one is never started (no fork server)."""
    if settings.sandbox == "modal":
        from core.sandbox_modal import ModalSandbox

        return ModalSandbox.from_settings(settings)
    from core.sandbox_local import LocalSandbox

    return LocalSandbox(workspaces=settings.workspaces_dir)


def configured_default_dataset(settings: Settings) -> str | None:
    """The BigQuery dataset bare table names resolve in, qualified as the warehouse qualifies it."""
    dataset = (settings.bigquery_default_dataset or "").strip().strip("`")
    if settings.warehouse != "bigquery" or not dataset:
        return None
    return dataset if "." in dataset or not settings.gcp_project else f"{settings.gcp_project}.{dataset}"


@contextlib.asynccontextmanager
async def open_threads(settings: Settings) -> AsyncIterator[Threads]:
    """The thread seam over the shared store and workspaces alone (raises StoreUnavailable)."""
    files = file_reader(settings)
    try:
        store = await open_store(settings)
        try:
            yield Threads(
                settings=settings,
                _store=store,
                _files=files,
                _access=AccessPolicy.from_settings(settings),
                _default_dataset=configured_default_dataset(settings),
            )
        finally:
            await store.close()
    finally:
        with contextlib.suppress(Exception):
            await files.close()


def toolset(settings: Settings) -> tuple[Tool, ...]:
    """The tools these settings offer: the six contract tools first, then optional data sources, then
    create_schedule (scheduled answers). Assembled here, so core/tools.py never imports its extensions."""
    if not settings.s3_buckets.strip():
        return TOOLS + SCHEDULE_TOOLS
    from core.tools_s3 import S3_TOOLS  # only with buckets configured

    return TOOLS + S3_TOOLS + SCHEDULE_TOOLS
