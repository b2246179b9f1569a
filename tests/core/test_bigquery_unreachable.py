"""BigQuery out of reach (DNS failing, a firewall, a closed port): google's client retries a connection
error for 600 s by default, so one step held its turn — and Ctrl-C — for ten minutes whatever the step
time limit said. Here the key's token endpoint and the API are a loopback port nothing listens on: the
real client, the real credentials flow, a real refused connection."""

from __future__ import annotations

import asyncio
import time

import pytest

from core import bigquery_metadata
from core.config import load_settings
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.warehouse_bigquery import BigQueryWarehouse
from tests.fakes.bigquery_api import qctx, service_account_key
from tests.fakes.redis_server import free_port


@pytest.fixture
async def warehouse(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    settings = load_settings(
        _env_file=None,
        warehouse="bigquery",
        gcp_project="bill",
        google_application_credentials=service_account_key(tmp_path / "key.json", f"{closed}/token"),
        bigquery_api_url=closed,
        home=tmp_path / "home",
    )
    built = BigQueryWarehouse.from_settings(settings, LocalSandbox(workspaces=settings.workspaces_dir))
    yield built
    await built.close()


async def test_a_query_fails_within_its_step_time_limit_in_one_sentence(warehouse):
    started = time.monotonic()
    result = await asyncio.wait_for(warehouse.query("SELECT 1", None, qctx(None, timeout_s=2.0)), 60)
    took = time.monotonic() - started
    assert not result.ok
    assert result.error == "Could not reach BigQuery within 2 s: Connection refused. Try again shortly."
    assert took < 6, f"{took:.1f} s"


async def test_listing_tables_fails_within_its_bound_in_one_sentence(warehouse, monkeypatch):
    monkeypatch.setattr(bigquery_metadata, "CALL_S", 1.5)  # 20 s in production
    started = time.monotonic()
    with pytest.raises(LookupError, match=r"^Could not reach BigQuery within .*: Connection refused\."):
        await asyncio.wait_for(warehouse.list_tables(TableAllowlist()), 60)
    assert time.monotonic() - started < 6
