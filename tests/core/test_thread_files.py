"""A thread's files go together: when the idle sweep removes its workspace, its attachment copies (the
terminal's `attachments/<session>/`) and the objects its download links put in the files bucket go too.
Before, the sweep removed the workspace only; attachment copies and bucket objects stayed for good."""

from __future__ import annotations

import os
import time

import boto3
from moto import mock_aws

from bot.files import _presign_s3
from core.sandbox_factory import open_threads
from tests.fakes.workspaces import DAY, aged_workspace


def aged(path, days: float) -> None:
    stamp = time.time() - days * DAY
    for p in [*path.rglob("*"), path]:
        os.utime(p, (stamp, stamp), follow_symlinks=False)


def keys(s3) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket="dt-files").get("Contents", []))


async def test_the_sweep_takes_attachments_and_bucket_objects_with_the_workspace(settings):
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="dt-files")
        settings = settings.model_copy(update={"files_bucket": "dt-files/prod", "aws_region": "us-east-1"})
        aged_workspace(settings.workspaces_dir, "te-gone", age_days=45)
        aged_workspace(settings.workspaces_dir, "te-kept", age_days=1)
        attachments = settings.home.resolve() / "attachments"
        for sid, days in (("te-gone", 45), ("te-kept", 1), ("te-orphan", 45), ("te-young", 1)):
            (attachments / sid).mkdir(parents=True)
            (attachments / sid / "chart.png").write_bytes(b"png")
            aged(attachments / sid, days)
        _presign_s3(settings, "te-gone", "people.csv", b"name,email\nJane,jane@example.com\n")
        _presign_s3(settings, "te-kept", "delays.csv", b"carrier\nF9\n")
        async with open_threads(settings) as threads:
            assert await threads.forget_idle_workspaces() == ["te-gone"]
        assert sorted(os.listdir(attachments)) == ["te-kept", "te-young"]  # an idle orphan goes too
        assert [k.split("/")[2] for k in keys(s3)] == ["te-kept"]
