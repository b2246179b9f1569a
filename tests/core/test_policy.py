"""Table-driven tests for core.policy: the SQL and Python gates for model-written code."""

from __future__ import annotations

import dataclasses

import pytest

from core.policy import DIALECTS, TableAllowlist, Verdict, check_python, check_sql

BQ_ALLOW = TableAllowlist(("proj.ds.*", "proj.sales.orders"))
DUCK_ALLOW = TableAllowlist(("main.*",))
BQ_DEFAULTS = {"default_project": "proj", "default_dataset": "ds"}


def _bq(sql: str, **kw) -> Verdict:
    return check_sql(sql, dialect="bigquery", allowlist=BQ_ALLOW, **BQ_DEFAULTS, **kw)


def _duck(sql: str, **kw) -> Verdict:
    return check_sql(sql, dialect="duckdb", allowlist=DUCK_ALLOW, **kw)


def _expect(v: Verdict, kind: str, tables: tuple[str, ...] | None = None) -> None:
    assert v.kind == kind, v.reason
    assert v.allowed == (not kind.startswith("refused:")), v
    assert bool(v.reason) != v.allowed
    if tables is not None:
        assert v.tables == tables


# --- same verdict in both dialects (no allowlist) ----------------------------------------------
BOTH = [
    ("SELECT 1", "select"),
    ("SELECT a, COUNT(*) AS n FROM t GROUP BY a ORDER BY n DESC LIMIT 10", "select"),
    ("WITH x AS (SELECT 1 AS a) SELECT a FROM x", "select"),
    ("SELECT 1 UNION ALL SELECT 2", "select"),
    ("(SELECT 1)", "select"),
    ("SELECT * FROM t WHERE a IN (SELECT b FROM u)", "select"),
    ("SELECT 1;", "select"),
    ("SELECT 1; -- trailing comment", "select"),
    ("SELECT 1 /* ; DROP TABLE t */", "select"),
    ("", "refused:empty"),
    ("  \n\t", "refused:empty"),
    ("-- only a comment", "refused:empty"),
    ("SELECT 1; SELECT 2", "refused:multi"),
    ("SELECT * FROM t; -- looks like a comment\nDROP TABLE t", "refused:multi"),
    ("SELECT 1; /* hidden */ DELETE FROM t", "refused:multi"),
    ("SELECT FROM WHERE (", "refused:parse"),
    ("INSERT INTO t VALUES (1)", "refused:dml"),
    ("UPDATE t SET a = 1 WHERE TRUE", "refused:dml"),
    ("DELETE FROM t WHERE TRUE", "refused:dml"),
    ("MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", "refused:dml"),
    ("TRUNCATE TABLE t", "refused:dml"),
    ("SELECT 1 AS a INTO new_table", "refused:dml"),
    ("CREATE TABLE x AS SELECT 1 AS a", "refused:ddl"),
    ("CREATE VIEW v AS SELECT 1 AS a", "refused:ddl"),
    ("DROP TABLE t", "refused:ddl"),
    ("ALTER TABLE t RENAME TO u", "refused:ddl"),
    ("CALL p()", "refused:call"),
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("sql", "kind"), BOTH)
def test_both_dialects(dialect: str, sql: str, kind: str) -> None:
    _expect(check_sql(sql, dialect=dialect), kind)


# --- BigQuery warehouse: allowlist proj.ds.* + proj.sales.orders, defaults proj / ds ----------
BIGQUERY = [
    ("SELECT * FROM `proj.ds.tbl`", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM `proj`.`ds`.`tbl`", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM `proj.ds`.tbl", "select", ("proj.ds.tbl",)),
    # dataset and table names are case-sensitive in BigQuery, project ids lower case
    ("SELECT * FROM PROJ.ds.Tbl", "select", ("proj.ds.Tbl",)),
    ("SELECT * FROM proj.DS.Tbl", "refused:table", None),
    ("SELECT * FROM proj.ds.information_schema.Tables", "select", ("proj.ds.information_schema.tables",)),
    ("SELECT * FROM proj.DS.INFORMATION_SCHEMA.TABLES", "refused:table", None),
    ("SELECT * FROM proj.ds.Events_*", "select", ("proj.ds.Events_*",)),
    ("SELECT * FROM tbl", "select", ("proj.ds.tbl",)),
    (
        "SELECT * FROM sales.orders o JOIN ds.tbl t ON o.id = t.id",
        "select",
        ("proj.ds.tbl", "proj.sales.orders"),
    ),
    ("SELECT * FROM tbl a JOIN `proj.ds.tbl` b USING (id)", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM sales.customers", "refused:table", None),
    ("SELECT * FROM `other-proj.ds.tbl`", "refused:table", None),
    ("SELECT * FROM tbl WHERE id IN (SELECT id FROM proj.secret.t)", "refused:table", None),
    ("SELECT * FROM `proj.ds.events_*` WHERE _TABLE_SUFFIX > '2024'", "select", ("proj.ds.events_*",)),
    ("SELECT * FROM ds.events_2024*", "select", ("proj.ds.events_2024*",)),
    ("SELECT * FROM `proj.sales.orders_*`", "refused:table", None),
    ("SELECT * FROM `proj.ds.ev*nts`", "refused:table", None),
    ("SELECT * FROM proj.ds.INFORMATION_SCHEMA.TABLES", "select", ("proj.ds.information_schema.tables",)),
    ("SELECT * FROM `proj.ds.INFORMATION_SCHEMA.COLUMNS`", "select", ("proj.ds.information_schema.columns",)),
    ("SELECT * FROM ds.INFORMATION_SCHEMA.COLUMNS", "select", ("proj.ds.information_schema.columns",)),
    ("SELECT * FROM INFORMATION_SCHEMA.TABLES", "select", ("proj.ds.information_schema.tables",)),
    ("SELECT * FROM proj.sales.INFORMATION_SCHEMA.TABLES", "refused:table", None),
    ("SELECT * FROM other.secret.INFORMATION_SCHEMA.COLUMNS", "refused:table", None),
    ("SELECT * FROM `region-us`.INFORMATION_SCHEMA.JOBS", "refused:table", None),
    ("SELECT * FROM `region-us.INFORMATION_SCHEMA.JOBS_BY_PROJECT`", "refused:table", None),
    ("SELECT * FROM `proj`.INFORMATION_SCHEMA.SCHEMATA", "refused:table", None),
    ("SELECT * FROM proj.INFORMATION_SCHEMA.TABLES", "refused:table", None),
    ("SELECT * FROM proj.ds.INFORMATION_SCHEMA.JOBS", "refused:table", None),
    ("SELECT * FROM ds.tbl, UNNEST(arr) AS x", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM ds.tbl AS t, t.arr", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM ds.tbl FOR SYSTEM_TIME AS OF TIMESTAMP '2024-01-01'", "select", ("proj.ds.tbl",)),
    ("SELECT * FROM UNNEST(GENERATE_ARRAY(1, 3)) AS n", "select", ()),
    ("SELECT 'a\\'; DROP TABLE t; --'", "select", ()),
    ("SELECT 1 # ; DROP TABLE t", "select", ()),
    ('SELECT """a\'; DROP TABLE t; --"""', "select", ()),
    ("DECLARE x INT64 DEFAULT 0", "refused:script", None),
    ("SET x = 1", "refused:script", None),
    ("DECLARE x INT64; SET x = 1", "refused:multi", None),
    ("BEGIN SELECT 1; END", "refused:multi", None),
    ("IF TRUE THEN SELECT 1", "refused:script", None),
    ("IF TRUE THEN SELECT 1; END IF", "refused:multi", None),
    ("LOOP SELECT 1; END LOOP", "refused:multi", None),
    ("WHILE TRUE DO SELECT 1", "refused:script", None),
    ("EXECUTE IMMEDIATE 'DROP TABLE ds.tbl'", "refused:script", None),
    ("EXPORT DATA OPTIONS(uri='gs://b/x-*.csv', format='CSV') AS SELECT * FROM ds.tbl", "refused:io", None),
    ("LOAD DATA INTO ds.t FROM FILES(format='CSV', uris=['gs://b/x.csv'])", "refused:io", None),
    ("CREATE TEMP FUNCTION f(x INT64) AS (x + 1)", "refused:ddl", None),
    ("CREATE TEMP FUNCTION f(x INT64) AS (x + 1); SELECT f(1)", "refused:multi", None),
    ("CALL proj.ds.my_proc()", "refused:call", None),
    ("SELECT * FROM EXTERNAL_QUERY('conn', 'SELECT 1')", "refused:function", None),
    ("SELECT * FROM ML.PREDICT(MODEL `proj.ds.m`, TABLE `proj.ds.tbl`)", "refused:function", None),
    # Vertex AI per row (billed apart from bytes, past every cap), user and remote functions: refused
    (
        "SELECT AI.GENERATE(('sum up', x), connection_id=>'us.c', endpoint=>'gemini') FROM ds.tbl",
        "refused:function",
        None,
    ),
    ("SELECT AI.SCORE(x) FROM ds.tbl", "refused:function", None),
    ("SELECT AI.EMBED(x) FROM ds.tbl", "refused:function", None),
    ("SELECT `otherproj.ds.fn`(x) FROM ds.tbl", "refused:function", None),
    ("SELECT otherproj.ds.fn(x) FROM ds.tbl", "refused:function", None),
    ("SELECT ds.fn(x) FROM ds.tbl", "refused:function", None),
    # BigQuery's own dotted functions still work
    ("SELECT HLL_COUNT.MERGE(x) FROM ds.tbl", "select", ("proj.ds.tbl",)),
    ("SELECT SAFE.DIVIDE(1, 0), NET.HOST('https://a.b/c')", "select", ()),
    ("SELECT * FROM proj.ds.my_tvf(1)", "refused:function", None),
    ("EXPLAIN SELECT 1", "refused:statement", None),
    ("ASSERT (SELECT COUNT(*) FROM ds.tbl) > 0", "refused:statement", None),
]


@pytest.mark.parametrize(("sql", "kind", "tables"), BIGQUERY)
def test_bigquery(sql: str, kind: str, tables: tuple[str, ...] | None) -> None:
    _expect(_bq(sql), kind, tables)


# --- CTEs: shadowing and scope; allowlist admits exactly one table per dialect ----------------
CTE = [
    # A CTE named like a real table is not a table reference...
    ("WITH orders AS (SELECT 1 AS a) SELECT * FROM orders", "select", ()),
    # ...but the real table read inside a CTE body is.
    ("WITH orders AS (SELECT * FROM secret) SELECT * FROM orders", "refused:table", None),
    ("WITH orders AS (SELECT * FROM ok) SELECT * FROM orders", "select", ("{ok}",)),
    # A later CTE is not visible inside an earlier one: `secret` there is the real table.
    ("WITH a AS (SELECT * FROM secret), secret AS (SELECT 1 AS x) SELECT * FROM a", "refused:table", None),
    ("WITH secret AS (SELECT 1 AS x), a AS (SELECT * FROM secret) SELECT * FROM a", "select", ()),
    ("WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r", "select", ()),
    # A CTE defined inside a subquery does not hide a same-named table outside it.
    ("SELECT * FROM (WITH secret AS (SELECT 1 AS a) SELECT * FROM secret) s JOIN secret USING (a)", "refused:table", None),
    ("WITH x AS (SELECT 1 AS a) SELECT * FROM x UNION ALL SELECT * FROM x", "select", ()),
]  # fmt: skip


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("sql", "kind", "tables"), CTE)
def test_cte_shadowing(dialect: str, sql: str, kind: str, tables: tuple[str, ...] | None) -> None:
    ok = "proj.ds.ok" if dialect == "bigquery" else "main.ok"
    defaults = BQ_DEFAULTS if dialect == "bigquery" else {}
    v = check_sql(sql, dialect=dialect, allowlist=TableAllowlist((ok,)), **defaults)
    _expect(v, kind, tuple(t.format(ok=ok) for t in tables) if tables is not None else None)


# --- DuckDB demo warehouse: allowlist main.*, no file access -----------------------------------
DUCKDB = [
    ("SELECT * FROM flights", "select", ("main.flights",)),
    (
        "SELECT * FROM main.flights f JOIN airlines a USING (carrier)",
        "select",
        ("main.airlines", "main.flights"),
    ),
    ("FROM flights LIMIT 5", "select", ("main.flights",)),
    ("VALUES (1), (2)", "select", ()),
    ("SELECT * FROM range(10)", "select", ()),
    ("SELECT * FROM generate_series(1, 3) AS g(x)", "select", ()),
    ("SELECT * FROM other.secret", "refused:table", None),
    ("SELECT * FROM information_schema.tables", "refused:table", None),
    ("DESCRIBE flights", "describe", ("main.flights",)),
    ("DESCRIBE SELECT * FROM flights", "describe", ("main.flights",)),
    ("SHOW TABLES", "show", ()),
    ("SHOW ALL TABLES", "refused:table", None),  # every schema of every database, beyond main.*
    ("SUMMARIZE flights", "summarize", ("main.flights",)),
    ("SUMMARIZE SELECT * FROM other.secret", "refused:table", None),
    ("EXPLAIN SELECT * FROM flights", "explain", ("main.flights",)),
    ("EXPLAIN ANALYZE SELECT count(*) FROM flights", "explain", ("main.flights",)),
    ("EXPLAIN /* why */ ANALYZE (FORMAT json) SELECT * FROM flights", "explain", ("main.flights",)),
    ("EXPLAIN DELETE FROM flights", "refused:dml", None),
    ("EXPLAIN /* c */ ANALYZE DELETE FROM flights", "refused:dml", None),
    ("EXPLAIN EXPLAIN SELECT 1", "refused:statement", None),
    ("EXPLAIN ANALYZE INSERT INTO flights VALUES (1)", "refused:dml", None),
    ("PRAGMA table_info('flights')", "pragma", ("main.flights",)),
    ("PRAGMA show_tables", "pragma", ()),
    ("PRAGMA table_info('other.secret')", "refused:table", None),
    ("PRAGMA enable_profiling", "refused:setting", None),
    ("PRAGMA memory_limit='1GB'", "refused:setting", None),
    ("COPY flights TO 'out.csv'", "refused:io", None),
    ("COPY (SELECT 1) TO '/tmp/x.csv'", "refused:io", None),
    ("ATTACH 'other.db' AS o", "refused:io", None),
    ("DETACH o", "refused:io", None),
    ("INSTALL httpfs", "refused:io", None),
    ("LOAD httpfs", "refused:io", None),
    ("EXPORT DATABASE 'dump'", "refused:io", None),
    ("IMPORT DATABASE 'dump'", "refused:io", None),
    ("SET memory_limit = '1GB'", "refused:setting", None),
    ("RESET memory_limit", "refused:setting", None),
    ("SET VARIABLE x = 1", "refused:setting", None),
    ("USE other", "refused:setting", None),
    ("BEGIN TRANSACTION", "refused:transaction", None),
    ("COMMIT", "refused:transaction", None),
    ("VACUUM", "refused:statement", None),
    ("CHECKPOINT", "refused:statement", None),
    ("CREATE MACRO m(x) AS x + 1", "refused:ddl", None),
    ("PIVOT flights ON carrier USING count(*)", "refused:statement", None),
    ("SHOW flights", "refused:statement", None),
    ("DESCRIBE read_csv('/etc/passwd')", "refused:statement", None),
    ("SELECT * FROM read_csv('/etc/passwd')", "refused:function", None),
    ("SELECT * FROM read_parquet('x.parquet')", "refused:function", None),
    ("SELECT * FROM 'flights.parquet'", "refused:path", None),
    ("SELECT * FROM flights.csv", "refused:path", None),
    ('SELECT * FROM x."csv"', "refused:path", None),
    ("SELECT * FROM flights f POSITIONAL JOIN 'x.csv'", "refused:path", None),
    ("SELECT * FROM memory.main.flights", "refused:table", None),  # catalog-qualified: list it explicitly
    ("SELECT * FROM 's3://bucket/x.parquet'", "refused:path", None),
    ("SELECT getenv('HOME')", "refused:function", None),
    ("SELECT current_setting('memory_limit')", "refused:function", None),
    ("SELECT * FROM duckdb_settings()", "refused:function", None),
    ("SELECT * FROM duckdb_secrets()", "refused:function", None),
    ("SELECT * FROM duckdb_extensions()", "refused:function", None),
    ("SELECT * FROM pragma_table_info('flights')", "refused:function", None),
    ("SELECT * FROM glob('*')", "refused:function", None),
    ("SELECT * FROM sqlite_scan('x.db', 't')", "refused:function", None),
    ("SELECT * FROM postgres_scan('host=x', 'public', 't')", "refused:function", None),
    ("SELECT * FROM iceberg_scan('s3://b/t')", "refused:function", None),
    ("SELECT * FROM query('SELECT 1')", "refused:function", None),
    ("SELECT * FROM flights, LATERAL read_csv(flights.path)", "refused:function", None),
    # Tokenizer corner cases, cross-checked against DuckDB's own parser.
    ("SELECT 'a\\'; DROP TABLE flights; --'", "refused:multi", None),
    ("SELECT $$ ; DROP TABLE flights; $$", "select", ()),
    ("SELECT 1 /* /* nested */ ; DROP TABLE flights; -- */", "select", ()),
]


@pytest.mark.parametrize(("sql", "kind", "tables"), DUCKDB)
def test_duckdb_warehouse(sql: str, kind: str, tables: tuple[str, ...] | None) -> None:
    _expect(_duck(sql), kind, tables)


# --- DuckDB over a session workspace: relative files allowed, identifiers not allowlisted -------
WORKSPACE = [
    ("SELECT * FROM 'delays.parquet'", "select", ("delays.parquet",)),
    ("FROM 'data/Delays.csv' LIMIT 3", "select", ("data/Delays.csv",)),
    ("SELECT * FROM delays.csv", "select", ("delays.csv",)),
    ("SELECT * FROM read_parquet('x.parquet')", "select", ("x.parquet",)),
    ("SELECT * FROM read_parquet(['a.parquet', 'b/c.parquet'])", "select", ("a.parquet", "b/c.parquet")),
    ("SELECT * FROM read_csv('x.csv', header = true)", "select", ("x.csv",)),
    ("SELECT * FROM read_csv_auto('exports/*.csv')", "select", ("exports/*.csv",)),
    ("SELECT * FROM read_json_auto('./x.json')", "select", ("./x.json",)),
    ("SELECT * FROM read_parquet($$x.parquet$$, filename = true)", "select", ("x.parquet",)),
    ("SELECT * FROM read_parquet('x/**/*.parquet', hive_partitioning = true)", "select", ("x/**/*.parquet",)),
    ("SELECT * FROM session_table s JOIN other.anything a USING (id)", "select", ("main.session_table", "other.anything")),
    ("DESCRIBE 'delays.parquet'", "describe", ("delays.parquet",)),
    ("SELECT * FROM read_csv('/etc/passwd')", "refused:path", None),
    ("SELECT * FROM '../other/x.parquet'", "refused:path", None),
    ("SELECT * FROM read_parquet('data/../../x.parquet')", "refused:path", None),
    ("SELECT * FROM 's3://bucket/x.parquet'", "refused:path", None),
    ("SELECT * FROM read_csv('https://example.com/x.csv')", "refused:path", None),
    ("SELECT * FROM read_csv('file:///etc/passwd')", "refused:path", None),
    ("SELECT * FROM read_csv('~/x.csv')", "refused:path", None),
    ('SELECT * FROM "C:/x.csv"', "refused:path", None),
    ("SELECT * FROM read_parquet(['ok.parquet', '/abs.parquet'])", "refused:path", None),
    ("SELECT * FROM read_csv(getenv('HOME') || '/x.csv')", "refused:path", None),
    ("SELECT * FROM read_csv(path := 'x.csv')", "refused:path", None),
    ("SELECT * FROM '.*/x.csv'", "refused:path", None),
    ("SELECT * FROM '[.][.]/x.csv'", "refused:path", None),
    ("SELECT * FROM read_text('notes.txt')", "refused:function", None),
    ("SELECT * FROM glob('*.csv')", "refused:function", None),
    ("SELECT getenv('HOME')", "refused:function", None),
    ("COPY (SELECT 1) TO 'out.csv'", "refused:io", None),
    ("CREATE TABLE t AS SELECT * FROM 'x.csv'", "refused:ddl", None),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "kind", "tables"), WORKSPACE)
def test_duckdb_workspace(sql: str, kind: str, tables: tuple[str, ...] | None) -> None:
    _expect(_duck(sql, workspace_files=True), kind, tables)


# --- TableAllowlist ------------------------------------------------------------------------------
ALLOWS = [
    ((), "any.thing.at_all", True),
    (("proj.ds.*",), "proj.ds.orders", True),
    (("proj.ds.*",), "PROJ.DS.Orders", True),
    (("proj.ds.*",), "proj.other.orders", False),
    (("Proj.*",), "proj.any.table", True),
    (("proj.ds.orders",), "proj.ds.orders_2024", False),
    (("main.*", "*.public.*"), "db.public.t", True),
]
ALLOWS_PREFIX = [
    ((), "region-us.", True),
    (("proj.ds.*",), "proj.ds.events_", True),
    (("proj.ds.*",), "proj.ds.", True),
    (("proj.*",), "proj.ds.events_", True),
    (("proj.ds.events_*",), "proj.ds.events_", True),
    (("proj.ds.events_?",), "proj.ds.events_", False),
    (("proj.ds.orders",), "proj.ds.", False),
    (("proj.ds.o*",), "proj.ds.", False),
]


@pytest.mark.parametrize(("patterns", "ref", "expected"), ALLOWS)
def test_allowlist_allows(patterns: tuple[str, ...], ref: str, expected: bool) -> None:
    assert TableAllowlist(patterns).allows(ref) is expected


@pytest.mark.parametrize(("patterns", "prefix", "expected"), ALLOWS_PREFIX)
def test_allowlist_allows_prefix(patterns: tuple[str, ...], prefix: str, expected: bool) -> None:
    assert TableAllowlist(patterns).allows_prefix(prefix) is expected


def test_allowlist_accepts_a_bare_string_and_keeps_it_as_written() -> None:
    allow = TableAllowlist("Proj.DS.*  ")  # type: ignore[arg-type]
    assert allow.patterns == ("Proj.DS.*",)  # shown as written in refusals and to doctor
    assert allow.allows("proj.ds.t") and not allow.for_dialect("bigquery").allows("proj.ds.t")


# BigQuery's names: datasets and tables case-sensitive, project ids lower case. Folded whole, an entry
# `bill.reporting` admitted a distinct dataset `bill.REPORTING`, and `bill.Analytics` was looked up
# (and listed, described) as `bill.analytics`, which BigQuery does not have.
BIGQUERY_ALLOWS = [
    (("bill.reporting.*",), "bill.reporting.t", True),
    (("bill.reporting.*",), "bill.REPORTING.t", False),
    (("bill.reporting.*",), "bill.Reporting.t", False),
    (("bill.Analytics.*",), "bill.Analytics.Events", True),
    (("bill.Analytics.*",), "bill.analytics.Events", False),
    (("Bill.Analytics.*",), "BILL.Analytics.Events", True),  # the project id folded on both sides
    (("bill.Analytics.Events",), "bill.Analytics.events", False),
    (("bill.Sales_*",), "bill.Sales_EU.t", True),
    (("bill.Sales_*",), "bill.sales_eu.t", False),
    (("*.Analytics.*",), "bill.Analytics.t", True),
    (("*.Analytics.*",), "bill.analytics.t", False),
    (("bill.*",), "bill.ANY.Thing", True),
]
BIGQUERY_ALLOWS_PREFIX = [
    (("bill.Analytics.*",), "bill.Analytics.", True),
    (("bill.Analytics.*",), "bill.analytics.", False),
    (("bill.ds.Events_*",), "bill.ds.Events_", True),
    (("bill.ds.Events_*",), "bill.ds.events_", False),
    (("bill.reporting.*",), "bill.REPORTING.events_", False),
]


@pytest.mark.parametrize(("patterns", "ref", "expected"), BIGQUERY_ALLOWS)
def test_bigquery_allowlist_admits_exactly_what_it_names(
    patterns: tuple[str, ...], ref: str, expected: bool
) -> None:
    allow = TableAllowlist(patterns).for_dialect("bigquery")
    assert allow.allows(ref) is expected
    # DuckDB's identifiers are case-insensitive: there the same entry admits every spelling
    assert TableAllowlist(patterns).for_dialect("duckdb").allows(ref) is True


@pytest.mark.parametrize(("patterns", "prefix", "expected"), BIGQUERY_ALLOWS_PREFIX)
def test_bigquery_allowlist_prefix_is_case_sensitive(
    patterns: tuple[str, ...], prefix: str, expected: bool
) -> None:
    assert TableAllowlist(patterns).for_dialect("bigquery").allows_prefix(prefix) is expected


def test_bigquery_sql_keeps_its_names_and_the_allowlist_admits_only_its_own_spelling() -> None:
    """`bill.reporting` must not admit `bill.REPORTING`, whichever way the allowlist was built; the
    tables a query reads are reported as BigQuery has them, the project id lower case."""
    allow = TableAllowlist(("bill.reporting.*", "bill.Analytics.*"))
    defaults = {"default_project": "bill", "default_dataset": "Analytics"}
    for sql, tables in (
        ("SELECT * FROM `bill.Analytics.Events`", ("bill.Analytics.Events",)),
        ("SELECT * FROM Analytics.Events", ("bill.Analytics.Events",)),
        ("SELECT * FROM Events", ("bill.Analytics.Events",)),
        ("SELECT * FROM `BILL`.reporting.Orders", ("bill.reporting.Orders",)),
    ):
        v = check_sql(sql, dialect="bigquery", allowlist=allow, **defaults)
        assert v.allowed and v.tables == tables, (sql, v)
    for sql in ("SELECT * FROM bill.REPORTING.orders", "SELECT * FROM analytics.Events"):
        v = check_sql(sql, dialect="bigquery", allowlist=allow, **defaults)
        assert not v.allowed and v.kind == "refused:table", (sql, v)
    # DuckDB's names are as case-insensitive as before
    v = check_sql("SELECT * FROM Main.Flights", dialect="duckdb", allowlist=TableAllowlist(("MAIN.flights",)))
    assert v.allowed and v.tables == ("main.flights",), v


def test_region_information_schema_refused_even_when_allow_all() -> None:
    """JOBS* hold the SQL of every question the bot ever ran, across channels: never readable."""
    v = check_sql("SELECT * FROM `region-us`.INFORMATION_SCHEMA.JOBS", dialect="bigquery")
    _expect(v, "refused:table")


def test_reasons_are_actionable() -> None:
    assert _bq("SELECT 1; SELECT 2").reason.startswith("Only one read-only SELECT query is allowed")
    assert "Only one read-only query is allowed" in _duck("DELETE FROM flights").reason
    assert "proj.ds.*" in _bq("SELECT * FROM proj.secret.t").reason
    assert "relative path" in _duck("SELECT * FROM '/etc/x.csv'", workspace_files=True).reason
    parse = check_sql("SELECT FROM WHERE (", dialect="duckdb").reason
    assert "\x1b" not in parse and len(parse) < 300


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        check_sql("SELECT 1", dialect="postgres")
    with pytest.raises(ValueError):
        check_sql("SELECT 1", dialect="bigquery", workspace_files=True)


def test_verdict_is_frozen() -> None:
    v = check_sql("SELECT 1", dialect="duckdb")
    assert v == Verdict(True, "", (), "select")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.allowed = False  # type: ignore[misc]


# --- Python ------------------------------------------------------------------------------------
PYTHON = [
    ("import pandas as pd\ndf = pd.read_csv('delays.csv')\nprint(df.eval('a + b').sum())", "python"),
    ("import numpy as np, math, statistics, json, csv, re, datetime\nprint(np.mean([1, 2]))", "python"),
    (
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.savefig('c.png')",
        "python",
    ),
    ("import duckdb\nduckdb.sql(\"SELECT * FROM 'x.parquet'\").df()", "python"),
    ("from collections import Counter\nfrom itertools import chain\nCounter(chain([1], [2]))", "python"),
    ("import re\npattern = re.compile(r'\\d+')", "python"),
    ("from re import compile\ncompile('a')", "python"),
    ("import os\nos.listdir('.')\nos.path.join('a', 'b')\nos.makedirs('out', exist_ok=True)", "python"),
    ("from pathlib import Path\n(Path('data') / 'x.csv').read_text()", "python"),
    ("with open('x.csv', 'w') as f:\n    f.write('a,b\\n')", "python"),
    ("import sys\nprint(sys.version)", "python"),
    ("type(3).__name__", "python"),
    ("", "python"),
    ("def f(:\n    pass", "refused:syntax"),
    ("x = (1,\n", "refused:syntax"),
    ("import subprocess\nsubprocess.run(['ls'])", "refused:process"),
    ("from subprocess import check_output", "refused:process"),
    ("import os\nos.system('ls')", "refused:process"),
    ("import os as o\no.popen('ls')", "refused:process"),
    ("import os\nos.execv('/bin/sh', ['sh'])", "refused:process"),
    ("import os\nos.spawnl(0, '/bin/sh')", "refused:process"),
    ("import os\nos.fork()", "refused:process"),
    ("import os\nos.kill(1, 9)", "refused:process"),
    ("from os import system\nsystem('ls')", "refused:process"),
    ("import multiprocessing", "refused:process"),
    ("import pty", "refused:process"),
    ("import signal", "refused:process"),
    ("import os\ngetattr(os, 'system')('ls')", "refused:process"),
    ("import os\nprint(os.environ['HOME'])", "refused:env"),
    ("import os\nos.environ.get('TOKEN')", "refused:env"),
    ("import os\nos.getenv('HOME')", "refused:env"),
    ("import os\nos.putenv('A', 'b')", "refused:env"),
    ("from os import environ", "refused:env"),
    ("import socket", "refused:network"),
    ("import requests\nrequests.get('https://example.com')", "refused:network"),
    ("from urllib.request import urlopen", "refused:network"),
    ("import urllib.request", "refused:network"),
    ("from urllib.parse import quote\nquote('a b')", "python"),
    ("import http.client", "refused:network"),
    ("from http import client", "refused:network"),
    ("import httpx", "refused:network"),
    ("import aiohttp", "refused:network"),
    ("import pandas as pd\npd.read_csv('https://example.com/x.csv')", "refused:network"),
    ("import importlib\nimportlib.import_module('os')", "refused:dynamic"),
    ("__import__('os')", "refused:dynamic"),
    ("eval('1 + 1')", "refused:dynamic"),
    ("exec('x = 1')", "refused:dynamic"),
    ("code = compile('1', 'f', 'eval')", "refused:dynamic"),
    ("import builtins", "refused:dynamic"),
    ("import ctypes", "refused:native"),
    ("import sys\nsys.modules['os']", "refused:introspection"),
    ("import gc\ngc.get_objects()", "refused:introspection"),
    ("import inspect", "refused:introspection"),
    ("().__class__.__bases__[0].__subclasses__()", "refused:introspection"),
    ("f = lambda: 0\nf.__globals__['x']", "refused:introspection"),
    ("f = lambda: 0\nf.__code__", "refused:introspection"),
    ("print(__builtins__)", "refused:introspection"),
    ("getattr(object, '__subclasses__')()", "refused:introspection"),
    ("import shutil\nshutil.rmtree('out')", "refused:fs"),
    ("open('/etc/passwd').read()", "refused:path"),
    ("open('../secrets.txt')", "refused:path"),
    ("open(file='~/x.csv')", "refused:path"),
    ("from pathlib import Path\nPath('/etc/passwd').read_text()", "refused:path"),
    ("import pandas as pd\npd.read_parquet('/data/x.parquet')", "refused:path"),
]


@pytest.mark.parametrize(("code", "kind"), PYTHON)
def test_python(code: str, kind: str) -> None:
    _expect(check_python(code), kind, ())


def test_python_reason_names_construct_and_line() -> None:
    v = check_python("x = 1\nimport requests\n")
    assert v.reason.startswith("Line 2: `import requests`")
    assert "query_warehouse" in v.reason
    assert "line 1" in check_python("def f(:\n pass").reason
