"""list_tables at a real data team's scale, through the tool and the real client, over the scripted REST
API with the service's pages, 404s and 403s: hundreds of datasets, thousands of (date-sharded) tables,
a table dropped while listing, a configured dataset that no longer exists, a slow network."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time

import pytest
import responses

from core import warehouse_bigquery
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.store_sqlite import SqliteStore
from core.tools import call_tool
from core.warehouse_bigquery import BigQueryWarehouse
from tests.core.bigquery_parts import bq_settings, tool_ctx
from tests.fakes.bigquery_api import API, FakeBigQuery, FakeTable


def table(dataset: str, name: str) -> FakeTable:
    return FakeTable("bill", dataset, name, [{"name": "c", "type": "STRING"}], [["x"]])


@pytest.fixture
def fake():
    fake = FakeBigQuery(API)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        fake.register(mock)
        yield fake
    assert not fake.bugs


@pytest.fixture
async def listing(tmp_path, fake):
    """`await listing(allow, **args)` → (the tool's text, is_error) through call_tool."""
    settings = bq_settings(tmp_path)
    sandbox = LocalSandbox(workspaces=settings.workspaces_dir)
    store = SqliteStore(tmp_path / "state.sqlite3")
    warehouse = BigQueryWarehouse.from_settings(settings, sandbox)

    async def run(allow=(), **args):
        out = await call_tool("list_tables", args, tool_ctx(warehouse, sandbox, store, TableAllowlist(allow)))
        return out.content, out.is_error

    run.warehouse = warehouse
    yield run
    await warehouse.close()
    await sandbox.close()
    await store.close()


def calls(fake, kind: str) -> int:
    ends = {"get": lambda p: "/tables/" in p, "list": lambda p: p.endswith("/tables")}[kind]
    return sum(1 for _, path, _ in fake.calls if ends(path))


async def test_one_bad_table_or_dataset_is_skipped_and_said_the_rest_listed(listing, fake, caplog):
    """A staging table dropped between tables.list and tables.get, a table the account may not read,
    and an allowlisted dataset that was deleted: each failed the whole listing ("Not found … Check the
    name with list_tables", "Permission denied … use another table from list_tables")."""
    for name in ("orders", "payroll", "tmp_stage_0412"):
        fake.add_table(table("shop", name))
    fake.table_errors["bill.shop.tmp_stage_0412"] = (
        404,
        "notFound",
        "Not found: Table bill:shop.tmp_stage_0412",
    )
    fake.table_errors["bill.shop.payroll"] = (403, "accessDenied", "Access Denied: Table bill:shop.payroll")
    with caplog.at_level(logging.WARNING, logger="core.bigquery_listing"):
        text, error = await listing(("bill.shop.*", "bill.gone.*"))
    assert not error, text
    assert [line for line in text.splitlines() if line.startswith("- ")] == ["- bill.shop.orders (1 row)"]
    assert (
        "Skipped: bill.shop.payroll (the bot's account may not read it); bill.shop.tmp_stage_0412 "
        "(gone since it was listed); dataset bill.gone (not found)." in text
    )
    assert "bill.gone" in caplog.text and "does not exist" in caplog.text


async def test_a_large_project_is_listed_in_bounded_calls_and_capped_across_datasets(listing, fake):
    """300 datasets × 5 tables and no allowlist: it was 300 tables.list + a tables.get per table, one
    after another (120 s at 0.2 s a call, then an error), and the 200-line cap left only the inner
    loop: the first 40 datasets whole, then `t0` of every other one, and no word that it was cut."""
    for d in range(300):
        for t in range(5):
            fake.add_table(table(f"ds{d:03}", f"t{t}"))
    fake.latency = 0.01
    started = time.monotonic()
    text, error = await listing()
    took = time.monotonic() - started
    assert not error, text
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 200 and lines[-1] == "- bill.ds039.t4"  # whole datasets, in name order
    assert calls(fake, "get") == 0 and calls(fake, "list") == 300
    assert "200 of 1500 shown (300 datasets)" in text and "list_tables with dataset='bill.ds040'" in text
    assert took < 10, f"{took:.1f} s"
    one, _ = await listing(dataset="ds123")
    assert [line.split()[1] for line in one.splitlines() if line.startswith("- ")] == [
        f"bill.ds123.t{t}" for t in range(5)
    ]
    assert "(1 row)" in one  # a short listing has its row counts
    refused, error = await listing(("bill.ds001.*",), dataset="ds002")
    assert error and "No dataset named 'ds002' that you may use" in refused


async def test_a_slow_listing_ends_at_its_bound_with_what_it_found_and_stops_calling(
    listing, fake, monkeypatch
):
    """At its bound it said "BigQuery did not answer within 120 s. Try again shortly.", with nothing
    cached, while its thread went on calling (25 calls in the next 5 s): a retry doubled the load."""
    monkeypatch.setattr(warehouse_bigquery, "LIST_S", 1.0, raising=False)  # (no such bound before)
    monkeypatch.setattr(warehouse_bigquery, "PARTIAL_TTL_S", 2.5, raising=False)  # (was the whole TTL)
    for d in range(300):
        fake.add_table(table(f"ds{d:03}", "t0"))
    fake.latency = 0.05
    started = time.monotonic()
    text, error = await listing()
    ended = time.monotonic()
    assert ended - started < 3
    assert not error, text
    assert "The list is partial: listing stopped at its time limit with" in text
    assert "Ask for one with list_tables dataset='bill.ds" in text
    made = len(fake.calls)
    await asyncio.sleep(0.5)
    assert len(fake.calls) - made <= 1  # at most a call already on the wire
    again, _ = await listing()
    assert again == text  # cached a short while: asking again at once does not start over
    await asyncio.sleep(max(2.6 - (time.monotonic() - ended), 0))
    made = len(fake.calls)
    await listing()
    assert len(fake.calls) > made  # but not for the metadata TTL (600 s): it may be whole now


async def test_a_listing_the_caller_gives_up_on_stops_calling(listing, fake):
    """help gives up after 5 s and a Stop cancels the turn: the listing's threads kept calling."""
    for d in range(300):
        fake.add_table(table(f"ds{d:03}", "t0"))
    fake.latency = 0.05
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(listing.warehouse.list_tables(TableAllowlist()), 0.5)
    await asyncio.sleep(0.2)
    made = len(fake.calls)
    await asyncio.sleep(0.5)
    assert len(fake.calls) - made == 0
    # what it found is kept a short while: every `help` redid the same calls and gave up again
    again = await asyncio.wait_for(listing.warehouse.list_tables(TableAllowlist()), 0.5)
    assert len(fake.calls) == made and any("The list is partial" in line for line in again.notes)


async def test_a_server_error_on_one_dataset_skips_it_and_the_rest_is_listed(listing, fake, monkeypatch):
    """One dataset's 503 (retried to its bound) stopped every worker, and the listing so cut short was
    cached for the metadata TTL (600 s)."""
    monkeypatch.setattr(warehouse_bigquery, "PARTIAL_TTL_S", 1.0, raising=False)
    for d in "abcdefgh":
        fake.add_table(table(d, "t0"))
    fake.list_errors["bill.b"] = (
        503,
        "backendError",
        "Error encountered during execution. Retrying may solve the problem.",
    )
    fake.latency = 0.02
    first = await listing.warehouse.list_tables(TableAllowlist(), call_s=0.3)
    assert [t["name"] for t in first] == [f"bill.{d}.t0" for d in "acdefgh"]
    assert any(line.startswith("Skipped: dataset bill.b (error: ") for line in first.notes), first.notes
    made = len(fake.calls)
    assert await listing.warehouse.list_tables(TableAllowlist(), call_s=0.3) == first
    assert len(fake.calls) == made  # served again a short while
    await asyncio.sleep(1.1)
    del fake.list_errors["bill.b"]
    whole = await listing.warehouse.list_tables(TableAllowlist(), call_s=0.3)
    assert [t["name"] for t in whole] == [f"bill.{d}.t0" for d in "abcdefgh"]


async def test_date_shards_are_one_line_and_a_long_dataset_says_how_much_is_shown(listing, fake):
    """2,000 tables in one dataset were 200 lines of `events_2024xxxx` shards and never a word that
    more existed."""
    day = dt.date(2024, 1, 1)
    for n in range(365):
        fake.add_table(table("big", f"events_{day + dt.timedelta(days=n):%Y%m%d}"))
    for n in range(1635):
        fake.add_table(table("big", f"z_table_{n:04}"))
    text, error = await listing(("bill.big.*",))
    assert not error, text
    lines = text.splitlines()
    assert lines[0].startswith("- bill.big.events_*: 365 date shards, 20240101–20241230")
    assert lines[1] == "- bill.big.z_table_0000" and len([x for x in lines if x.startswith("- ")]) == 200
    assert "200 of 1636 shown (1 datasets)" in text
    assert calls(fake, "list") == 2  # two pages of 1,000


async def test_tables_named_only_by_a_date_are_not_one_shard_line(listing, fake):
    """`20240101` and `20240102` became one line `bill.snap.*`: a "shard" of every table in the dataset."""
    for name in ("20240101", "20240102", "orders"):
        fake.add_table(table("snap", name))
    text, error = await listing(("bill.snap.*",))
    assert not error, text
    names = [line.split()[1] for line in text.splitlines() if line.startswith("- ")]
    assert names == ["bill.snap.20240101", "bill.snap.20240102", "bill.snap.orders"]
