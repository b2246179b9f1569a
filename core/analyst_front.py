"""The web process's core when worker processes run the turns (`core/runner_workers.py`).

The web process still needs the thread seam inside the ack (event de-dup, Run/Cancel answers, signed
file links, the scheduler's claims), but never runs a step: so it gets the same `Analyst` over the
shared store and workspaces, with a sandbox client that only reads files and never starts a fork
server (each worker has its own). That keeps the web process light and its event loop free to ack.
"""

from __future__ import annotations

from core.analyst import Analyst
from core.config import Settings
from core.model import build_model
from core.sandbox_factory import Parts, file_reader
from core.sessions import open_store
from core.table_notes import load_table_notes
from core.warehouse import DuckDBWarehouse, Warehouse, build_demo_database


async def front_analyst(settings: Settings) -> Analyst:
    """An Analyst for a process that acks and reads threads but never answers (no fork server)."""
    files = file_reader(settings)
    warehouse: Warehouse
    if settings.warehouse == "bigquery":
        from core.warehouse_bigquery import BigQueryWarehouse

        warehouse = BigQueryWarehouse.from_settings(settings, files)
    else:  # built here once, before the workers start, so they never race to build it
        demo = build_demo_database(settings.demo_warehouse)
        warehouse = DuckDBWarehouse(demo, files, notes=load_table_notes(settings.table_notes))
    store = await open_store(settings)
    parts = Parts(
        settings=settings, store=store, sandbox=files, warehouse=warehouse, model=build_model(settings)
    )
    return Analyst(parts)
