"""A query job nobody waits for any more is cancelled at BigQuery, and a result that ran but could not be
brought over is said to have run — through the real client, over the scripted REST API."""

from __future__ import annotations

import asyncio
import time

import pytest

from core import warehouse_bigquery
from tests.core import bigquery_parts
from tests.core.bigquery_parts import ORDERS, ORDERS_SCHEMA
from tests.fakes.bigquery_api import Answer, qctx

fake_bq, parts = bigquery_parts.fake_bq, bigquery_parts.parts  # the shared fixtures


def polls(fake) -> int:
    return sum(1 for _, path, _ in fake.calls if "/queries/" in path or "/jobs/" in path)


async def test_a_stopped_turn_cancels_its_running_job_at_once(parts, fake_bq):
    """Stop / Ctrl-C cancelled the turn's task, but jobs.cancel went only when the step's own time limit
    fired (28 s later in the trial, up to DATATHREAD_STEP_TIMEOUT), while its thread kept polling."""
    warehouse, _, store, _ = parts
    running = fake_bq.on_query(
        ORDERS, Answer(ORDERS_SCHEMA, [], referenced=["bill.shop.orders"], pending=True)
    )
    task = asyncio.create_task(warehouse.query(ORDERS, None, qctx(store, timeout_s=60.0)))
    for _ in range(200):
        if polls(fake_bq) >= 2:
            break
        await asyncio.sleep(0.02)
    job_id = fake_bq.runs()[0]["jobReference"]["jobId"]
    stopped = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - stopped < 0.5  # the Stop never waits on BigQuery
    for _ in range(100):
        if fake_bq.cancelled:
            break
        await asyncio.sleep(0.02)
    assert fake_bq.cancelled == [job_id], "jobs.cancel was not sent when the turn stopped"
    assert time.monotonic() - stopped < 2
    await asyncio.sleep(1.5)  # the job ended, stopped: its thread stops polling
    made = polls(fake_bq)
    await asyncio.sleep(1.0)
    assert polls(fake_bq) == made
    running.pending = False


async def test_a_result_too_slow_to_download_is_said_to_have_run_and_billed(parts, fake_bq, monkeypatch):
    """It said "BigQuery did not answer within 120 s. Try again shortly." of a job that had run and
    billed: the model ran it again, and it billed again."""
    monkeypatch.setattr(warehouse_bigquery, "LISTING_S", 0.5)
    warehouse, _, store, _ = parts
    rows = [[i, 1.0, "paid"] for i in range(40)]
    fake_bq.on_query(
        ORDERS, Answer(ORDERS_SCHEMA, rows, 4 * 10**9, page_size=1, referenced=["bill.shop.orders"])
    )
    fake_bq.latency = 0.05  # 40 pages of one row: 2 s to download
    result = await warehouse.query(ORDERS, None, qctx(store))
    assert not result.ok
    assert result.error.startswith(
        "BigQuery ran the query (4.0 GB billed), but its result did not download"
    ), result.error
    assert "Do not run it again as it is" in result.error and "Try again" not in result.error
