"""Deleting a thread whose files bucket fails: `datathread forget` deletes its bucket objects first and
leaves the thread whole when they cannot go, and stops calling the bucket after its first failure;
`reset` waits a few seconds at most, queues what is left for the hourly sweep and says so. Before,
forget deleted the store rows first (the thread was then unknown, its objects unreachable), waited
~41 s for each thread against a hanging endpoint, and reset said the files were deleted after 41 s."""

from __future__ import annotations

import time

import boto3
import pytest
from moto import mock_aws

from bot.files import _presign_s3
from core import forget as forget_module
from core import s3_client
from core.forget import carry_out, forget_for_reset, plan_forget
from core.help import fresh_start
from core.thread_files import BUCKET_QUEUE, retry_bucket
from tests.fakes.black_hole import BlackHole

A, B = "sl-00000000000000000000000a", "sl-00000000000000000000000b"


@pytest.fixture
def hanging(settings, monkeypatch):
    """Settings whose files bucket accepts connections and never answers (reads time out in 0.3 s)."""
    monkeypatch.setattr(s3_client, "READ_TIMEOUT_S", 0.3)
    for name, value in (("AWS_ACCESS_KEY_ID", "x"), ("AWS_SECRET_ACCESS_KEY", "y")):
        monkeypatch.setenv(name, value)
    hole = BlackHole().start()
    yield (
        hole,
        settings.model_copy(
            update={"files_bucket": "dt-files/prod", "s3_endpoint_url": hole.url, "aws_region": "us-east-1"}
        ),
    )
    hole.stop()


async def seed(store) -> None:
    for sid in (A, B):
        await store.save_history(sid, [{"role": "user", "content": "jane@example.com"}])
        await store.update_meta(sid, surface="slack", channel_id="C1", team_id="T1", participant="U1")


async def test_forget_leaves_a_thread_whose_bucket_objects_stay_and_stops_calling_it(make_store, hanging):
    hole, settings = hanging
    store = make_store()
    await seed(store)
    plan = await plan_forget(store, channel="C1")
    started = time.monotonic()
    deleted = await carry_out(store, settings, plan)
    assert sorted(deleted.bucket_left) == [A, B] and not deleted.busy
    assert len(hole.accepted_at) == s3_client.TRIES  # the first thread's tries; the second never called
    assert time.monotonic() - started < 10
    for sid in (A, B):  # kept whole: the same command finds them again
        assert await store.load_history(sid) and await store.get_meta(sid)
    assert (await plan_forget(store, channel="C1")).sessions == [A, B]


async def test_reset_queues_what_the_bucket_did_not_delete_and_says_so(make_store, hanging, monkeypatch):
    hole, settings = hanging
    monkeypatch.setattr(forget_module, "RESET_BUCKET_S", 1.0)
    store = make_store()
    await seed(store)
    started = time.monotonic()
    assert await forget_for_reset(store, settings, A) is False
    assert time.monotonic() - started < 3  # it waited 41 s
    assert await store.load_history(A) == []  # the rest went
    assert [r["session_id"] for r in await store.list_records(BUCKET_QUEUE)] == [A]
    said = fresh_start(settings, files_gone=False)
    assert "deleted this conversation's history and files;" not in said and "within the hour" in said

    with mock_aws():  # the bucket answers again: the hourly sweep deletes the objects and the record
        working = settings.model_copy(update={"s3_endpoint_url": None})
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="dt-files")
        _presign_s3(working, A, "people.csv", b"name\nJane\n")
        _presign_s3(working, B, "kept.csv", b"name\nBo\n")
        assert await retry_bucket(working, store) == [A]
        left = [o["Key"] for o in s3.list_objects_v2(Bucket="dt-files").get("Contents", [])]
        assert [k.split("/")[2] for k in left] == [B]
    assert await store.list_records(BUCKET_QUEUE) == []
