"""Shutting down worker processes (`core/runner_workers.py`, `core/runner_worker.py`): real worker
processes speaking the real protocol, over their pipes or through a real redis-server's streams."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.runner import TurnJob
from core.runner_worker import lost_kind
from core.runner_workers import WorkerRunner, settings_values
from tests.core.stubborn_worker import KIND


@pytest.mark.parametrize("jobs_via", ["pipe", "redis"])
async def test_a_job_ignoring_its_cancellation_at_shutdown_is_told_once(settings, jobs_via, request):
    """A turn still running after its grace is told by its worker; the parent, killing that worker
    later, must not tell the same thread again."""
    if jobs_via == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()
        settings = settings.model_copy(update={"redis_url": server.url})
    # The worker tells its thread and releases the job within finish_s + grace_s (plus the telling);
    # the parent kills it after finish_s + 2 * grace_s. One grace of margin: 0.5 s was too little on a
    # loaded 2-core CI machine (the worker was killed between telling and releasing, and the parent
    # told again); the product's grace is 10 s.
    runner = WorkerRunner(settings, "tests.core.stubborn_worker", workers=1, finish_s=0.2, grace_s=1.0)
    told_here: list[dict] = []

    async def never_here(job: TurnJob) -> None:
        raise AssertionError("jobs run in the worker")

    async def tell_here(job: TurnJob) -> None:
        told_here.append(job.payload)

    runner.register(KIND, never_here)
    runner.register(lost_kind(KIND), tell_here)
    await runner.start()
    question = {"thread": "T1", "ignore_s": 60}
    await runner.submit(TurnJob(kind=KIND, payload=question))
    deadline = time.monotonic() + 30
    while not (settings.home / "started").exists():
        assert time.monotonic() < deadline, "the worker never ran the job"
        await asyncio.sleep(0.05)

    started = time.monotonic()
    await runner.stop()  # the worker outlives its grace with the job: it is killed
    assert time.monotonic() - started < 10  # the injected grace, not the default 10 s, bounded it

    told = settings.home / "told.jsonl"
    told_there = [json.loads(line) for line in told.read_text().splitlines()] if told.exists() else []
    [told_once] = told_there + told_here
    assert re.fullmatch(r"[0-9a-f]{8}", told_once.pop("error_id"))  # the id its log line carries
    assert told_once == question


WEB_PROCESS = """
import asyncio, json, sys
from core.config import load_settings
from core.runner import TurnJob
from core.runner_workers import WorkerRunner
from tests.core.stubborn_worker import KIND

async def main():
    runner = WorkerRunner(load_settings(_env_file=None, **json.loads(sys.argv[1])), sys.argv[2], workers=2)
    runner.register(KIND, None)
    await runner.start()
    for thread in ("T1", "T2"):  # one each: turns that would run on for a minute
        await runner.submit(TurnJob(kind=KIND, payload={"thread": thread, "ignore_s": 60}))
    print(json.dumps(runner.pids()), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_web_process_leaves_no_worker_and_no_template(settings):
    """The workers are the template's children, not the web process's: killed with SIGKILL (no clean-up
    of its own) while its workers run turns, the web process still takes its workers (which would
    otherwise finish and save answers nobody accounts for) and their template with it."""
    values = json.dumps(settings_values(settings))
    web = subprocess.Popen(
        [sys.executable, "-c", WEB_PROCESS, values, "tests.core.stubborn_worker"],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        workers = json.loads(web.stdout.readline())
        assert len(workers) == 2
        deadline = time.monotonic() + 30
        while not (settings.home / "started").exists():
            assert time.monotonic() < deadline, "the workers never ran their jobs"
            time.sleep(0.05)
        assert [Path(f"/proc/{pid}/comm").read_text().strip() for pid in workers] == ["turn-worker"] * 2
        template = {
            int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in workers
        }
        assert len(template) == 1 and template != {web.pid}  # forked by the template, not the web process
    finally:
        web.kill()
        web.wait()
    deadline = time.monotonic() + 10
    while any(map(_alive, [*workers, *template])):
        assert time.monotonic() < deadline, "a worker or the template outlived the web process"
        time.sleep(0.05)


async def test_a_stopping_worker_waits_briefly_for_redis_then_drops_the_call():
    """Any Redis call of a stopping worker — its read of the queue, and the queue's preparation, which
    comes after the worker says it is ready — is dropped when Redis does not answer; one that answers
    within the grace is kept (what a read took then runs)."""
    from core import runner_worker

    closed = asyncio.get_running_loop().create_future()
    closed.set_result(b"")  # stdin closed: the parent wants the worker to stop

    async def frozen() -> str:
        await asyncio.sleep(3600)
        return "never"

    async def quick() -> str:
        await asyncio.sleep(0.1)
        return "taken"

    started = time.monotonic()
    assert await runner_worker._unless_stopping(frozen(), closed) == (False, None)
    assert time.monotonic() - started < runner_worker.TAKE_GRACE_S + 1
    assert await runner_worker._unless_stopping(quick(), closed) == (True, "taken")
