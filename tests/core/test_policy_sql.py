"""Red team for the SQL allowlist: every way DuckDB resolves a name to a table it may not read.

Each hostile query is checked twice: the policy must refuse it, and the same query run straight into a
real DuckDB (the policy bypassed) must reach the forbidden table — so every case is a real bypass, not a
guess about DuckDB's name resolution. Allowed look-alikes (CTEs that do shadow a table) run for real too
and must not reach it. Last, the reported probes go through the real tool path of a turn with a
per-channel allowlist, and nothing of the forbidden table comes back.
"""

from __future__ import annotations

import duckdb
import pytest

from core.events import IncomingMessage
from core.policy import TableAllowlist, check_sql
from core.policy_sql_scope import DUCKDB_MAIN_VIEWS
from tests.fakes.anthropic_api import text, tool

ALLOW = TableAllowlist(("main.ok_t",))
SECRET_MARKS = ("secret_t7", "canary_c7", "CANARY-v7", "hidden_s7")  # a name, a column, a value, a schema

BYPASSES = [
    # recursive CTEs: the CTE's own name inside a body that does not recurse is the base table
    "WITH RECURSIVE secret_t7 AS (SELECT * FROM secret_t7) SELECT count(*), min(canary_c7) FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (FROM secret_t7) FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (SELECT canary_c7 FROM secret_t7 UNION ALL SELECT 'x' WHERE false) SELECT * FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (SELECT * FROM (SELECT canary_c7 FROM secret_t7 UNION ALL SELECT 'x')) SELECT * FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (SELECT canary_c7 FROM secret_t7 INTERSECT SELECT canary_c7 FROM secret_t7) SELECT * FROM secret_t7",
    "WITH RECURSIVE s AS (SELECT 1 AS n UNION ALL SELECT 1 FROM secret_t7 WHERE false) SELECT (SELECT canary_c7 FROM secret_t7)",
    'WITH RECURSIVE "SECRET_T7" AS (SELECT * FROM secret_t7) SELECT * FROM "SECRET_T7"',
    # non-recursive scoping: no self reference, no forward reference, no leaking out of a subquery
    "WITH secret_t7 AS (SELECT * FROM secret_t7) SELECT * FROM secret_t7",
    "WITH a AS (SELECT * FROM secret_t7), secret_t7 AS (SELECT 1 AS x) SELECT * FROM a",
    "SELECT * FROM (WITH secret_t7 AS (SELECT 1 AS a) SELECT * FROM secret_t7) s, secret_t7",
    "(WITH secret_t7 AS (SELECT 'x' AS canary_c7) SELECT * FROM secret_t7) UNION ALL SELECT canary_c7 FROM secret_t7",
    "SELECT 'x' AS c UNION ALL SELECT canary_c7 FROM secret_t7",
    "SELECT canary_c7 FROM ok_t, secret_t7 UNION ALL BY NAME SELECT 'y' AS canary_c7",
    "SELECT * FROM (SELECT 1) AS secret_t7, LATERAL (SELECT canary_c7 FROM secret_t7)",
    "SELECT (SELECT canary_c7 FROM secret_t7) AS leak",
    # DuckDB shorthands and other spellings of the same table
    "FROM secret_t7",
    "FROM secret_t7 SELECT canary_c7",
    "TABLE secret_t7",
    'SELECT * FROM main."SECRET_T7"',
    "SELECT * FROM canary.secret_t7",
    "SELECT * FROM canary.main.secret_t7",
    "SELECT * FROM hidden_s7.vault",
    "DESCRIBE secret_t7",
    "SUMMARIZE secret_t7",
    "PRAGMA table_info('secret_t7')",
    "SELECT * FROM ok_t POSITIONAL JOIN secret_t7",
    # table functions that read a table by name, and the catalog's own listings
    "SELECT * FROM query_table('secret_t7')",
    "SELECT * FROM query('SELECT * FROM secret_t7')",
    "SELECT * FROM pragma_table_info('secret_t7')",
    "SELECT * FROM duckdb_columns()",
    "SELECT * FROM system.main.duckdb_tables()",
    "SHOW TABLES",
    "SHOW ALL TABLES",
    "PRAGMA show_tables",
    "PRAGMA show_tables_expanded",
    "SELECT * FROM duckdb_tables",
    "SELECT * FROM main.duckdb_columns",
    "SELECT * FROM system.main.duckdb_columns",
    "SELECT * FROM sqlite_master",
    "SELECT * FROM sqlite_schema",
    "SELECT * FROM information_schema.columns",
    "SELECT * FROM system.information_schema.tables",
    "SELECT * FROM pg_class",
    "SELECT * FROM pg_catalog.pg_attribute",
    "SELECT * FROM pg_tables",
    "EXPLAIN SELECT * FROM secret_t7",
]  # fmt: skip

ALLOWED = [
    "SELECT * FROM ok_t",
    "FROM ok_t",
    "TABLE ok_t",
    "DESCRIBE ok_t",
    "PRAGMA table_info('ok_t')",
    "WITH secret_t7 AS (SELECT * FROM ok_t) SELECT * FROM secret_t7",
    'WITH "Secret_T7" AS (SELECT 1 AS x) SELECT * FROM secret_t7',
    "WITH secret_t7 AS (SELECT 1 AS x) SELECT * FROM secret_t7 UNION ALL SELECT * FROM secret_t7",
    "SELECT 1 AS x UNION ALL (WITH secret_t7 AS (SELECT 1) SELECT * FROM secret_t7)",
    "WITH RECURSIVE secret_t7 AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM secret_t7 WHERE n < 3) SELECT * FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (SELECT 1 AS n UNION SELECT n + 1 FROM secret_t7 WHERE n < 3) SELECT * FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS ((SELECT 1 AS n) UNION ALL (SELECT n + 1 FROM secret_t7 WHERE n < 3)) SELECT * FROM secret_t7",
    "WITH RECURSIVE secret_t7 AS (SELECT 1::BIGINT AS c UNION SELECT c FROM (SELECT count(*) AS c FROM secret_t7) WHERE c > 100) SELECT * FROM secret_t7",
    "WITH secret_t7 AS (SELECT 7 AS c) SELECT * FROM (WITH RECURSIVE secret_t7 AS (SELECT c FROM secret_t7) SELECT c FROM secret_t7)",
    "WITH RECURSIVE secret_t7 AS (SELECT 1::BIGINT AS c UNION (WITH secret_t7 AS (SELECT 5::BIGINT AS c) SELECT c FROM secret_t7)) SELECT * FROM secret_t7",
    "SELECT * FROM ok_t AS secret_t7",
    "SELECT n FROM range(3) AS secret_t7(n)",
]  # fmt: skip


@pytest.fixture(scope="module")
def canary_db(tmp_path_factory) -> duckdb.DuckDBPyConnection:
    """A warehouse with one allowed table, a forbidden one (and a forbidden schema) holding canaries."""
    path = tmp_path_factory.mktemp("warehouse") / "canary.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE ok_t AS SELECT 1 AS x")
        con.execute("CREATE TABLE secret_t7 AS SELECT 'CANARY-v7' AS canary_c7")
        con.execute(
            "CREATE SCHEMA hidden_s7; CREATE TABLE hidden_s7.vault AS SELECT 'CANARY-v7' AS canary_c7"
        )
    con = duckdb.connect(str(path), read_only=True)
    yield con
    con.close()


def reached(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Run the query with no policy at all: did anything of the forbidden table come back?"""
    rel = con.sql(sql)
    shown = repr(rel.columns) + repr(rel.fetchall()) if rel is not None else ""
    return any(mark.lower() in shown.lower() for mark in SECRET_MARKS)


@pytest.mark.parametrize("sql", BYPASSES)
def test_bypass_reaches_the_table_without_policy_and_is_refused_with_it(canary_db, sql):
    assert reached(canary_db, sql), "not a real bypass: DuckDB does not reach the forbidden table"
    verdict = check_sql(sql, dialect="duckdb", allowlist=ALLOW)
    assert not verdict.allowed, verdict
    assert verdict.reason and "secret" not in verdict.kind


@pytest.mark.parametrize("sql", ALLOWED)
def test_look_alikes_are_allowed_and_really_stay_inside_the_allowlist(canary_db, sql):
    verdict = check_sql(sql, dialect="duckdb", allowlist=ALLOW)
    assert verdict.allowed, verdict.reason
    assert set(verdict.tables) <= {"main.ok_t"}
    assert not reached(canary_db, sql)


def test_catalog_view_list_covers_this_duckdb():
    """Every built-in view DuckDB puts on the search path is known to the policy (a DuckDB upgrade that
    adds one fails here, not in production)."""
    con = duckdb.connect()
    internal = con.sql("SELECT schema_name, view_name FROM duckdb_views() WHERE internal").fetchall()
    on_path = {name for schema, name in internal if schema == "main"}
    assert on_path <= DUCKDB_MAIN_VIEWS
    for schema, name in internal:
        verdict = check_sql(
            f"SELECT * FROM {schema}.{name}", dialect="duckdb", allowlist=TableAllowlist(("*",))
        )
        assert not verdict.allowed, (schema, name)


def test_listings_follow_the_allowlist():
    """SHOW TABLES lists the default schema: fine when all of it is allowed; the ALL forms never are."""
    whole_schema = TableAllowlist(("main.*",))
    assert check_sql("SHOW TABLES", dialect="duckdb", allowlist=whole_schema).allowed
    assert check_sql("PRAGMA show_tables", dialect="duckdb", allowlist=whole_schema).allowed
    for sql in ("SHOW ALL TABLES", "PRAGMA show_tables_expanded", "SELECT * FROM duckdb_tables"):
        assert not check_sql(sql, dialect="duckdb", allowlist=whole_schema).allowed, sql
        assert check_sql(sql, dialect="duckdb").allowed, sql  # no allowlist: everything is allowed
    assert check_sql("SELECT * FROM 'x.parquet' JOIN duckdb_tables USING (x)", dialect="duckdb",
                     workspace_files=True).kind == "select"  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "allowed"),
    [
        # BigQuery: the same scoping rules, and CTE names compared exactly (a name in another case may be
        # a different table there), so a case mismatch is checked as a table
        ("WITH RECURSIVE secret AS (SELECT * FROM secret) SELECT * FROM secret", False),
        ("WITH RECURSIVE secret AS (SELECT * FROM secret UNION ALL SELECT 1) SELECT * FROM secret", False),
        (
            "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
            True,
        ),
        ("WITH Secret AS (SELECT 1 AS x) SELECT * FROM secret", False),
        ("WITH secret AS (SELECT 1 AS x) SELECT * FROM secret", True),
        ("(WITH secret AS (SELECT 1 AS x) SELECT * FROM secret) UNION ALL SELECT * FROM secret", False),
    ],
)
def test_bigquery_cte_scoping(sql, allowed):
    verdict = check_sql(sql, dialect="bigquery", allowlist=TableAllowlist(("proj.ds.ok",)),
                        default_project="proj", default_dataset="ds")  # fmt: skip
    assert verdict.allowed == allowed, verdict.reason


REPORTED = [  # the red team's probes, against the demo warehouse (flights is outside the channel's list)
    "WITH RECURSIVE flights AS (SELECT * FROM flights) SELECT count(*) AS n FROM flights",
    "SELECT carrier FROM airlines UNION ALL SELECT carrier FROM flights",
    "FROM flights SELECT count(*) AS n",
    "PRAGMA show_tables_expanded",
    "WITH RECURSIVE flights AS (SELECT tailnum FROM flights UNION ALL SELECT 'x' WHERE false) FROM flights",
]


async def test_reported_probes_through_a_turn_return_nothing_of_the_table(
    home, fake_model, recorder, monkeypatch
):
    """With DATATHREAD_CHANNEL_DATASETS limiting the channel to airlines, each probe is refused through the
    real tool path, no result file is written, and an allowed query in the same turn still runs."""
    from core.analyst import Analyst
    from core.config import load_settings

    settings = load_settings(
        _env_file=None, anthropic_api_key="sk-ant-test-key-000000", anthropic_base_url=fake_model.url,
        home=home, step_timeout=20, model="claude-test", channel_datasets="C0AL1=main.airlines*",
    )  # fmt: skip
    calls = [("query_warehouse", {"sql": sql, "save_as": f"probe{i}"}) for i, sql in enumerate(REPORTED)]
    calls.append(("query_warehouse", {"sql": "SELECT count(*) AS n FROM airlines", "save_as": "fine"}))
    fake_model.enqueue(tool(*calls[0], more=calls[1:]), text("done"))
    analyst = await Analyst.create(settings)
    try:
        message = IncomingMessage(text="how many flights?", surface="slack", thread_key=("T", "C0AL1", "1.0"),
                                  user_id="U1", channel_id="C0AL1")  # fmt: skip
        outcome = await analyst.handle(message, recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    results = fake_model.requests[1]["messages"][-1]["content"]
    assert len(results) == len(calls)
    for result in results[:-1]:
        assert result["is_error"] and "336776" not in result["content"] and "336,776" not in result["content"]
    assert not results[-1].get("is_error") and "fine.parquet" in results[-1]["content"]
    files = sorted(p.name for p in (settings.workspaces_dir / outcome.session_id).glob("*.parquet"))
    assert files == ["fine.parquet"]


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("SELECT carrier FROM [bill:shop.orders]", "(`bill.shop.orders` for [bill:shop.orders])"),
        ("#legacySQL\nSELECT carrier FROM orders", "drop the #legacySQL line"),
        ("  # legacySQL\nSELECT 1", "drop the #legacySQL line"),  # parses as standard SQL: a comment
    ],
)
def test_legacy_bigquery_sql_is_named_with_the_standard_name_to_write(sql, says):
    """Legacy SQL got "Could not parse the SQL (bigquery): Expected table name but got '['", and a
    `#legacySQL` first line passed as a comment: the model was left guessing. Arrays and standard names
    are untouched."""
    allow = TableAllowlist(patterns=("bill.shop.*",))
    verdict = check_sql(sql, dialect="bigquery", allowlist=allow)
    assert (
        not verdict.allowed
        and verdict.reason.startswith("Legacy SQL isn't supported")
        and says in verdict.reason
    )
    for fine in (
        "SELECT [1, 2][OFFSET(0)] AS x",
        "SELECT carrier FROM `bill.shop.orders`",
        "#standardSQL\nSELECT 1",
    ):
        assert check_sql(fine, dialect="bigquery", allowlist=allow).allowed, fine
