"""A stand-in turn worker for tests/core/test_runner_workers.py: the real `Worker` and pipe protocol of
`bot/turn_worker.py` (without building the bot), running one job kind whose handler ignores its
cancellation — a turn stuck past the shutdown's grace. It touches `started` in the home when the job
runs, and its lost handler appends the job's payload to `told.jsonl` there, so the test counts the
threads told in this process as well as in the parent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from core.runner import LocalRunner, TurnJob
from core.runner_redis import RedisJobs
from core.runner_worker import Worker, die_with_parent, lost_kind

KIND = "stubborn"


async def run(first: dict, out) -> None:
    home = Path(first["settings"]["home"])

    async def stubborn(job: TurnJob) -> None:
        (home / "started").touch()
        end = time.monotonic() + job.payload["ignore_s"]
        while (left := end - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.CancelledError):  # told to stop: carries on regardless
                await asyncio.sleep(left)

    async def tell(job: TurnJob) -> None:
        with open(home / "told.jsonl", "a") as f:
            f.write(json.dumps(job.payload) + "\n")

    runner = LocalRunner()
    runner.register(KIND, stubborn)
    runner.register(lost_kind(KIND), tell)
    worker = Worker(runner, out, slots=1, finish_s=first["finish_s"], grace_s=first["grace_s"])
    worker.send({"ready": True})
    reader = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer
    )
    if first["redis"]:
        jobs = RedisJobs(first["settings"]["redis_url"])
        try:
            await worker.serve_redis(jobs, first["consumer"], reader, lost_after_s=first["lost_after_s"])
        finally:
            await jobs.close()
    else:
        await worker.serve_pipe(reader)


def main() -> None:
    die_with_parent()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    chunks = []  # the settings line, byte by byte: a buffered read could swallow the first job with it
    while (byte := os.read(0, 1)) and byte != b"\n":
        chunks.append(byte)
    asyncio.run(run(json.loads(b"".join(chunks)), out))


if __name__ == "__main__":
    main()
