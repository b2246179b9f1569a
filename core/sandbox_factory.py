"""Builds the sandbox and warehouse the settings select (local/Modal, DuckDB/BigQuery)."""

from __future__ import annotations

from core.config import Settings
from core.sandbox import Sandbox
from core.warehouse import DuckDBWarehouse, Warehouse, build_demo_database


def secret_files(settings: Settings) -> list[str]:
    """Files holding bot secrets that sandboxed code must not read (masked in its mount namespace)."""
    paths = [settings.model_config.get("env_file") or ".env"]
    if settings.google_application_credentials:
        paths.append(str(settings.google_application_credentials))
    return [str(p) for p in paths]


async def build_sandbox_and_warehouse(settings: Settings) -> tuple[Sandbox, Warehouse]:
    """The sandbox (started, warm) and the warehouse that sends its queries there."""
    home = settings.home.resolve()
    demo = (
        build_demo_database(home / "warehouse" / "nycflights13.duckdb")
        if settings.warehouse == "duckdb"
        else None
    )
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
    await sandbox.start()
    if settings.warehouse == "bigquery":
        from core.warehouse_bigquery import BigQueryWarehouse

        return sandbox, BigQueryWarehouse.from_settings(settings, sandbox)
    assert demo is not None
    return sandbox, DuckDBWarehouse(
        demo, sandbox, step_memory_mb=settings.step_memory_mb, step_file_mb=settings.step_file_mb
    )
