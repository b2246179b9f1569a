"""S3 as a data source, against moto (the real boto3 client; moto answers at the HTTP boundary for the
endpoint DATATHREAD_S3_ENDPOINT_URL names — a closed loopback port, so nothing can leak to AWS):
prefix policy, size cap, and load → run_sql end to end."""

from __future__ import annotations

import json
import os

# moto reads its custom S3 endpoints when its S3 URL table is first imported.
ENDPOINT = "http://127.0.0.1:9"
os.environ["MOTO_S3_CUSTOM_ENDPOINTS"] = ENDPOINT

import boto3  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from moto import mock_aws  # noqa: E402

from core.events import IncomingMessage  # noqa: E402
from core.s3 import S3Refusal, S3Root, S3Source, parse_roots, parse_uri  # noqa: E402
from core.sandbox_factory import toolset  # noqa: E402
from core.schedules_tool import SCHEDULE_TOOLS  # noqa: E402
from core.tools import TOOLS  # noqa: E402
from tests.fakes.anthropic_api import text, tool  # noqa: E402

SALES_CSV = b"region,amount\nnorth,10\nsouth,5\nnorth,7\neast,1\n"
ORDERS_JSON = json.dumps([{"id": 1, "qty": 3}, {"id": 2, "qty": 4}]).encode()
HUGE = 1536 * 1024  # 1.5 MB, over a 1 MB cap


def _workbook() -> bytes:
    """A real Excel file (openpyxl), as analysts keep them in buckets."""
    import io

    buffer = io.BytesIO()
    pd.DataFrame({"sku": ["a", "b", "c"], "units": [3, 1, 2]}).to_excel(buffer, index=False)
    return buffer.getvalue()


@pytest.fixture
def s3_settings(settings, monkeypatch):
    """Settings allowing only s3://data-lake/sales/, with a 1 MB cap; buckets seeded with test files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "moto-secret-never-in-sandbox")
    mock = mock_aws()
    mock.start()
    import moto.s3.urls

    if ENDPOINT not in moto.s3.urls.url_bases:
        pytest.fail("moto's S3 URLs were loaded before this module set MOTO_S3_CUSTOM_ENDPOINTS")
    client = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    for bucket in ("data-lake", "other"):
        client.create_bucket(Bucket=bucket)
    objects = {
        ("data-lake", "sales/2024.csv"): SALES_CSV,
        ("data-lake", "sales/orders.json"): ORDERS_JSON,
        ("data-lake", "sales/huge.csv"): b"x" * HUGE,
        ("data-lake", "sales/book.xlsx"): _workbook(),
        ("data-lake", "salesforce/leads.csv"): b"a\n1\n",
        ("data-lake", "secret/payroll.csv"): b"name,salary\nann,1\n",
        ("other", "x.csv"): b"a\n1\n",
    }
    for (bucket, key), body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    yield settings.model_copy(
        update={
            "s3_buckets": "data-lake/sales",
            "s3_max_file_mb": 1,
            "s3_endpoint_url": ENDPOINT,
            "aws_region": "us-east-1",
        }
    )
    mock.stop()


@pytest.mark.parametrize(
    ("setting", "roots"),
    [
        ("", ()),
        ("b", (S3Root("b", ""),)),
        ("s3://b/data/, c/x/y/", (S3Root("b", "data/"), S3Root("c", "x/y/"))),
    ],
)
def test_parse_roots(setting, roots):
    assert parse_roots(setting) == roots


@pytest.mark.parametrize(
    ("bucket", "key", "covered"),
    [("b", "data/x.csv", True), ("b", "database/x.csv", False), ("b", "data", False), ("c", "data/x", False)],
)
def test_root_covers_whole_prefix_segments_only(bucket, key, covered):
    assert S3Root("b", "data/").covers(bucket, key) is covered


def test_parse_uri():
    assert parse_uri("s3://b/k/x.csv") == ("b", "k/x.csv") and parse_uri(" b/k ") == ("b", "k")


async def test_list_and_fetch_within_prefix_refuse_outside_and_oversize(s3_settings):
    source = S3Source.from_settings(s3_settings)
    assert (
        source is not None
        and S3Source.from_settings(s3_settings.model_copy(update={"s3_buckets": ""})) is None
    )
    listed = {o.uri: o.size for o in await source.list()}
    assert set(listed) == {
        f"s3://data-lake/sales/{n}" for n in ("2024.csv", "orders.json", "huge.csv", "book.xlsx")
    }
    assert listed["s3://data-lake/sales/2024.csv"] == len(SALES_CSV)
    assert {o.key for o in await source.list("s3://data-lake/")} == {k.split("/", 3)[3] for k in listed}
    assert [o.key for o in await source.list("s3://data-lake/sales/2024")] == ["sales/2024.csv"]
    for outside in ("s3://data-lake/secret/", "s3://other/", "s3://data-lake/salesforce/"):
        with pytest.raises(S3Refusal, match="outside what I may read"):
            await source.list(outside)
    assert await source.fetch("s3://data-lake/sales/2024.csv") == ("sales/2024.csv", SALES_CSV)
    for outside in (
        "s3://data-lake/secret/payroll.csv",
        "s3://other/x.csv",
        "s3://data-lake/salesforce/leads.csv",
    ):
        with pytest.raises(S3Refusal, match="outside what I may read"):
            await source.fetch(outside)
    with pytest.raises(S3Refusal) as caught:
        await source.fetch("s3://data-lake/sales/huge.csv")
    assert "is 1.5 MB, over the 1.0 MB limit" in str(caught.value)


def test_s3_tools_offered_only_when_configured(s3_settings):
    assert toolset(s3_settings.model_copy(update={"s3_buckets": ""})) == TOOLS + SCHEDULE_TOOLS
    names = [t.name for t in toolset(s3_settings)]
    assert names == [t.name for t in TOOLS] + ["list_files", "load_file", "create_schedule"]


async def test_load_then_run_sql_through_the_real_tool_path(s3_settings, fake_model, recorder):
    from core.analyst import Analyst

    analyst = await Analyst.create(s3_settings)
    try:
        fake_model.enqueue(
            tool("list_files", {}),
            tool(
                "load_file",
                {"uri": "s3://data-lake/sales/2024.csv"},
                more=[
                    ("load_file", {"uri": "s3://data-lake/sales/orders.json", "save_as": "orders"}),
                    ("load_file", {"uri": "s3://data-lake/secret/payroll.csv"}),
                    ("load_file", {"uri": "s3://data-lake/sales/huge.csv"}),
                    ("load_file", {"uri": "s3://data-lake/sales/book.xlsx"}),
                ],
            ),
            tool(
                "run_sql",
                {
                    "sql": "SELECT region, sum(amount) AS total FROM '2024.csv' GROUP BY region ORDER BY total DESC",
                    "save_as": "totals",
                },
                more=[("run_sql", {"sql": "SELECT sum(qty) AS q FROM 'orders.json'"})],
            ),
            text("North sold the most."),
        )
        message = IncomingMessage(
            text="sales by region from s3", surface="terminal", thread_key=("s3",), user_id="u1"
        )
        outcome = await analyst.handle(message, recorder)
        assert outcome.ok, outcome.error
        sent_tools = [t["name"] for t in fake_model.requests[0]["tools"]]
        assert sent_tools[:6] == [t.name for t in TOOLS] and sent_tools[6:] == [
            "list_files",
            "load_file",
            "create_schedule",
        ]
        assert all(r["tools"] == fake_model.requests[0]["tools"] for r in fake_model.requests)  # cacheable

        listing = fake_model.last_tool_results(1)[0]["content"]
        assert (
            f"s3://data-lake/sales/2024.csv ({len(SALES_CSV)} bytes)" in listing and "secret" not in listing
        )
        loads = fake_model.last_tool_results(2)
        assert "as '2024.csv'" in loads[0]["content"] and "Rows: 4" in loads[0]["content"]
        assert '"region" VARCHAR' in loads[0]["content"] and not loads[0].get("is_error")
        assert "as 'orders.json'" in loads[1]["content"] and "Rows: 2" in loads[1]["content"]
        assert loads[2]["is_error"] and "outside what I may read" in loads[2]["content"]
        assert loads[3]["is_error"] and "is 1.5 MB, over the 1.0 MB limit" in loads[3]["content"]
        assert not loads[4].get("is_error") and "as 'book.parquet'" in loads[4]["content"]
        assert "Rows: 3" in loads[4]["content"]

        ws = s3_settings.workspaces_dir / outcome.session_id
        assert (ws / "2024.csv").read_bytes() == SALES_CSV and not (ws / "payroll.csv").exists()
        assert not (ws / "huge.csv").exists()
        totals = pd.read_parquet(ws / "totals.parquet")
        assert totals.to_dict("records")[0] == {"region": "north", "total": 17}
        assert "Saved 1 row " in fake_model.last_tool_results(3)[1]["content"]
        assert "7" in fake_model.last_tool_results(3)[1]["content"]
        # the bot downloaded with its credentials; the sandbox's environment never had them
        zygote = analyst.parts.sandbox._proc.pid
        with open(f"/proc/{zygote}/environ", "rb") as f:
            environ = f.read()
        assert b"PATH=" in environ and b"moto-secret" not in environ and b"AWS_" not in environ
    finally:
        await analyst.close()


async def test_an_object_its_owner_typed_as_html_still_loads(s3_settings):
    """The check for a proxy's web page read an object's own content type (the uploader's to set):
    a CSV stored as text/html was refused with "check DATATHREAD_S3_ENDPOINT_URL"."""
    client = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    client.put_object(Bucket="data-lake", Key="sales/typed.csv", Body=SALES_CSV, ContentType="text/html")
    key, data = await S3Source.from_settings(s3_settings).fetch("s3://data-lake/sales/typed.csv")
    assert (key, data) == ("sales/typed.csv", SALES_CSV)


async def test_a_loaded_object_that_would_fill_the_workspace_is_refused(s3_settings, fake_model, recorder):
    """Files the bot writes itself (S3 objects, BigQuery results) skipped the workspace quota a step's
    own writes keep: 6.9 MB went into a 1 MB workspace."""
    from core.analyst import Analyst

    client = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    client.put_object(Bucket="data-lake", Key="sales/part.csv", Body=b"a\n" + b"1\n" * 300_000)  # 600 KB
    analyst = await Analyst.create(s3_settings.model_copy(update={"workspace_mb": 1}))
    try:
        fake_model.enqueue(
            tool("load_file", {"uri": "s3://data-lake/sales/part.csv", "save_as": "first"}),
            tool("load_file", {"uri": "s3://data-lake/sales/part.csv", "save_as": "second"}),
            text("Loaded what fitted."),
        )
        message = IncomingMessage(text="load both", surface="terminal", thread_key=("s3-full",), user_id="u1")
        outcome = await analyst.handle(message, recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    assert not fake_model.last_tool_results(1)[0].get("is_error")
    second = fake_model.last_tool_results(2)[0]
    assert second["is_error"] and "would take the thread's workspace past its 1 MB limit" in second["content"]
    workspace = s3_settings.workspaces_dir / outcome.session_id
    assert (workspace / "first.csv").exists() and not (workspace / "second.csv").exists()


async def test_an_s3_copy_never_takes_the_name_of_a_file_the_person_shared(s3_settings, fake_model, recorder):
    """A person shared `2024.csv` and `book.parquet`: the S3 object of the same name is loaded as
    `2024-2.csv`, and a workbook that would become `book.parquet` as `book-2.xlsx` (→ `book-2.parquet`);
    the model is told, and the person's files keep their bytes."""
    from core.analyst import Analyst
    from core.events import SharedFile

    mine = pd.DataFrame({"x": [1]}).to_parquet(index=False)
    analyst = await Analyst.create(s3_settings)
    try:
        fake_model.enqueue(
            tool("load_file", {"uri": "s3://data-lake/sales/2024.csv"}),
            tool("load_file", {"uri": "s3://data-lake/sales/book.xlsx"}),
            text("Loaded beside yours."),
        )
        files = (SharedFile("2024.csv", b"mine\n1\n"), SharedFile("book.parquet", mine))
        message = IncomingMessage(
            text="compare", surface="terminal", thread_key=("s3-kept",), user_id="u1", files=files
        )
        outcome = await analyst.handle(message, recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    csv, book = (fake_model.last_tool_results(n)[0]["content"] for n in (1, 2))
    assert "as '2024-2.csv'. Saved as '2024-2.csv': '2024.csv' is a file the person shared" in csv
    assert "Rows: 4" in csv
    assert "as 'book-2.parquet'. Saved as 'book-2.parquet': 'book.parquet' is a file the person" in book
    ws = s3_settings.workspaces_dir / outcome.session_id
    assert (ws / "2024.csv").read_bytes() == b"mine\n1\n" and (ws / "2024-2.csv").read_bytes() == SALES_CSV
    assert (ws / "book.parquet").read_bytes() == mine and (ws / "book-2.xlsx").exists()


async def test_an_s3_copy_never_lands_on_a_shared_csvs_utf8_copy(s3_settings, fake_model, recorder):
    """A CSV not in UTF-8 is read through a UTF-8 copy beside it, `NAME.utf8.csv`. A person shared
    `legacy.csv` (Windows-1252: the intake wrote `legacy.utf8.csv`) and `prices.utf8.csv`; loading
    `prices.csv` from S3, itself Windows-1252, wrote its copy over the person's `prices.utf8.csv`. Now
    it is loaded as `prices-2.csv` (copied to `prices-2.utf8.csv`), `legacy.utf8.csv` as
    `legacy.utf8-2.csv`, and the model is told the names it got."""
    from core.analyst import Analyst
    from core.events import SharedFile

    legacy = "city,n\nMünchen,1\nZürich,2\n".encode("cp1252")
    theirs = "item,price\ncafé,3\n".encode()
    s3 = boto3.client("s3", endpoint_url=ENDPOINT, region_name="us-east-1")
    s3.put_object(
        Bucket="data-lake", Key="sales/prices.csv", Body="item,price\ncrème,4\nthé,2\n".encode("cp1252")
    )
    s3.put_object(Bucket="data-lake", Key="sales/legacy.utf8.csv", Body=b"city,n\nParis,9\n")
    analyst = await Analyst.create(s3_settings)
    try:
        fake_model.enqueue(
            tool("load_file", {"uri": "s3://data-lake/sales/prices.csv"}),
            tool("load_file", {"uri": "s3://data-lake/sales/legacy.utf8.csv"}),
            text("Loaded beside yours."),
        )
        files = (SharedFile("legacy.csv", legacy), SharedFile("prices.utf8.csv", theirs))
        message = IncomingMessage(
            text="compare", surface="terminal", thread_key=("s3-utf8",), user_id="u1", files=files
        )
        outcome = await analyst.handle(message, recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    prices, copy = (fake_model.last_tool_results(n)[0]["content"] for n in (1, 2))
    ws = s3_settings.workspaces_dir / outcome.session_id
    assert (ws / "prices.utf8.csv").read_bytes() == theirs  # was the S3 file's UTF-8 copy
    assert (ws / "legacy.csv").read_bytes() == legacy
    assert (ws / "legacy.utf8.csv").read_text() == "city,n\nMünchen,1\nZürich,2\n"
    assert (
        "as 'prices-2.utf8.csv'. Saved as 'prices-2.utf8.csv': 'prices.utf8.csv' is a file the person"
        in prices
    )
    assert (ws / "prices-2.utf8.csv").read_text() == "item,price\ncrème,4\nthé,2\n"
    assert "as 'legacy.utf8-2.csv'. Saved as 'legacy.utf8-2.csv': 'legacy.utf8.csv' is a file the" in copy
