"""Authorized views: a query over an allowed view whose base tables the allowlist does not list, through
the real client over the scripted REST API. The dry run's referencedTables names the view's base
tables (as BigQuery's does), and the bot refused "Table bill.raw.sales is not allowed here"."""

from __future__ import annotations

from core.policy import TableAllowlist
from tests.core import bigquery_parts
from tests.fakes.bigquery_api import Answer, FakeTable, qctx

fake_bq, parts = bigquery_parts.fake_bq, bigquery_parts.parts  # the shared fixtures
SCHEMA = [{"name": "region", "type": "STRING"}, {"name": "n", "type": "INTEGER"}]
REPORTING = TableAllowlist(("bill.reporting.*",))
SQL = "SELECT region, n FROM reporting.v_sales"


def view(fake, name: str, definition: str) -> None:
    project, dataset, table = name.split(".")
    fake.add_table(
        FakeTable(
            project,
            dataset,
            table,
            SCHEMA,
            table_type="VIEW",
            extra={"view": {"query": definition, "useLegacySql": False}},
        )
    )


async def test_a_view_over_tables_outside_the_allowlist_runs(parts, fake_bq):
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_sales", "SELECT region, n FROM `bill.raw.sales` WHERE region != 'x'")
    fake_bq.on_query(SQL, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.sales"]))
    result = await warehouse.query(SQL, None, qctx(store, allowlist=REPORTING))
    assert result.ok, result.error
    assert len(fake_bq.runs()) == 1


async def test_a_view_of_a_view_reaches_its_base_table_too(parts, fake_bq):
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_sales", "SELECT region, n FROM mid.v_clean")  # project: the view's
    view(fake_bq, "bill.mid.v_clean", "SELECT region, n FROM `bill.raw.sales`")
    fake_bq.on_query(SQL, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.sales"]))
    result = await warehouse.query(SQL, None, qctx(store, allowlist=REPORTING))
    assert result.ok, result.error


async def test_a_table_no_named_view_reads_is_still_refused(parts, fake_bq):
    """The dry run is still the last word for anything else: a table the SQL parser missed, or a
    table the SQL names that is no view."""
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_sales", "SELECT region, n FROM `bill.raw.sales`")
    fake_bq.add_table(FakeTable("bill", "reporting", "plain", SCHEMA, [["eu", 1]]))
    fake_bq.on_query(SQL, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.sales", "bill.secret.salaries"]))
    plain = "SELECT region, n FROM reporting.plain"
    fake_bq.on_query(plain, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.sales"]))
    for sql, table in ((SQL, "bill.secret.salaries"), (plain, "bill.raw.sales")):
        result = await warehouse.query(sql, None, qctx(store, allowlist=REPORTING))
        assert not result.ok and f"Table `{table}` is not allowed here" in result.error, result.error
    assert fake_bq.runs() == []
