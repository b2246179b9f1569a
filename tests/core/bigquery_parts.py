"""The BigQuery warehouse's test parts: the scripted REST API (`responses`) for one test, a warehouse
on it with a real workspace and a real SQLite store, and the tool context — shared by the BigQuery
suites (queries, discovery, errors)."""

from __future__ import annotations

import io
import threading
import time

import pyarrow.parquet as pq
import pytest
import responses

from core.config import load_settings
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.store_sqlite import SqliteStore
from core.tools import ToolContext
from core.warehouse_bigquery import BigQueryWarehouse
from tests.fakes.bigquery_api import API, FakeBigQuery, FakeTable, qctx

ORDERS_SCHEMA = [
    {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
    {"name": "amount", "type": "FLOAT"},
    {"name": "status", "type": "STRING", "description": "paid | refunded | test"},
]
ORDERS = "SELECT id, amount, status FROM shop.orders"


def bq_settings(tmp_path, **extra):
    values = dict(
        _env_file=None,
        warehouse="bigquery",
        gcp_project="bill",
        bigquery_api_url=API,
        home=tmp_path / "home",
        query_soft_cap_bytes=10 * 10**9,
        query_hard_cap_bytes=100 * 10**9,
    )
    return load_settings(**(values | extra))


@pytest.fixture
def fake_bq():
    fake = FakeBigQuery(API)
    fake.add_table(
        FakeTable(
            "bill",
            "shop",
            "orders",
            ORDERS_SCHEMA,
            [[1, 9.5, "paid"], [2, 20.0, "refunded"], [3, 4.25, "paid"]],
            description="One row per order.",
            extra={
                "timePartitioning": {"type": "DAY", "field": "created"},
                "clustering": {"fields": ["status"]},
            },
        )
    )
    fake.add_table(FakeTable("bill", "shop", "customers", [{"name": "id", "type": "INTEGER"}], [[1]]))
    fake.add_table(FakeTable("bill", "secret", "salaries", [{"name": "pay", "type": "FLOAT"}], [[1.0]]))
    fake.add_table(FakeTable("other", "ext", "events", [{"name": "e", "type": "STRING"}], [["x"]]))
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        fake.register(mock)
        fake.mock = mock
        yield fake
        # no call of the bot's may outlive its test: one that did sent its next request into the next
        # test's fake (a KeyError there, under load)
        for _ in range(200):
            if not [t for t in threading.enumerate() if t.name == "bigquery"]:
                break
            time.sleep(0.05)
        assert not [t for t in threading.enumerate() if t.name == "bigquery"], (
            "a BigQuery call outlived its test"
        )
    assert not fake.bugs


@pytest.fixture
async def parts(tmp_path, fake_bq):
    settings = bq_settings(tmp_path, bigquery_default_dataset="shop")
    sandbox = LocalSandbox(workspaces=settings.workspaces_dir)  # write_file needs no worker process
    store = SqliteStore(tmp_path / "state.sqlite3")
    warehouse = BigQueryWarehouse.from_settings(settings, sandbox)
    yield warehouse, sandbox, store, settings
    await warehouse.close()
    await sandbox.close()
    await store.close()


def read_parquet(settings, name: str):
    data = (settings.workspaces_dir / "s1" / name).read_bytes()
    return pq.read_table(io.BytesIO(data)).to_pydict()


def tool_ctx(warehouse, sandbox, store, allowlist: TableAllowlist) -> ToolContext:
    query = qctx(store, allowlist=allowlist)
    return ToolContext(
        session_id="s1",
        turn_id="turn1",
        sandbox=sandbox,
        warehouse=warehouse,
        query=query,
        allowlist=allowlist,
    )
