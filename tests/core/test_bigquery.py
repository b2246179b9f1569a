"""BigQuery warehouse: the real google-cloud-bigquery client against a scripted REST API (`responses`),
a real workspace on disk, a real SQLite store for budgets, and the real tool path for policy."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.bigquery_cost import user_hash
from core.events import ConfirmRequest
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.tools import call_tool
from core.warehouse_bigquery import BigQueryWarehouse
from tests.core import bigquery_parts
from tests.core.bigquery_parts import ORDERS, ORDERS_SCHEMA, bq_settings, read_parquet, tool_ctx
from tests.fakes.bigquery_api import Answer, FakeTable, qctx

fake_bq, parts = bigquery_parts.fake_bq, bigquery_parts.parts  # the shared fixtures


async def test_dry_run_then_run_to_parquet_with_cap_labels_and_pages(parts, fake_bq):
    warehouse, _, store, settings = parts
    rows = [[i, i * 1.5, "paid" if i % 2 else "refunded"] for i in range(2500)]
    fake_bq.on_query(
        ORDERS, Answer(ORDERS_SCHEMA, rows, 2_500_000_000, page_size=1000, referenced=["bill.shop.orders"])
    )
    result = await warehouse.query(ORDERS, "orders", qctx(store))
    assert result.ok, result.error
    assert result.saved_as == "orders.parquet" and result.rows == 2500
    table = read_parquet(settings, "orders.parquet")
    assert table["id"][:3] == [0, 1, 2] and table["amount"][2499] == 2499 * 1.5
    assert table["status"][1] == "paid" and len(table["id"]) == 2500
    assert [c["name"] for c in result.columns] == ["id", "amount", "status"]
    assert result.bytes_scanned == 2_500_000_000
    assert (
        "processed 2.5 GB" in result.output and "cache hit: no" in result.output and "$0.01" in result.output
    )
    dry, run = fake_bq.inserts
    assert dry["configuration"]["dryRun"] is True and dry["configuration"]["query"]["useQueryCache"] is False
    job = run["configuration"]
    assert job["query"]["maximumBytesBilled"] == str(10 * 10**9)  # the soft cap: it was not asked
    assert job["query"]["defaultDataset"] == {"projectId": "bill", "datasetId": "shop"}
    assert job["labels"] == {
        "app": "datathread",
        "surface": "slack",
        "channel": "c1",
        "user": user_hash("U123"),
        "session": "s1",
    }
    assert "u123" not in str(job["labels"]).lower()
    assert 9_000 < int(job["jobTimeoutMs"]) <= 10_000  # the step's limit, less the dry run's time
    pages = [q for m, p, q in fake_bq.calls if "/queries/" in p and q.get("pageToken")]
    assert len(pages) == 2  # 2,500 rows in pages of 1,000: first page + 2 pageToken calls
    # budgets counted the billed bytes
    assert await store.add_usage("bq:turn:turn1", 0, ttl_s=60) == 2_500_000_000


async def test_over_hard_cap_is_refused_with_the_estimate_in_words(parts, fake_bq):
    warehouse, _, store, _ = parts
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [], 300 * 10**9))
    result = await warehouse.query(ORDERS, None, qctx(store))
    assert not result.ok
    assert "300 GB" in result.error and "$1.71" in result.error and "100 GB limit" in result.error
    assert "partition" in result.error
    assert fake_bq.runs() == [] and len(fake_bq.inserts) == 1


async def test_confirmation_band_asks_and_only_yes_runs(parts, fake_bq):
    warehouse, _, store, _ = parts
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [[1, 2.0, "paid"]], 20 * 10**9))
    asked: list[ConfirmRequest] = []

    def confirmer(answer):
        async def confirm(request: ConfirmRequest) -> bool:
            asked.append(request)
            if isinstance(answer, Exception):
                raise answer
            return answer

        return confirm

    for answer in (False, RuntimeError("button expired")):
        result = await warehouse.query(ORDERS, None, qctx(store, confirm=confirmer(answer)))
        assert not result.ok and "did not confirm" in result.error and "20.0 GB" in result.error
    no_one_to_ask = await warehouse.query(ORDERS, None, qctx(store, confirm=None))
    assert not no_one_to_ask.ok and "did not confirm" in no_one_to_ask.error
    assert fake_bq.runs() == []
    yes = await warehouse.query(ORDERS, "ok", qctx(store, confirm=confirmer(True)))
    assert yes.ok and yes.rows == 1 and len(fake_bq.runs()) == 1
    assert len(asked) == 3 and asked[0].turn_id == "turn1"
    assert "20.0 GB" in asked[0].prompt and "$0.11" in asked[0].prompt


async def test_daily_budget_refuses_and_says_when_it_resets(parts, fake_bq):
    warehouse, _, store, _ = parts
    warehouse.limits = dataclasses.replace(warehouse.limits, per_user_day=5 * 10**9)
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [[1, 2.0, "paid"]], 3 * 10**9))
    first = await warehouse.query(ORDERS, None, qctx(store, turn_id="a"))
    assert first.ok
    # the job may not bill more than what is left of the budget
    assert fake_bq.runs()[0]["configuration"]["query"]["maximumBytesBilled"] == str(5 * 10**9)
    second = await warehouse.query(ORDERS, None, qctx(store, turn_id="b"))
    assert not second.ok
    assert (
        "your daily budget" in second.error and "00:00 UTC" in second.error and "2.0 GB left" in second.error
    )
    assert len(fake_bq.runs()) == 1
    # another person in the same channel still has budget
    other = await warehouse.query(ORDERS, None, qctx(store, turn_id="c", user_id="U999"))
    assert other.ok


async def test_concurrent_turns_cannot_both_spend_the_last_of_a_budget(parts, fake_bq):
    """The estimate is reserved before the job runs, so two turns at once cannot overspend."""
    warehouse, _, store, _ = parts
    warehouse.limits = dataclasses.replace(warehouse.limits, per_user_day=5 * 10**9)
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [[1, 2.0, "paid"]], 3 * 10**9))
    results = await asyncio.gather(
        *(warehouse.query(ORDERS, None, qctx(store, turn_id=f"t{i}", session_id="s1")) for i in range(2))
    )
    assert sorted(r.ok for r in results) == [False, True]
    assert len(fake_bq.runs()) == 1
    refused = next(r for r in results if not r.ok)
    assert "your daily budget" in refused.error
    # the refused turn's reservation was released: 3 GB billed, 2 GB still left for a small query
    daily = next(b for b in warehouse._budgets(qctx(store)) if b.name == "your daily budget")
    used = await store.add_usage(daily.key, 0, ttl_s=86400)
    assert used == 3 * 10**9


ALLOW = TableAllowlist(("bill.shop.orders", "bill.shop.customers", "bill.pub.*"))
REFUSED = [
    ("qualified", "SELECT * FROM bill.secret.salaries", "is not allowed"),
    ("backticked", "SELECT pay FROM `bill.secret.salaries`", "is not allowed"),
    ("backticked parts", "SELECT pay FROM `bill`.`secret`.`salaries`", "is not allowed"),
    ("dataset.table in the billing project", "SELECT * FROM secret.salaries", "is not allowed"),
    ("unqualified in the default dataset", "SELECT * FROM refunds", "is not allowed"),
    ("other project", "SELECT * FROM `other.ext.events`", "is not allowed"),
    ("wildcard over a partly allowed dataset", "SELECT * FROM `bill.shop.*`", "covers several tables"),
    (
        "wildcard elsewhere",
        "SELECT * FROM `other.ext.events_*` WHERE _TABLE_SUFFIX > '2024'",
        "covers several tables",
    ),
    (
        "information schema of another dataset",
        "SELECT * FROM `bill.secret.INFORMATION_SCHEMA.TABLES`",
        "covers several tables",
    ),
    (
        "region information schema",
        "SELECT * FROM `region-us`.INFORMATION_SCHEMA.JOBS",
        "region-level metadata (other people's jobs and datasets) and is never available",
    ),
    (
        "CTE hiding a forbidden table",
        "WITH orders AS (SELECT * FROM secret.salaries) SELECT * FROM orders",
        "is not allowed",
    ),
    ("subquery", "SELECT * FROM orders WHERE id IN (SELECT 1 FROM secret.salaries)", "is not allowed"),
    ("delete", "DELETE FROM orders WHERE TRUE", "changes data"),
    ("insert", "INSERT INTO orders (id) VALUES (1)", "changes data"),
    ("merge", "MERGE orders t USING customers s ON t.id = s.id WHEN MATCHED THEN DELETE", "changes data"),
    ("create table", "CREATE TABLE shop.copy AS SELECT * FROM orders", "changes the schema"),
    ("drop", "DROP TABLE orders", "changes the schema"),
    ("two statements", "SELECT 1; SELECT 2", "statements"),
    ("script", "DECLARE x INT64 DEFAULT 1; SELECT x", "statements"),
    (
        "export",
        "EXPORT DATA OPTIONS (uri='gs://b/x-*.csv', format='CSV') AS SELECT * FROM orders",
        "EXPORT DATA",
    ),
    ("call", "CALL shop.refresh()", "CALL"),
    ("temp function", "CREATE TEMP FUNCTION f(x INT64) AS (x + 1); SELECT f(id) FROM orders", "statements"),
]


async def test_policy_refusals_through_the_tool_path_never_reach_bigquery(parts, fake_bq):
    warehouse, sandbox, store, _ = parts
    ctx = tool_ctx(warehouse, sandbox, store, ALLOW)
    for label, sql, why in REFUSED:
        outcome = await call_tool("query_warehouse", {"sql": sql}, ctx)
        assert outcome.is_error, f"{label}: {sql}"
        assert why in outcome.content, f"{label}: {outcome.content}"
    assert fake_bq.inserts == [] and not [c for c in fake_bq.calls if c[1].endswith("/jobs")]


NO_ALLOWLIST_REFUSED = [  # no allowlist configured: the billing project's datasets, applied before Google
    "SELECT * FROM otherproj.public.words",
    "SELECT * FROM `bigquery-public-data.samples.shakespeare`",
    "SELECT * FROM `other.ext.events`",
    "SELECT * FROM `other`.ext.events",
    "SELECT * FROM `other.ext.events_*`",
    "SELECT * FROM `other.ext.INFORMATION_SCHEMA.COLUMNS`",
    "SELECT o.id FROM shop.orders o JOIN `other.ext.events` e ON TRUE",
    "SELECT id FROM shop.orders UNION ALL SELECT 1 FROM `other.ext.events`",
    "WITH RECURSIVE events AS (SELECT * FROM `other.ext.events`) SELECT * FROM events",
    "WITH orders AS (SELECT 1 AS id) SELECT * FROM (SELECT * FROM `other.ext.events`)",
    # project- and region-level metadata: refused whatever the allowlist says
    "SELECT query FROM `region-us`.INFORMATION_SCHEMA.JOBS_BY_USER",
    "SELECT query FROM `region-us.INFORMATION_SCHEMA.JOBS`",
    "SELECT query FROM `bill.region-us.INFORMATION_SCHEMA.JOBS_BY_PROJECT`",
    "SELECT query FROM `region-eu`.INFORMATION_SCHEMA.JOBS_TIMELINE_BY_USER",
    "SELECT * FROM `bill`.INFORMATION_SCHEMA.SCHEMATA",
    "SELECT * FROM bill.INFORMATION_SCHEMA.TABLES",
    "SELECT * FROM INFORMATION_SCHEMA.JOBS",
    "SELECT * FROM shop.INFORMATION_SCHEMA.JOBS_BY_ORGANIZATION",
    "SELECT * FROM `region-us`.INFORMATION_SCHEMA.SESSIONS_BY_USER",
]


@pytest.mark.parametrize("through_tools", [True, False], ids=["tool path", "policy bypassed"])
async def test_without_an_allowlist_nothing_outside_the_billing_project_reaches_bigquery(
    parts, fake_bq, through_tools
):
    """Each probe is refused before any request (dry run included) — through call_tool, and straight into
    BigQueryWarehouse.query as if the tool layer's check had been skipped; an allowed query still runs."""
    warehouse, sandbox, store, _ = parts
    open_ = TableAllowlist()
    for sql in NO_ALLOWLIST_REFUSED:
        fake_bq.on_query(sql, Answer(referenced=[]))  # were it sent, BigQuery would run it
        if through_tools:
            outcome = await call_tool(
                "query_warehouse", {"sql": sql}, tool_ctx(warehouse, sandbox, store, open_)
            )
            refused, why = outcome.is_error, outcome.content
        else:
            result = await warehouse.query(sql, None, qctx(store, allowlist=open_))
            refused, why = not result.ok, result.error
        assert refused and ("not allowed" in why or "never available" in why or "several tables" in why), sql
    assert fake_bq.calls == [] and fake_bq.inserts == []
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [[1, 9.5, "paid"]], referenced=["bill.shop.orders"]))
    fine = await warehouse.query(ORDERS, "fine", qctx(store, allowlist=open_))
    assert fine.ok, fine.error
    assert [b["configuration"].get("dryRun", False) for b in fake_bq.inserts] == [True, False]


async def test_allowed_queries_through_the_tool_path(parts, fake_bq):
    warehouse, sandbox, store, settings = parts
    ctx = tool_ctx(warehouse, sandbox, store, ALLOW)
    shadow = "WITH salaries AS (SELECT id FROM orders) SELECT id FROM salaries"  # a CTE, not secret.salaries
    fake_bq.on_query(shadow, Answer([{"name": "id", "type": "INTEGER"}], [[7]], 5_000_000))
    fake_bq.on_query(
        "`bill.shop.orders`", Answer([{"name": "n", "type": "INTEGER"}], [[3]], 0, cache_hit=True)
    )
    outcome = await call_tool("query_warehouse", {"sql": shadow, "save_as": "shadow"}, ctx)
    assert not outcome.is_error, outcome.content
    assert "Saved 1 row to 'shadow.parquet'" in outcome.content
    assert read_parquet(settings, "shadow.parquet") == {"id": [7]}
    cached = await call_tool("query_warehouse", {"sql": "SELECT count(*) n FROM `bill.shop.orders`"}, ctx)
    assert not cached.is_error and "cache hit: yes" in cached.content and cached.bytes_scanned == 0


async def test_a_result_never_takes_the_name_of_a_file_the_person_shared(parts, fake_bq):
    """A shared `Orders.parquet` and save_as="orders": the result is `orders-2.parquet`, the model is told
    why first, and the person's file keeps its bytes (the bot writes BigQuery's results itself)."""
    warehouse, sandbox, store, settings = parts
    fake_bq.on_query(
        ORDERS, Answer(ORDERS_SCHEMA, [[1, 9.5, "paid"]], 10**6, referenced=["bill.shop.orders"])
    )
    await sandbox.write_file("s1", "Orders.parquet", b"the person's own bytes")
    ctx = tool_ctx(warehouse, sandbox, store, ALLOW)
    ctx.query = dataclasses.replace(ctx.query, shared=("Orders.parquet",))
    outcome = await call_tool("query_warehouse", {"sql": ORDERS, "save_as": "orders"}, ctx)
    assert outcome.content.startswith(
        "Saved as 'orders-2.parquet': 'Orders.parquet' is a file the person shared and stays as it is.\n"
        "Saved 1 row to 'orders-2.parquet'."
    ), outcome.content
    assert outcome.files == ("orders-2.parquet",)
    assert (settings.workspaces_dir / "s1" / "Orders.parquet").read_bytes() == b"the person's own bytes"
    assert read_parquet(settings, "orders-2.parquet")["id"] == [1]


async def test_dry_run_is_the_last_word_on_statement_type_and_tables(parts, fake_bq):
    warehouse, _, store, _ = parts
    fake_bq.on_query("SELECT 1 AS a", Answer(statement_type="SCRIPT"))
    fake_bq.on_query("FROM shop.v", Answer(referenced=["bill.secret.salaries"]))
    script = await warehouse.query("SELECT 1 AS a", None, qctx(store))
    assert not script.ok and "SCRIPT" in script.error
    with_view = TableAllowlist((*ALLOW.patterns, "bill.shop.v"))  # the view is allowed, what it reads is not
    leak = await warehouse.query("SELECT * FROM shop.v", None, qctx(store, allowlist=with_view))
    assert not leak.ok and "bill.secret.salaries" in leak.error
    # an empty allowlist means the billing project's datasets, not all of BigQuery
    fake_bq.on_query("FROM `other.ext.events`", Answer(referenced=["other.ext.events"]))
    other = await warehouse.query("SELECT * FROM `other.ext.events`", None, qctx(store))
    assert not other.ok and "other.ext.events" in other.error
    assert fake_bq.runs() == []


@pytest.mark.parametrize(
    ("status", "reason", "on_run", "expect"),
    [
        (400, "invalidQuery", False, "BigQuery rejected the query: Syntax error"),
        (403, "accessDenied", False, "Permission denied by BigQuery"),
        (403, "quotaExceeded", True, "quota or rate limit"),
        (404, "notFound", False, "Not found in BigQuery"),
        (400, "bytesBilledLimitExceeded", True, "stopped the query at its byte limit"),
    ],
)
async def test_bigquery_errors_come_back_as_plain_words(parts, fake_bq, status, reason, on_run, expect):
    warehouse, _, store, _ = parts
    error = (status, reason, "Syntax error: Unexpected keyword FORM at [1:10]" if status == 400 else "nope")
    answer = Answer(ORDERS_SCHEMA, [], run_error=error) if on_run else Answer(error=error)
    fake_bq.on_query(ORDERS, answer)
    result = await warehouse.query(ORDERS, None, qctx(store))
    assert not result.ok and expect in result.error
    assert "Traceback" not in result.error and "http://" not in result.error


async def test_timeout_cancels_the_job_and_its_estimate_stays_counted(parts, fake_bq):
    """A cancelled job may still be billed (BigQuery bills what it processed before the cancel): the
    budgets keep its estimate, where they counted nothing and a person could run timed-out queries
    at the cap all day."""
    warehouse, _, store, _ = parts
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [], 3 * 10**9, pending=True))
    result = await warehouse.query(ORDERS, None, qctx(store, timeout_s=1.0))
    assert not result.ok and "did not finish within 1 s" in result.error
    assert fake_bq.cancelled == [fake_bq.runs()[0]["jobReference"]["jobId"]]
    assert await store.add_usage("bq:turn:turn1", 0, ttl_s=60) == 3 * 10**9


async def test_discovery_is_free_allowlisted_and_cached(tmp_path, fake_bq):
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nAmounts are USD.\n\n## shop.orders\nExclude status = 'test'.\nMore detail.\n")
    settings = bq_settings(tmp_path, table_notes=notes, bigquery_default_dataset="bill.shop")
    warehouse = BigQueryWarehouse.from_settings(settings, LocalSandbox(workspaces=settings.workspaces_dir))
    everything = await warehouse.list_tables(TableAllowlist())
    assert [t["name"] for t in everything] == [
        "bill.secret.salaries",
        "bill.shop.customers",
        "bill.shop.orders",
    ]
    shop = await warehouse.list_tables(TableAllowlist(("bill.shop.*",)))
    assert [(t["name"], t["rows"]) for t in shop] == [("bill.shop.customers", 1), ("bill.shop.orders", 3)]
    assert shop[1]["description"] == "One row per order."
    assert [t["name"] for t in await warehouse.list_tables(TableAllowlist(("other.ext.*",)))] == [
        "other.ext.events"
    ]
    text = await warehouse.describe_table("orders", TableAllowlist(("bill.shop.*",)))
    assert "`bill.shop.orders`" in text and "3 rows" in text
    assert "Partitioned by DAY on created" in text and "Clustered by status" in text
    assert "Exclude status = 'test'." in text and "status STRING — paid | refunded | test" in text
    assert "id INTEGER NOT NULL" in text and "refunded" in text  # sample rows through tabledata.list
    calls = len(fake_bq.calls)
    again = await warehouse.describe_table("`bill.shop.orders`", TableAllowlist(("bill.shop.*",)))
    assert again == text and len(fake_bq.calls) == calls  # cached
    with pytest.raises(LookupError):
        await warehouse.describe_table("secret.salaries", TableAllowlist(("bill.shop.*",)))
    with pytest.raises(LookupError):
        await warehouse.describe_table("shop.nope", TableAllowlist())
    assert not [c for c in fake_bq.calls if c[1].endswith("/jobs")]  # discovery ran no (billed) query
    prompt = warehouse.prompt_notes()
    assert "BigQuery" in prompt and "Amounts are USD." in prompt and "shop.orders: Exclude" in prompt
    assert "More detail" not in prompt
    await warehouse.close()


def _service_account_key() -> tuple[dict, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "key-project",
        "private_key_id": "abc123",
        "private_key": pem,
        "client_email": "datathread@key-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    return info, pem.splitlines()[5]  # a line of the key body, unique to this key


def _files_containing(roots, needle: bytes, *, since: float = 0.0) -> list[str]:
    """Regular files under `roots` holding `needle`; only those written at or after `since` are read
    (a needle made during the test can only be in a file written during it, and a shared /tmp may
    hold gigabytes of other people's files)."""
    import contextlib
    import os
    import stat

    def files_under(root: str):  # not os.walk: on 3.11 it recurses, and a deep tree in /tmp broke it
        stack = [root]
        while stack:
            with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        yield entry.path

    found = []
    for path in (found_path for root in roots for found_path in files_under(root)):
        try:
            st = os.lstat(path)
            if (
                stat.S_ISREG(st.st_mode)
                and st.st_mtime >= since
                and st.st_size < 5_000_000
                and needle in Path(path).read_bytes()
            ):
                found.append(path)
        except OSError:
            continue
    return found


async def test_service_account_key_is_used_from_memory_and_never_written(tmp_path, fake_bq, monkeypatch):
    import json
    import tempfile

    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    started = time.time() - 2  # coarse file-system timestamps
    info, key_line = _service_account_key()
    fake_bq.mock.add(
        "POST",
        "https://oauth2.googleapis.com/token",
        json={"access_token": "ya29.fake-token", "expires_in": 3600, "token_type": "Bearer"},
    )
    settings = bq_settings(tmp_path, gcp_service_account_json=json.dumps(info), gcp_project="bill")
    sandbox = LocalSandbox(workspaces=settings.workspaces_dir)
    warehouse = BigQueryWarehouse.from_settings(settings, sandbox)
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [[1, 2.0, "paid"]], 10**6))
    result = await warehouse.query(ORDERS, "o", qctx(None))
    assert result.ok, result.error
    assert (
        fake_bq.runs()[0]["jobReference"]["projectId"] == "bill"
    )  # GCP_PROJECT bills, not the key's project
    assert {k.lower(): v for k, v in fake_bq.headers[-1].items()}["authorization"] == "Bearer ya29.fake-token"
    assert key_line not in settings.model_dump_json()  # a SecretStr: never printed
    assert _files_containing([tmp_path], key_line.encode()) == []
    assert _files_containing(sorted({tempfile.gettempdir(), "/tmp"}), key_line.encode(), since=started) == []
    await warehouse.close()
    await sandbox.close()


async def test_end_to_end_turn_on_bigquery(tmp_path, fake_bq, fake_model, recorder):
    from core.analyst import Analyst
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    settings = bq_settings(
        tmp_path,
        anthropic_api_key="sk-ant-test-key-000000",
        anthropic_base_url=fake_model.url,
        model="claude-test",
        model_retries=1,
        bigquery_datasets="bill.shop",
        query_soft_cap_bytes=10**9,
        step_timeout=20,
    )
    sql = "SELECT status, SUM(amount) AS total FROM `bill.shop.orders` GROUP BY status"
    schema = [{"name": "status", "type": "STRING"}, {"name": "total", "type": "FLOAT"}]
    fake_bq.on_query(
        sql,
        Answer(
            schema,
            [["paid", 13.75], ["refunded", 20.0]],
            5 * 10**9,
            bytes_billed=6 * 10**9,  # not what it processed: the receipt says what was billed
            referenced=["bill.shop.orders"],
        ),
    )
    fake_model.enqueue(
        tool("list_tables", {}),
        tool("describe_table", {"table": "bill.shop.orders"}),
        tool("query_warehouse", {"sql": sql, "save_as": "totals"}),
        tool("query_warehouse", {"sql": "SELECT * FROM `bill.secret.salaries`"}),
        text("Paid orders total **13.75**."),
    )
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> bool:
        asked.append(request)
        return True

    analyst = await Analyst.create(settings)
    try:
        message = IncomingMessage(
            text="totals by status?", surface="terminal", thread_key=("bq",), user_id="u1"
        )
        outcome = await analyst.handle(message, recorder, confirm=confirm)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    listing = fake_model.last_tool_results(1)[0]["content"]
    assert listing == "- bill.shop.customers (1 row)\n- bill.shop.orders (3 rows): One row per order."
    assert "Partitioned by DAY" in fake_model.last_tool_results(2)[0]["content"]
    query_result = fake_model.last_tool_results(3)[0]
    assert (
        "Saved 2 rows to 'totals.parquet'" in query_result["content"]
        and "billed 6.0 GB" in query_result["content"]
    )
    refusal = fake_model.last_tool_results(4)[0]
    assert refusal["is_error"] and "bill.secret.salaries" in refusal["content"]
    frame = pq.read_table(settings.workspaces_dir / outcome.session_id / "totals.parquet").to_pydict()
    assert frame == {"status": ["paid", "refunded"], "total": [13.75, 20.0]}
    assert len(asked) == 1 and asked[0].turn_id == outcome.turn_id and "5.0 GB" in asked[0].prompt
    finished = recorder.of("turn_finished")[0]
    assert finished.stats.bytes_scanned == 5 * 10**9
    assert finished.receipt.bytes_billed == 6 * 10**9  # it summed bytes processed as "billed"
    assert fake_bq.runs()[0]["configuration"]["labels"]["surface"] == "terminal"
    assert "BigQuery" in fake_model.requests[0]["system"][0]["text"]


async def test_a_view_is_listed_and_described_as_a_view_not_as_empty(tmp_path, fake_bq):
    """BigQuery gives a view no row count: list_tables said "daily_revenue (0 rows)" and describe
    "(view) — 0 rows", and the model treated the view as empty."""

    fake_bq.add_table(
        FakeTable("bill", "shop", "daily_revenue", [{"name": "day", "type": "DATE"}], table_type="VIEW")
    )
    settings = bq_settings(tmp_path, bigquery_default_dataset="bill.shop")
    warehouse = BigQueryWarehouse.from_settings(settings, LocalSandbox(workspaces=settings.workspaces_dir))
    try:
        listed = {t["name"]: t["rows"] for t in await warehouse.list_tables(TableAllowlist(("bill.shop.*",)))}
        assert listed["bill.shop.daily_revenue"] is None and listed["bill.shop.orders"] == 3
        described = await warehouse.describe_table("daily_revenue", TableAllowlist(("bill.shop.*",)))
        assert "(view) — rows not counted" in described and "0 rows" not in described
    finally:
        await warehouse.close()


async def test_freshness_is_the_oldest_last_modified_time_of_the_tables_read(parts, fake_bq):
    """For answer receipts: a metadata call per table (cached), unknown tables left out, never an error."""
    warehouse, *_ = parts
    fake_bq.tables["bill.shop.orders"].extra["lastModifiedTime"] = "1763632800000"  # 2025-11-20 10:00 UTC
    fake_bq.tables["bill.shop.customers"].extra["lastModifiedTime"] = "1763719200000"  # a day later
    oldest = await warehouse.freshness(
        ["bill.shop.orders", "shop.customers", "bill.shop.missing", "nonsense"]
    )
    assert oldest is not None and oldest.isoformat() == "2025-11-20T10:00:00+00:00"
    assert await warehouse.freshness([]) is None


async def test_a_network_gone_after_the_dry_run_fails_the_query_within_the_step_limit(parts, fake_bq):
    """The job's insert gets its own retry wrapper in the client, 600 s whatever retry it is given,
    unless job_retry is None there: the step's limit covers the dry run and the job together."""
    warehouse, _, store, _ = parts
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [], referenced=["bill.shop.orders"], run_unreachable=True))
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(warehouse.query(ORDERS, None, qctx(store, timeout_s=2.0)), 60)
    took = asyncio.get_running_loop().time() - started
    assert not result.ok
    assert result.error.startswith("Could not reach BigQuery within 2 s: Connection refused"), result.error
    assert took < 5, f"{took:.1f} s"


async def test_a_job_that_never_answers_keeps_its_reservation_and_a_refused_one_releases_it(
    parts, fake_bq, monkeypatch
):
    """Past the dry run, a job insert BigQuery took but never answered may have run and been billed:
    its estimate stays counted in the budgets. One BigQuery refused billed nothing: released."""
    from core import warehouse_bigquery

    monkeypatch.setattr(warehouse_bigquery, "ANSWER_GRACE_S", 0.5)
    warehouse, _, store, _ = parts
    warehouse.limits = dataclasses.replace(warehouse.limits, per_user_day=10 * 10**9)
    daily = next(b for b in warehouse._budgets(qctx(store)) if b.name == "your daily budget")
    held = threading.Event()
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [], 3 * 10**9, held=held))
    try:
        silent = await asyncio.wait_for(warehouse.query(ORDERS, None, qctx(store, timeout_s=1.0)), 30)
        assert not silent.ok and "did not answer" in silent.error, silent.error
        assert await store.add_usage(daily.key, 0, ttl_s=86400) == 3 * 10**9
    finally:  # the abandoned call's thread can end now (the fixture waits for it)
        held.set()
    fake_bq.answers.clear()
    refused = "SELECT status FROM `bill.shop.orders`"
    fake_bq.on_query(refused, Answer(ORDERS_SCHEMA, [], 2 * 10**9, run_error=(400, "invalidQuery", "no")))
    assert not (await warehouse.query(refused, None, qctx(store, turn_id="t2"))).ok
    assert await store.add_usage(daily.key, 0, ttl_s=86400) == 3 * 10**9


async def test_a_result_too_large_to_download_and_a_stopped_query_stay_counted(parts, fake_bq, monkeypatch):
    """A result over the download limit ran and billed, then its bytes were given back to the budgets
    (the model could repeat it without end); a turn stopped mid-query gave its reservation back too."""
    from core import bigquery_jobs

    warehouse, _, store, _ = parts
    monkeypatch.setattr(bigquery_jobs, "MAX_RESULT_ROWS", 2)  # where the job is run
    rows = [[i, 1.0, "paid"] for i in range(3)]
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, rows, 9 * 10**9, bytes_billed=8 * 10**9))
    big = await warehouse.query(ORDERS, None, qctx(store))
    assert not big.ok and "The result has 3 rows, more than the" in big.error
    assert await store.add_usage("bq:turn:turn1", 0, ttl_s=60) == 8 * 10**9  # what it billed
    fake_bq.answers.clear()
    running = fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, [], 3 * 10**9, pending=True))
    stopped = asyncio.create_task(warehouse.query(ORDERS, None, qctx(store, turn_id="t2", timeout_s=5.0)))
    for _ in range(100):
        if fake_bq.runs()[1:]:
            break
        await asyncio.sleep(0.05)
    stopped.cancel()  # Ctrl-C, a Stop, an eval question's time limit
    with pytest.raises(asyncio.CancelledError):
        await stopped
    assert await store.add_usage("bq:turn:t2", 0, ttl_s=60) == 3 * 10**9
    running.pending = False  # the abandoned call's thread can end now (the fixture waits for it)


async def test_a_result_that_cannot_be_saved_is_said_to_have_run_and_names_its_column(parts, fake_bq):
    """A BIGNUMERIC of 77 digits (past Arrow's 76) ran and billed, then failed in Arrow: the model was
    told "Could not reach BigQuery … Try again shortly", ran it again (billed again), and the person
    heard BigQuery was down. Then it was told to "cast the column it names" by an error that named
    none ("Decimal type with precision 77 does not fit…")."""
    warehouse, _, store, _ = parts
    sql = "SELECT id, total AS bn FROM `bill.shop.orders`"
    schema = [{"name": "id", "type": "INTEGER"}, {"name": "bn", "type": "BIGNUMERIC", "mode": "NULLABLE"}]
    huge = "578960446186580977117854925043439539266.34992332820282019728792003956564819967"
    fake_bq.on_query(sql, Answer(schema, [[1, huge]], 3 * 10**6, bytes_billed=10 * 2**20))
    result = await warehouse.query(sql, None, qctx(store))
    assert not result.ok
    assert result.error.startswith(
        "BigQuery ran the query (10.5 MB billed), but its result could not be saved: "
    )
    assert "Cast the column bn (BIGNUMERIC) in SQL" in result.error and "reach" not in result.error


async def test_an_interval_result_is_saved_as_text_as_duckdbs_is(parts, fake_bq):
    """An INTERVAL column (`ts1 - ts2`) ran and billed, then failed: parquet has no month-day-nano
    interval. DuckDB's were already saved as text; BigQuery's now are too."""
    warehouse, _, store, settings = parts
    sql = "SELECT TIMESTAMP '2026-01-02' - TIMESTAMP '2026-01-01' AS gap FROM `bill.shop.orders`"
    schema = [{"name": "gap", "type": "INTERVAL", "mode": "NULLABLE"}]
    rows = [["1-2 3 4:5:6.789"], ["0-0 -30 0:0:0"], [None]]
    fake_bq.on_query(sql, Answer(schema, rows, 3 * 10**6, bytes_billed=10 * 2**20))
    result = await warehouse.query(sql, "gaps", qctx(store))
    assert result.ok, result.error
    assert result.columns == [{"name": "gap", "type": "string"}]
    saved = pq.read_table(settings.workspaces_dir / "s1" / "gaps.parquet").column("gap").to_pylist()
    assert saved == ["1 year 2 months 3 days 04:05:06.789", "-30 days", None]


async def test_a_result_that_would_fill_the_workspace_is_refused_in_words(parts, fake_bq):
    """A BigQuery result was written past the workspace's quota (a step's own writes never are)."""
    warehouse, sandbox, store, settings = parts
    sandbox.workspace_bytes = 2_000
    rows = [[i, i * 1.5, "paid" * 20] for i in range(500)]
    fake_bq.on_query(ORDERS, Answer(ORDERS_SCHEMA, rows, 10**6))
    result = await warehouse.query(ORDERS, "orders", qctx(store))
    assert not result.ok and "would take the thread's workspace past its" in result.error, result.error
    assert not (settings.workspaces_dir / "s1" / "orders.parquet").exists()


def test_a_failed_conversion_names_only_the_columns_that_may_fail():
    """An INTERVAL is saved as text (`core/portable_columns.py`), yet a 77-digit BIGNUMERIC's refusal
    told the model to cast the INTERVAL column too."""
    from google.cloud.bigquery import SchemaField

    from core.bigquery_errors import risky_columns

    schema = [
        SchemaField("gap", "INTERVAL"),
        SchemaField("bn", "BIGNUMERIC"),
        SchemaField("st", "RECORD", fields=[SchemaField("x", "RANGE"), SchemaField("i", "INTERVAL")]),
    ]
    assert risky_columns(schema) == ["bn (BIGNUMERIC)", "st.x (RANGE)"]
