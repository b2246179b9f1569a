"""BigQuery's dataset and table names are case-sensitive (project ids lower case): a team's CamelCase
dataset, through the tools and the real client over the scripted REST API (whose lookups are as exact as
the service's). datathread lower-cased them — in the allowlist, the policy's tables, describe_table's
qualification and list_tables' dataset — so `bill.Analytics` was listed as "not found", described as
"no table named", dated by nothing, and `bill.reporting` admitted a distinct dataset `bill.REPORTING`."""

from __future__ import annotations

import datetime as dt

import pytest

from core.access import AccessPolicy
from core.policy import check_sql
from core.sandbox_local import LocalSandbox
from core.store_sqlite import SqliteStore
from core.tools import call_tool
from core.warehouse_bigquery import BigQueryWarehouse
from tests.core import bigquery_parts
from tests.core.bigquery_parts import bq_settings, tool_ctx
from tests.fakes.bigquery_api import Answer, FakeTable

fake_bq = bigquery_parts.fake_bq  # the shared scripted API (bill.shop, bill.secret, other.ext)
SCHEMA = [{"name": "user_id", "type": "INTEGER"}, {"name": "kind", "type": "STRING"}]
MODIFIED = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)


def events(dataset: str, table: str = "Events") -> FakeTable:
    stamp = str(int(MODIFIED.timestamp() * 1000))
    return FakeTable("bill", dataset, table, SCHEMA, [[1, "click"]], extra={"lastModifiedTime": stamp})


@pytest.fixture
async def tools(tmp_path, fake_bq):
    """`await tools(name, args, datasets=...)` → the tool's outcome, with DATATHREAD_BIGQUERY_DATASETS as
    given read the way the bot reads it (AccessPolicy), and the default dataset `Analytics`."""
    made = []

    async def run(name: str, args: dict, *, datasets: str):
        settings = bq_settings(tmp_path, bigquery_datasets=datasets, bigquery_default_dataset="Analytics")
        sandbox = LocalSandbox(workspaces=settings.workspaces_dir)
        store = SqliteStore(tmp_path / "state.sqlite3")
        warehouse = BigQueryWarehouse.from_settings(settings, sandbox)
        made.append((warehouse, sandbox, store))
        allow = AccessPolicy.from_settings(settings).datasets
        run.warehouse = warehouse
        return await call_tool(name, args, tool_ctx(warehouse, sandbox, store, allow))

    yield run
    for warehouse, sandbox, store in made:
        await warehouse.close()
        await sandbox.close()
        await store.close()


async def test_a_camelcase_dataset_is_listed_by_its_name(tools, fake_bq):
    """Listed as `bill.analytics`: "Skipped: dataset bill.analytics (not found)", no tables."""
    fake_bq.add_table(events("Analytics"))
    listed = await tools("list_tables", {}, datasets="bill.Analytics")
    assert not listed.is_error and "- bill.Analytics.Events (1 row)" in listed.content, listed.content
    assert "not found" not in listed.content
    for dataset in ("Analytics", "bill.Analytics", "`BILL.Analytics`"):
        one = await tools("list_tables", {"dataset": dataset}, datasets="bill.Analytics")
        assert "- bill.Analytics.Events (1 row)" in one.content and "not found" not in one.content, (
            one.content
        )


async def test_a_camelcase_table_is_described_by_its_name(tools, fake_bq):
    """describe_table looked `bill.analytics.events` up: "No table named … Call list_tables"."""
    fake_bq.add_table(events("Analytics"))
    for name in ("Analytics.Events", "bill.Analytics.Events", "Events", "`BILL`.Analytics.Events"):
        described = await tools("describe_table", {"table": name}, datasets="bill.Analytics")
        assert not described.is_error and "bill.Analytics.Events" in described.content, (name, described)


async def test_a_query_of_a_camelcase_table_reports_it_by_its_name_and_is_dated(tools, fake_bq):
    """The policy reported `bill.analytics.events`, so the receipt's freshness lookup was a 404: no date."""
    fake_bq.add_table(events("Analytics"))
    sql = "SELECT user_id FROM `bill.Analytics.Events`"
    fake_bq.on_query(sql, Answer([SCHEMA[0]], [[1]], referenced=["bill.Analytics.Events"]))
    queried = await tools("query_warehouse", {"sql": sql}, datasets="bill.Analytics")
    assert not queried.is_error and queried.tables == ("bill.Analytics.Events",), queried
    tables = check_sql(sql, dialect="bigquery", default_project="bill", default_dataset="Analytics").tables
    assert tables == ("bill.Analytics.Events",)
    assert await tools.warehouse.freshness(tables) == MODIFIED  # the receipt's date


async def test_an_allowlisted_dataset_admits_no_other_spelling_of_it(tools, fake_bq):
    """`bill.reporting` listed, described and queried `bill.REPORTING` — another dataset — as its own."""
    fake_bq.add_table(events("reporting", "orders"))
    fake_bq.add_table(events("REPORTING", "orders"))
    listed = await tools("list_tables", {}, datasets="bill.reporting")
    assert "- bill.reporting.orders" in listed.content and "REPORTING" not in listed.content, listed.content
    other = await tools("list_tables", {"dataset": "REPORTING"}, datasets="bill.reporting")
    assert other.is_error and "No dataset named 'REPORTING' that you may use" in other.content
    described = await tools("describe_table", {"table": "bill.REPORTING.orders"}, datasets="bill.reporting")
    assert described.is_error and "No table named" in described.content
    for sql in ("SELECT * FROM bill.REPORTING.orders", "SELECT * FROM `bill.Reporting`.orders"):
        refused = await tools("query_warehouse", {"sql": sql}, datasets="bill.reporting")
        assert refused.is_error and "is not allowed" in refused.content, (sql, refused.content)
    assert fake_bq.inserts == []  # refused before anything was sent, the dry run included
    # and where BigQuery resolved a name to the other dataset, its dry run is the last word
    sql = "SELECT * FROM bill.reporting.orders"
    fake_bq.on_query(sql, Answer(SCHEMA, [[1, "x"]], referenced=["bill.REPORTING.orders"]))
    refused = await tools("query_warehouse", {"sql": sql}, datasets="bill.reporting")
    assert refused.is_error and "Table `bill.REPORTING.orders` is not allowed here" in refused.content
    assert fake_bq.runs() == []


async def test_an_allowlist_of_every_dataset_lists_each_by_its_own_name(tools, fake_bq):
    """A wildcard entry lists the project's datasets: `Analytics` and `analytics` are two of them."""
    fake_bq.add_table(events("Analytics"))
    fake_bq.add_table(events("analytics", "events"))
    fake_bq.add_table(events("Sales_Data", "Orders"))
    listed = await tools("list_tables", {}, datasets="bill.Sales_*,bill.Analytics.Events")
    names = [line.split(" ")[1] for line in listed.content.splitlines() if line.startswith("- ")]
    assert names == ["bill.Analytics.Events", "bill.Sales_Data.Orders"], listed.content
    listed = await tools("list_tables", {}, datasets="bill.sales_*")
    assert "No tables are available to you here." in listed.content, listed.content
