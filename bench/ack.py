"""1. Slack ack latency under load: hundreds of signed app_mention events, tens in flight, into
`datathread serve` (a subprocess on a loopback port; the model answers at once, Slack is the fake Web
API) against a bare Bolt app served the same way under the same load; and every event answered
exactly once (answers counted per thread in the fake Slack).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.harness import (
    ROOT,
    BenchResult,
    Figure,
    answers_by_thread,
    make_home,
    median,
    percentile,
    recording_slack,
    temp_dir,
)

SECRET = "bench-signing-secret-123456"
P99_MS, TIMES_BARE = 300.0, 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(cmd: list[str], env: dict, cwd: Path, port: int, log: Path) -> Iterator[str]:
    """A server subprocess, ready (/healthz 200) within 120 s; killed (its group) afterwards."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise TimeoutError("server not ready after 120 s")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


async def load(url: str, threads: list[str], *, in_flight: int) -> list[float]:
    """POST one signed app_mention per thread, `in_flight` at a time; ack times in ms (all must be 200)."""
    from tests.bot.slack_harness import event_body, mention, sign

    gate = asyncio.Semaphore(in_flight)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)

    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:

        async def one(ts: str) -> float:
            body = json.dumps(event_body(mention(f"how many flights? ({ts})", ts=ts)))
            async with gate:
                headers = {"content-type": "application/json", **sign(body, secret=SECRET)}
                started = time.perf_counter()
                resp = await http.post("/slack/events", content=body, headers=headers)
                elapsed = (time.perf_counter() - started) * 1000
            if resp.status_code != 200:
                raise RuntimeError(f"ack was HTTP {resp.status_code}: {resp.text[:200]}")
            return elapsed

        return list(await asyncio.gather(*(one(ts) for ts in threads)))


async def wait_all(api, threads: set[str], timeout: float) -> dict[str, int]:
    """Until every thread has an answer (or the timeout), then a short grace for duplicates."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not threads <= set(answers_by_thread(api)):
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    return answers_by_thread(api)


def _env(extra: dict) -> dict:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    return {**keep, "PYTHONPATH": str(ROOT), **extra}


async def run(*, quick: bool = False) -> BenchResult:
    """p50/p99 ack of `datathread serve` vs a bare Bolt app; answers per thread."""
    from tests.fakes.anthropic_api import FakeAnthropic

    result = BenchResult("ack", "1. Slack ack latency under load")
    events, in_flight, rounds = (60, 10, 1) if quick else (300, 20, 2)
    bot_acks, bare_acks, answers, threads_all = [], [], {}, set()
    with temp_dir("ack") as tmp:
        fake, api = FakeAnthropic().start(), recording_slack()
        slack_env = {
            "SLACK_BOT_TOKEN": "xoxb-bench-000000",
            "SLACK_SIGNING_SECRET": SECRET,
            "DATATHREAD_SLACK_API_URL": api.url,
        }
        bot_env = _env(
            {
                **slack_env,
                "ANTHROPIC_API_KEY": "sk-ant-bench-key-000000",
                "ANTHROPIC_BASE_URL": fake.url,
                "DATATHREAD_HOME": str(make_home(tmp)),
                "DATATHREAD_USER_TURNS_PER_HOUR": "0",
                "DATATHREAD_CHANNEL_TURNS_PER_HOUR": "0",
            }
        )
        bot_cmd = [str(Path(sys.executable).with_name("datathread")), "serve", "--log-level", "WARNING"]
        bare_cmd = [sys.executable, "-m", "bench.bare_bolt"]
        try:
            for r in range(rounds):
                port = free_port()
                with server(
                    [*bare_cmd, "--port", str(port)], _env(slack_env), tmp, port, tmp / "bare.log"
                ) as url:
                    await load(
                        url, [f"1720{r}00000.{i:06d}" for i in range(10)], in_flight=in_flight
                    )  # warm-up
                    bare_acks += await load(
                        url, [f"1720{r}10000.{i:06d}" for i in range(events)], in_flight=in_flight
                    )
                port = free_port()
                cmd = [*bot_cmd, "--port", str(port)]
                with server(cmd, bot_env, tmp, port, tmp / "bot.log") as url:
                    threads = [f"1730{r}10000.{i:06d}" for i in range(events)]
                    bot_acks += await load(url, threads, in_flight=in_flight)
                    threads_all |= set(threads)
                    answers = await wait_all(api, threads_all, timeout=300)
        finally:
            fake.stop()
            api.stop()
    _report(result, bot_acks, bare_acks, answers, threads_all, events, in_flight, rounds)
    return result


def _report(result, bot_acks, bare_acks, answers, threads, events, in_flight, rounds) -> None:
    p50, p99 = median(bot_acks), percentile(bot_acks, 99)
    b50, b99 = median(bare_acks), percentile(bare_acks, 99)
    result.add(
        Figure(
            name="ack: p50 ack, datathread serve",
            value=p50,
            unit="ms",
            baseline=b50,
            baseline_name="bare Bolt app",
            ratio=p50 / b50,
        )
    )
    result.add(
        Figure(
            name="ack: p99 ack, datathread serve",
            value=p99,
            unit="ms",
            baseline=b99,
            baseline_name="bare Bolt app",
            ratio=p99 / b99,
            target=f"≤ {P99_MS:g} ms and ≤ {TIMES_BARE:g}× bare",
            met=p99 <= P99_MS and p99 <= TIMES_BARE * b99,
        )
    )
    once = sum(1 for t in threads if answers.get(t) == 1)
    result.add(
        Figure(
            name="ack: events answered exactly once",
            value=once,
            unit=f"of {len(threads)}",
            target="all",
            met=once == len(threads),
        )
    )
    missing = sum(1 for t in threads if t not in answers)
    extra = sum(1 for t in threads if answers.get(t, 0) > 1)
    result.note(
        f"{rounds} round(s) of {events} signed app_mention events (each a new thread), {in_flight} in "
        "flight, against each server in turn (a subprocess on a loopback port, uvicorn, log level "
        "warning); the turns run in the bot's process while later events are acked, the model "
        f"answers at once. Unanswered: {missing}, answered more than once: {extra}. Percentiles are "
        "nearest-rank over all events of all rounds."
    )
    if p99 > P99_MS or p99 > TIMES_BARE * b99:
        result.note(
            "Missed the p99 target: the ack itself does no I/O any more (signature check, pure filters, "
            "a job submit; de-dup moved into the job), so what remains is the event loop and 2 CPU cores "
            "shared with the up-to-32 turns the burst starts; the bare app's own p99 in this run shows how "
            "much of the tail is the machine. History: 2,455 ms p99 with store writes in the ack and a new "
            "HTTP session per Slack call; 450 ms after removing both (at 8 concurrent turns). Reaching "
            "300 ms: run turns outside the web process (the Modal runner's `.spawn()` does; a worker-"
            "process LocalRunner would locally), or lower DATATHREAD_MAX_CONCURRENT_TURNS on small hosts."
        )
