"""5. Context size: request bytes sent to the model (the JSON body the fake received) for a
300,000-row result against the same turn with a 1-row result, and across a 30-turn thread.
"""

from __future__ import annotations

import json

import pandas as pd

from bench.harness import BenchResult, Figure, analyst_env, ratio

PREVIEW_TARGET = 40_000


def size(body: dict) -> int:
    return len(json.dumps(body).encode())


async def _one_query_turn(analyst, fake, sql: str, key: str) -> tuple[int, str]:
    """Bytes of the request that carries the query's tool result, and the session id."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    fake.enqueue(tool("query_warehouse", {"sql": sql, "save_as": "result"}), text("Done."))
    before = len(fake.requests)
    msg = IncomingMessage(text="show me the flights", surface="api", thread_key=(key,))
    outcome = await analyst.handle(msg, _sink)
    if not outcome.ok:
        raise RuntimeError(outcome.error)
    return size(fake.requests[before + 1]), outcome.session_id


async def _sink(event) -> None:
    return None


async def _thread(analyst, fake, turns: int) -> list[int]:
    """Bytes of each turn's first request (the one carrying all history) over a long thread."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    sizes = []
    for n in range(turns):
        sql = f"SELECT * FROM flights WHERE day = {n % 28 + 1} LIMIT 200"
        code = f"import pandas as pd\nd = pd.read_parquet('t{n}.parquet')\nprint(d.describe())"
        fake.enqueue(
            tool("query_warehouse", {"sql": sql, "save_as": f"t{n}"}),
            tool("run_python", {"code": code}),
            text(f"Turn {n}: here is what the flights of that day look like. " * 5),
        )
        before = len(fake.requests)
        msg = IncomingMessage(
            text=f"question {n}: what about day {n % 28 + 1}?", surface="api", thread_key=("long",)
        )
        outcome = await analyst.handle(msg, _sink)
        if not outcome.ok:
            raise RuntimeError(outcome.error)
        sizes.append(size(fake.requests[before]))
    return sizes


async def run(*, quick: bool = False) -> BenchResult:
    """The preview's added bytes for 300k rows vs 1 row; turn 30's request vs turn 10's."""
    result = BenchResult("context", "5. Context size")
    rows = 30_000 if quick else 300_000
    turns = 12 if quick else 30
    async with analyst_env("context") as (analyst, fake, settings):
        big, sid = await _one_query_turn(analyst, fake, f"SELECT * FROM flights LIMIT {rows}", "big")
        small, _ = await _one_query_turn(analyst, fake, "SELECT * FROM flights LIMIT 1", "small")
        frame = pd.read_parquet(settings.workspaces_dir / sid / "result.parquet")
        csv_bytes = len(frame.to_csv(index=False).encode())
        sizes = await _thread(analyst, fake, turns)
    added = big - small
    result.add(
        Figure(
            name=f"context: bytes a {rows:,}-row result adds to the request",
            value=added / 1000,
            unit="KB",
            baseline=csv_bytes / 1000,
            baseline_name="the result as CSV",
            ratio=ratio(added, csv_bytes),
            target=f"< {PREVIEW_TARGET // 1000} KB",
            met=added < PREVIEW_TARGET,
        )
    )
    tenth = sizes[min(9, len(sizes) - 1)]
    last = sizes[-1]
    result.add(
        Figure(
            name=f"context: request of turn {turns} in one thread",
            value=last / 1000,
            unit="KB",
            baseline=tenth / 1000,
            baseline_name="turn 10",
            ratio=ratio(last, tenth),
            target="≤ 2× turn 10",
            met=last <= 2 * tenth,
        )
    )
    result.note(
        f"Request bytes are the JSON bodies the scripted Messages API received (tools + system + "
        f"messages). The {rows:,}-row turn's request is {big / 1000:.1f} KB vs {small / 1000:.1f} KB for "
        "the same turn with a 1-row result: the model gets the file name, row count, schema and a "
        "bounded preview."
    )
    checkpoints = [1, 5, 10, 20, 30]
    result.note(
        "Thread growth (first request of turn n, KB; each turn = a 200-row query + a Python describe() "
        "+ a short answer): "
        + ", ".join(f"turn {n}: {sizes[n - 1] / 1000:.1f}" for n in checkpoints if n <= len(sizes))
        + ". Older tool results are compacted, so growth per turn is the question, the calls and the answer."
    )
    if last > 2 * tenth:
        per_turn = (last - tenth) / max(1, turns - 10)
        result.note(
            f"Missed ≤ 2× turn 10: after compaction each turn still adds about {per_turn / 1000:.1f} KB "
            "(the question, the tool_use inputs with SQL and code, the shortened results and the "
            "answer), and `core.history.compact` keeps up to 40 turns (`max_turns`), so requests grow "
            "linearly until turn 40 and only then are bounded. Reaching it: a smaller `max_turns` "
            "(e.g. 10–15; the files stay in the workspace), or replacing turns older than the last few "
            "with a one-paragraph summary plus the workspace file list; shortening compacted "
            "tool_use inputs (old SQL/code) helps too."
        )
    return result
