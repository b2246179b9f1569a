"""BigQuery query jobs: the free dry run, the billed run within the step's time limit, and cancelling a
job nobody waits for any more.

A job runs in a daemon thread (`off_loop`), which the caller abandons when it stops waiting — at its
deadline, or when the turn is cancelled (Stop, Ctrl-C, an eval question's time limit). BigQuery goes on
running (and billing) an abandoned job: it was cancelled only when the job's own timeout fired, up to
DATATHREAD_STEP_TIMEOUT later, while its thread kept polling. So the job is held in a `Handle` the
caller shares: whoever stops waiting — the caller, or the thread when its insert returns after that —
sends jobs.cancel for it, from a daemon thread of its own with each call bounded, so a Stop never waits
on BigQuery. (The job's id cannot be chosen beforehand: the client will not restart a job with a
custom id, and `job_retry` restarts a job that failed for a transient reason.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from core.bigquery_client import NoAnswer, bounded, off_loop
from core.bigquery_errors import MAX_RESULT_ROWS, ResultTooLarge, is_timeout

CANCEL_S = 10.0  # jobs.cancel and its retries, in a thread nobody waits for


@dataclass
class JobSpec:
    """What a query job is run with (besides its SQL): the client and its job configuration."""

    client: Any
    default_dataset: str | None = None
    labels: dict = field(default_factory=dict)

    def config(self, **kwargs):
        from google.cloud import bigquery

        config = bigquery.QueryJobConfig(**kwargs)
        if self.default_dataset:
            config.default_dataset = self.default_dataset
        return config


def dry_run(spec: JobSpec, sql: str, limit_s: float):
    """BigQuery's verdict on `sql` without running it (free): statement type, tables, bytes."""
    config = spec.config(dry_run=True, use_query_cache=False)
    return spec.client.query(sql, job_config=config, job_retry=None, retry=bounded(limit_s), timeout=limit_s)


@dataclass
class Handle:
    """The job of one run, once inserted, and whether its caller stopped waiting for it."""

    job: Any = None
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def inserted(self, job, client) -> bool:
        """Hold `job`; False (and the job cancelled) when the caller has stopped waiting already."""
        with self.lock:
            self.job, stopped = job, self.stopped
        if stopped:
            cancel(client, job.job_id, job.location)
        return not stopped

    def stop(self, client) -> None:
        """The caller stops waiting: cancel the job if it is in, else the thread does when it is."""
        with self.lock:
            self.stopped, job = True, self.job
        if job is not None:
            threading.Thread(
                target=cancel, args=(client, job.job_id, job.location), daemon=True, name="bigquery"
            ).start()


async def run_job(spec: JobSpec, sql: str, maximum_bytes_billed: int, limit_s: float, grace_s: float):
    """(job, rows) of `sql` run within `limit_s` (given up `grace_s` later if BigQuery drips); a job
    whose caller stops waiting — cancelled, or given up — is cancelled at BigQuery too."""
    handle = Handle()
    try:
        return await off_loop(
            _run, spec, sql, handle, maximum_bytes_billed, limit_s, deadline_s=limit_s + grace_s
        )
    except (asyncio.CancelledError, NoAnswer):
        handle.stop(spec.client)
        raise


def _run(spec: JobSpec, sql: str, handle: Handle, maximum_bytes_billed: int, limit_s: float):
    config = spec.config(
        maximum_bytes_billed=maximum_bytes_billed,
        labels=spec.labels,
        job_timeout_ms=int(limit_s * 1000),
        use_query_cache=True,
    )
    # Every call (and its retries) within the step's time limit: google's defaults retry for 600 s.
    # No job_retry on the insert: given one, the client wraps the insert in its own retry of a
    # fixed 600 s; restarts of a failed job still come through `result` (with the insert as is).
    deadline = time.monotonic() + limit_s

    def left() -> float:
        return max(deadline - time.monotonic(), 0.1)

    client = spec.client
    job = client.query(sql, job_config=config, retry=bounded(left()), timeout=left(), job_retry=None)
    if not handle.inserted(job, client):
        raise asyncio.CancelledError  # nobody waits: it was cancelled
    try:
        rows = job.result(timeout=left(), retry=bounded(left()), job_retry=bounded(left(), job=True))
    except Exception as exc:
        if is_timeout(exc):
            cancel(client, job.job_id, job.location)  # stop the slots: it would run (and bill) on
        raise
    if (rows.total_rows or 0) > MAX_RESULT_ROWS:
        raise ResultTooLarge(rows.total_rows, int(job.total_bytes_billed or 0))
    return job, rows


def cancel(client, job_id: str, location: str | None = None) -> None:
    """jobs.cancel, bounded; a failure is no one's business (the job's own timeout ends it anyway)."""
    with contextlib.suppress(Exception):
        client.cancel_job(job_id, location=location, retry=bounded(CANCEL_S), timeout=CANCEL_S)
