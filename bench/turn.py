"""3. Turn overhead: a scripted four-step turn (query → python chart → two attachments → answer) with
zero model latency, end to end through the core Analyst and through Slack (`POST /slack/events` to
the answer in the fake Slack), and where the time goes.
"""

from __future__ import annotations

import asyncio
import time

from bench.harness import (
    BenchResult,
    Events,
    Figure,
    analyst_env,
    answers_by_thread,
    median,
    ratio,
    time_model,
)

DELAYS = (
    "SELECT carrier, avg(dep_delay) AS avg_delay, count(*) AS n FROM flights "
    "GROUP BY carrier ORDER BY avg_delay DESC"
)
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.title('Average departure delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
"""
TARGET_S = 1.0


def script() -> list[dict]:
    """The four steps and the answer, as scripted model replies."""
    from tests.fakes.anthropic_api import text, tool

    return [
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Delays"},
            more=[("attach_file", {"path": "delays.csv"})],
        ),
        text("**F9** had the highest average departure delay."),
    ]


async def _core_turns(repeats: int) -> tuple[list[float], list[dict]]:
    """Wall time per turn through `Analyst.handle`, and a breakdown of each."""
    from core.events import IncomingMessage

    walls, parts = [], []
    async with analyst_env("turn") as (analyst, fake, _):
        timed = time_model(analyst)
        for n in range(repeats + 1):
            fake.enqueue(*script())
            timed.calls.clear()
            sink = Events()
            msg = IncomingMessage(
                text="which carriers were most delayed? chart it", surface="api", thread_key=(f"t{n}",)
            )
            started = time.perf_counter()
            outcome = await analyst.handle(msg, sink)
            wall = time.perf_counter() - started
            if not outcome.ok or len(outcome.artifacts) != 2:
                raise RuntimeError(f"turn failed: {outcome.error}")
            if n == 0:
                continue  # warm-up (first parquet write, first matplotlib figure in the server)
            steps = {s.tool + str(i): s.duration_s for i, s in enumerate(outcome.steps)}
            walls.append(wall)
            parts.append(
                {
                    "steps": sum(steps.values()),
                    "per_step": steps,
                    "model": sum(timed.calls),
                    "model_calls": len(timed.calls),
                    "stats_duration": outcome.stats.duration_s,
                }
            )
    return walls, parts


async def _slack_turns(repeats: int) -> tuple[list[float], list[float]]:
    """(answer time, ack time) per turn through `datathread serve`'s Slack route and the fake Slack."""
    from bench.harness import bench_settings, make_home, recording_slack, temp_dir
    from tests.bot.slack_harness import mention, serve
    from tests.fakes.anthropic_api import FakeAnthropic

    answers, acks = [], []
    with temp_dir("turn-slack") as tmp:
        fake, api = FakeAnthropic().start(), recording_slack()
        try:
            settings = bench_settings(make_home(tmp), fake.url)
            async with serve(settings, api) as h:
                for n in range(repeats + 1):
                    fake.enqueue(*script())
                    ts = f"1710000{n:03d}.000100"
                    started = time.perf_counter()
                    resp = await h.event(mention("which carriers were most delayed? chart it", ts=ts))
                    ack = time.perf_counter() - started
                    if resp.status_code != 200:
                        raise RuntimeError(f"Slack ack was HTTP {resp.status_code}")
                    await wait_answers(api, {ts})
                    if n:
                        answers.append(time.perf_counter() - started)
                        acks.append(ack)
                    await h.drain()
        finally:
            fake.stop()
            api.stop()
    return answers, acks


async def wait_answers(api, threads: set[str], *, timeout: float = 60) -> dict[str, int]:
    """Until every thread in `threads` has its answer in the fake Slack; returns answers per thread."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = answers_by_thread(api)
        if threads <= set(counts):
            return counts
        await asyncio.sleep(0.005)
    raise TimeoutError(f"{len(threads - set(answers_by_thread(api)))} thread(s) unanswered after {timeout} s")


async def run(*, quick: bool = False) -> BenchResult:
    """Medians of the core and Slack turn times; the core breakdown into steps, model and the rest."""
    result = BenchResult("turn", "3. Turn overhead")
    repeats = 2 if quick else 7
    walls, parts = await _core_turns(repeats)
    wall = median(walls)
    steps = median([p["steps"] for p in parts])
    model = median([p["model"] for p in parts])
    target = f"< {TARGET_S:g} s"
    result.add(
        Figure(
            name="turn: four-step turn, core Analyst",
            value=wall,
            unit="s",
            baseline=steps,
            baseline_name="time inside the four steps",
            ratio=ratio(wall, steps),
            target=target,
            met=wall < TARGET_S,
        )
    )
    per_step = {k: median([p["per_step"][k] for p in parts]) for k in parts[0]["per_step"]}
    result.note(
        f"Core turn (median of {repeats}): {wall * 1000:.0f} ms = steps {steps * 1000:.0f} ms "
        f"({', '.join(f'{k[:-1]} {v * 1000:.0f}' for k, v in per_step.items())}) + "
        f"{parts[0]['model_calls']} model round trips {model * 1000:.0f} ms (SDK + loopback fake, zero model "
        f"latency) + loop/store/events {max(0.0, wall - steps - model) * 1000:.0f} ms. Steps are timed "
        "inside the sandbox child (StepRecord.duration_s); the rest of each step's round trip (fork, "
        "isolation, socket) falls in the loop share."
    )
    answers, acks = await _slack_turns(repeats)
    answer = median(answers)
    result.add(
        Figure(
            name="turn: four-step turn, through Slack (event → answer posted)",
            value=answer,
            unit="s",
            baseline=wall,
            baseline_name="the same turn, core only",
            ratio=ratio(answer, wall),
            target=target,
            met=answer < TARGET_S,
        )
    )
    result.note(
        f"Through Slack (median of {repeats}): ack {median(acks) * 1000:.0f} ms, answer final "
        f"{answer * 1000:.0f} ms after the POST; the Slack share ({(answer - wall) * 1000:.0f} ms) is "
        "streaming progress (chat.startStream/appendStream/stopStream), two file uploads "
        "(getUploadURLExternal + upload + completeUploadExternal each)."
    )
    if wall >= TARGET_S:
        result.note(
            "Missed 1 s in the core: the steps dominate (each forks a child and starts DuckDB or "
            "matplotlib; the first `df.plot` in a child imports pandas' matplotlib backend, which the "
            "fork server does not pre-import). Reaching it: pre-import `pandas.plotting._matplotlib` "
            "and draw one throwaway figure in `core/zygote.py`; measure on an idle machine."
        )
    if answer >= TARGET_S:
        result.note(
            "Missed 1 s through Slack: the Slack share is ~16 Web API calls awaited one after another on "
            "the turn's path (a stream append per step start and finish, three calls per upload, the "
            "stream stop). Reaching it: send progress appends without awaiting them in the turn "
            "(a queue drained by one task, coalescing start+finish of fast steps) and upload the two "
            "files concurrently; the answer then waits only for the uploads and stopStream."
        )
    return result
