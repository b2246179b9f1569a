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


def gets(fake) -> int:
    return sum(1 for method, path, _ in fake.calls if method == "GET" and "/tables/" in path)


async def test_a_view_named_where_it_reads_nothing_does_not_vouch_for_a_table_the_sql_names(parts, fake_bq):
    """referencedTables cannot say a table was read through the view: an outside table whose name is
    in the SQL itself (a read the parser missed) is refused, whatever views the SQL names."""
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_agg", "SELECT region, SUM(n) n FROM `bill.raw.payroll` GROUP BY 1")
    fake_bq.add_table(FakeTable("bill", "reporting", "plain", SCHEMA, [["eu", 1]]))
    dead = "SELECT region, n FROM reporting.plain WHERE EXISTS(SELECT 1 FROM reporting.v_agg WHERE FALSE)"
    for sql in (
        dead + " AND 'RAW.Payroll' != ''",
        dead + " -- `bill`.`raw`.payroll",
        dead + " /* raw.pay* */",
    ):
        fake_bq.on_query(
            sql, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.payroll", "bill.reporting.plain"])
        )
        result = await warehouse.query(sql, None, qctx(store, allowlist=REPORTING))
        assert not result.ok and "Table `bill.raw.payroll` is not allowed here" in result.error, sql
    assert fake_bq.runs() == []


async def test_a_table_the_job_read_beyond_what_the_dry_run_accepted_withholds_the_result(parts, fake_bq):
    """A view redefined between the dry run and the run: the job's own referencedTables are checked."""
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_sales", "SELECT region, n FROM `bill.raw.sales`")
    late = ["bill.raw.sales", "bill.secret.salaries"]
    fake_bq.on_query(SQL, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.sales"], run_referenced=late))
    result = await warehouse.query(SQL, None, qctx(store, allowlist=REPORTING))
    assert not result.ok and "Table `bill.secret.salaries` is not allowed here" in result.error
    assert result.saved_as is None and result.preview in (None, "")


async def test_names_are_compared_as_bigquery_spells_them(parts, fake_bq):
    """Dataset and table names are case-sensitive in BigQuery: a view over raw.sales does not vouch for
    raw.SALES, and a view in dataset `Reporting` is read by that name (it was looked up lower-cased: 404)."""
    warehouse, _, store, _ = parts
    view(fake_bq, "bill.reporting.v_sales", "SELECT region, n FROM `bill.raw.sales`")
    fake_bq.on_query(SQL, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.SALES"]))
    result = await warehouse.query(SQL, None, qctx(store, allowlist=REPORTING))
    assert not result.ok and "Table `bill.raw.SALES` is not allowed here" in result.error
    view(fake_bq, "bill.Reporting.V_Sales", "SELECT region, n FROM `bill.Raw.Sales`")
    mixed = "SELECT region, n FROM `bill.Reporting.V_Sales`"
    fake_bq.on_query(mixed, Answer(SCHEMA, [["eu", 1]], referenced=["bill.Raw.Sales"]))
    result = await warehouse.query(mixed, None, qctx(store, allowlist=TableAllowlist(("bill.Reporting.*",))))
    assert result.ok, result.error


async def test_view_definitions_are_cached_and_followed_only_until_every_table_is_accounted_for(
    parts, fake_bq
):
    warehouse, _, store, _ = parts
    bases = [f"bill.raw.t{i}" for i in range(6)]
    view(fake_bq, "bill.reporting.v_wide", "SELECT region, n FROM " + " JOIN ".join(f"`{b}`" for b in bases))
    sql = "SELECT region, n FROM reporting.v_wide"
    fake_bq.on_query(sql, Answer(SCHEMA, [["eu", 1]], referenced=bases))
    counts = []
    for _ in range(2):
        before = gets(fake_bq)
        result = await warehouse.query(sql, None, qctx(store, allowlist=REPORTING))
        assert result.ok, result.error
        counts.append(gets(fake_bq) - before)
    assert counts == [1, 0]  # 7 and 7: the view, then each of its base tables, on every query


async def test_a_materialized_view_and_a_view_over_a_wildcard_table_run_too(parts, fake_bq):
    warehouse, _, store, _ = parts
    fake_bq.add_table(
        FakeTable(
            "bill",
            "reporting",
            "mv",
            SCHEMA,
            table_type="MATERIALIZED_VIEW",
            extra={"materializedView": {"query": "SELECT region, n FROM `bill.raw.sales`"}},
        )
    )
    view(fake_bq, "bill.reporting.v_ev", "SELECT region, n FROM `bill.raw.events_*`")
    for sql, read in (
        ("SELECT region, n FROM reporting.mv", "bill.raw.sales"),
        ("SELECT region, n FROM reporting.v_ev", "bill.raw.events_20240101"),
    ):
        fake_bq.on_query(sql, Answer(SCHEMA, [["eu", 1]], referenced=[read]))
        result = await warehouse.query(sql, None, qctx(store, allowlist=REPORTING))
        assert result.ok, (sql, result.error)
    other = "SELECT n FROM reporting.v_ev"  # a table the wildcard does not cover
    fake_bq.on_query(other, Answer(SCHEMA, [["eu", 1]], referenced=["bill.raw.other_1"]))
    result = await warehouse.query(other, None, qctx(store, allowlist=REPORTING))
    assert not result.ok and "bill.raw.other_1" in result.error
