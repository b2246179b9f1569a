"""`datathread doctor`'s BigQuery check over the scripted REST API: what it tells the admin, who can fix
a role or a setting (the model's advice — "use another table from list_tables" — is not theirs)."""

from __future__ import annotations

import responses

from bot.doctor_checks import check_warehouse
from tests.core.bigquery_parts import bq_settings
from tests.fakes.bigquery_api import API, Answer, FakeBigQuery, FakeTable

JOBS_CREATE = (
    "Access Denied: Project bill: User does not have bigquery.jobs.create permission in project bill."
)


def fake() -> FakeBigQuery:
    bq = FakeBigQuery(API)
    bq.add_table(FakeTable("bill", "shop", "orders", [{"name": "id", "type": "INTEGER"}], [[1]]))
    return bq


async def check(tmp_path, bq: FakeBigQuery, **settings):
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        bq.register(mock)
        return await check_warehouse(bq_settings(tmp_path, **settings))


async def test_a_configured_dataset_that_does_not_exist_is_a_warning_naming_it(tmp_path):
    bq = fake()
    bq.on_query("SELECT 1", Answer(rows=[[1]], bytes_processed=0))
    said = await check(
        tmp_path, bq, bigquery_datasets="bill.shop,bill.gone", channel_datasets="C1=bill.old.t"
    )
    assert said.status == "warn", said
    assert said.detail.startswith("bigquery, project bill (dry run ok), but bill.gone, bill.old of ")
    assert "does not exist or the service account may not see it" in said.detail
    ok = await check(tmp_path, bq, bigquery_datasets="bill.shop,bill.sales_*")
    assert ok.status == "ok" and ok.detail == "bigquery, project bill (dry run ok)"


async def test_no_right_to_run_jobs_is_said_as_the_grant_an_admin_makes(tmp_path):
    bq = fake()
    bq.on_query("SELECT 1", Answer(error=(403, "accessDenied", JOBS_CREATE)))
    said = await check(tmp_path, bq)
    assert said.status == "fail"
    assert "may not run queries in project bill: an admin must grant it roles/bigquery.jobUser" in said.detail
    assert "list_tables" not in said.detail and "another table" not in said.detail


async def test_datasets_it_could_not_check_in_time_are_a_warning_not_a_silent_ok(tmp_path):
    """Up to 50 datasets.get one after another inside a bound whose timeout was suppressed: 30 datasets
    at 0.25 s a call never reached the one that is gone, and a 503 on one ended the check — both "ok"."""
    bq = fake()
    bq.on_query("SELECT 1", Answer(rows=[[1]], bytes_processed=0))
    for d in range(29):
        bq.add_table(FakeTable("bill", f"ds{d:02}", "t", [{"name": "id", "type": "INTEGER"}], [[1]]))
    bq.latency = 0.2
    names = ",".join([f"bill.ds{d:02}" for d in range(29)] + ["bill.zz_gone"])
    said = await check(tmp_path, bq, bigquery_datasets=names)
    assert said.status == "warn" and "but bill.zz_gone of " in said.detail, said
    bq.latency = 0
    bq.dataset_errors["bill.ds03"] = (503, "backendError", "Error encountered during execution.")
    said = await check(tmp_path, bq, bigquery_datasets="bill.ds01,bill.ds03")
    assert said.status == "warn", said
    assert said.detail.endswith(
        "but could not check 1 of the 2 configured datasets (no answer in time, or an error)"
    )


async def test_a_configured_camelcase_dataset_is_checked_by_its_own_name(tmp_path):
    """BigQuery's dataset names are case-sensitive: `bill.Analytics` was asked for as `bill.analytics`
    and reported missing; a dataset spelled in another case than BigQuery's is missing indeed."""
    bq = fake()
    bq.on_query("SELECT 1", Answer(rows=[[1]], bytes_processed=0))
    bq.add_table(FakeTable("bill", "Analytics", "Events", [{"name": "id", "type": "INTEGER"}], [[1]]))
    bq.add_table(FakeTable("bill", "Sales_Data", "Orders", [{"name": "id", "type": "INTEGER"}], [[1]]))
    ok = await check(tmp_path, bq, bigquery_datasets="bill.Analytics", channel_datasets="C1=bill.Sales_Data")
    assert ok.status == "ok", ok
    said = await check(tmp_path, bq, bigquery_datasets="bill.Analytics,bill.sales_data")
    assert said.status == "warn" and "but bill.sales_data of " in said.detail, said
