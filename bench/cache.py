"""6. Prompt-cache effectiveness: the share of each request's input that a prompt cache could serve,
computed from the real request bytes (not the fake's synthetic usage numbers).

The API caches the prefix (tools → system → messages) up to each `cache_control` breakpoint. Request
N+1 can read the longest prefix that ends at one of request N's breakpoints and is byte-identical in
N+1 (cache_control markers themselves do not count). Share = those bytes / request N+1's bytes;
tokens are approximated as characters / 4.
"""

from __future__ import annotations

import copy
import json

from bench.harness import BenchResult, Figure, analyst_env, median

TARGET = 0.80


def segments(body: dict) -> list[tuple[str, bool]]:
    """The request as cache-ordered segments: (canonical JSON without cache_control, has breakpoint)."""
    out = []

    def add(kind: str, block: dict) -> None:
        clean = copy.deepcopy(block)
        marked = clean.pop("cache_control", None) is not None
        out.append((kind + json.dumps(clean, sort_keys=True), marked))

    for spec in body.get("tools", []):
        add("tool:", spec)
    system = body.get("system", [])
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        add("system:", block)
    for message in body["messages"]:
        content = message["content"]
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            add(message["role"] + ":", block)
    return out


def cached_bytes(previous: dict, current: dict) -> int:
    """Bytes of `current` a cache written by `previous` can serve (longest matching breakpoint prefix)."""
    prev, cur = segments(previous), segments(current)
    best, total = 0, 0
    for i, (seg, marked) in enumerate(prev):
        if i >= len(cur) or cur[i][0] != seg:
            break
        total += len(seg)
        if marked:
            best = total
    return best


def static_bytes(body: dict) -> int:
    """Bytes of tools + system only (what caching just the fixed prefix would serve)."""
    return sum(len(s) for s, _ in segments(body) if s.startswith(("tool:", "system:")))


async def run(*, quick: bool = False) -> BenchResult:
    """Cacheable share per request of a five-step turn, after the first request."""
    from core.events import IncomingMessage
    from tests.fakes.anthropic_api import text, tool

    result = BenchResult("cache", "6. Prompt-cache effectiveness")
    script = [
        tool("list_tables"),
        tool("describe_table", {"table": "flights"}),
        tool(
            "query_warehouse",
            {"sql": "SELECT carrier, count(*) AS n FROM flights GROUP BY carrier", "save_as": "c"},
        ),
        tool("run_sql", {"sql": "SELECT * FROM 'c.parquet' ORDER BY n DESC LIMIT 5", "save_as": "top"}),
        tool("run_python", {"code": "import pandas as pd\nprint(pd.read_parquet('top.parquet'))"}),
        text("The five busiest carriers are UA, B6, EV, DL and AA."),
    ]
    shares, statics, sizes = [], [], []
    async with analyst_env("cache") as (analyst, fake, _):
        for turn in range(1 if quick else 3):
            fake.enqueue(*script)
            before = len(fake.requests)
            msg = IncomingMessage(
                text="which carriers fly the most?", surface="api", thread_key=(f"c{turn}",)
            )
            outcome = await analyst.handle(msg, _sink)
            if not outcome.ok or len(outcome.steps) != 5:
                raise RuntimeError(f"five-step turn failed: {outcome.error}")
            bodies = fake.requests[before:]
            for prev, cur in zip(bodies, bodies[1:], strict=False):
                total = sum(len(s) for s, _ in segments(cur))
                shares.append(cached_bytes(prev, cur) / total)
                statics.append(static_bytes(cur) / total)
                sizes.append(total)
    share, static = median(shares), median(statics)
    result.add(
        Figure(
            name="cache: cacheable share of input, requests 2–6 of a five-step turn",
            value=share * 100,
            unit="%",
            baseline=static * 100,
            baseline_name="tools + system prompt only",
            ratio=share / static if static else None,
            target=f"≥ {TARGET:.0%}",
            met=min(shares) >= TARGET,
        )
    )
    result.note(
        "Computed from request bytes (canonical JSON of tools, system and message blocks; ≈ chars/4 "
        f"tokens), not from the fake's synthetic usage. Per request: min {min(shares):.0%}, median "
        f"{share:.0%}, max {max(shares):.0%}; median request {median(sizes) / 4:,.0f} tokens (approx). "
        "The first request of a turn writes the cache (tools + system come from the cache of an earlier "
        "turn when it is still warm). Note: requests under the model's minimum cacheable length "
        "(1,024–4,096 tokens by model) are not cached at all by the API."
    )
    return result


async def _sink(event) -> None:
    return None
