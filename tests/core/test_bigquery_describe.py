"""describe_table of a wide table and of a table under column-level security, through the tool and the
real client over the scripted REST API."""

from __future__ import annotations

from core.policy import TableAllowlist
from core.tools import call_tool
from tests.core import bigquery_parts
from tests.core.bigquery_parts import tool_ctx
from tests.fakes.bigquery_api import FakeTable

fake_bq, parts = bigquery_parts.fake_bq, bigquery_parts.parts  # the shared fixtures
TAG = {"names": ["projects/bill/locations/us/taxonomies/1/policyTags/2"]}


async def test_a_wide_table_says_how_many_columns_it_has_and_keeps_its_sample_rows(parts, fake_bq):
    """1,501 columns: 64,000 characters ending "… [clipped]" mid-column, the columns after #1014 and
    the sample rows gone, and no count of what was missing."""
    warehouse, sandbox, store, _ = parts
    schema = [
        {"name": f"metric_with_a_long_name_{i:04}", "type": "FLOAT", "description": "daily value of a metric"}
        for i in range(1500)
    ] + [{"name": "email", "type": "STRING", "policyTags": TAG}]
    fake_bq.add_table(FakeTable("bill", "wide", "t", schema, [[1.0] * 1500 + ["a@b.c"]]))
    ctx = tool_ctx(warehouse, sandbox, store, TableAllowlist(("bill.wide.*",)))
    out = await call_tool("describe_table", {"table": "bill.wide.t"}, ctx)
    assert not out.is_error and "[clipped]" not in out.content and len(out.content) < 40_000
    assert "Columns: 1,501 (nested fields counted); the first 300 shown:" in out.content
    assert "metric_with_a_long_name_0299" in out.content and "metric_with_a_long_name_0300" not in out.content
    assert "… 1,201 more. To find others by name: SELECT column_name, data_type FROM " in out.content
    assert "`bill.wide.INFORMATION_SCHEMA.COLUMNS` WHERE table_name = 't'" in out.content
    assert "Sample rows:" in out.content


async def test_a_policy_tagged_column_is_marked(parts, fake_bq):
    """Column-level security refused a whole query for one column the model could not have known of."""
    warehouse, sandbox, store, _ = parts
    schema = [{"name": "id", "type": "INTEGER"}, {"name": "email", "type": "STRING", "policyTags": TAG}]
    fake_bq.add_table(FakeTable("bill", "shop", "people", schema, [[1, "a@b.c"]]))
    ctx = tool_ctx(warehouse, sandbox, store, TableAllowlist(("bill.shop.*",)))
    out = await call_tool("describe_table", {"table": "bill.shop.people"}, ctx)
    assert "  email STRING [policy tag: may not be readable; leave it out if refused]" in out.content
    assert "  id INTEGER\n" in out.content


async def test_long_column_descriptions_are_capped_by_characters_and_the_hint_follows_the_allowlist(
    parts, fake_bq
):
    """The cap counted lines: 300 columns with 1,024-character descriptions passed 64,000 characters and
    clipped the sample rows again; and the INFORMATION_SCHEMA query was offered where the allowlist (one
    table) would refuse it."""
    warehouse, sandbox, store, _ = parts
    schema = [{"name": f"c{i:03}", "type": "FLOAT", "description": "d" * 1024} for i in range(300)]
    fake_bq.add_table(FakeTable("bill", "wide", "t", schema, [[1.0] * 300]))
    for allow, hint in (("bill.wide.*", True), ("bill.wide.t", False)):
        ctx = tool_ctx(warehouse, sandbox, store, TableAllowlist((allow,)))
        out = await call_tool("describe_table", {"table": "bill.wide.t"}, ctx)
        assert not out.is_error and "[clipped]" not in out.content and "Sample rows:" in out.content
        assert "Columns: 300 (nested fields counted); the first 2" in out.content
        assert ("INFORMATION_SCHEMA.COLUMNS" in out.content) is hint, allow
