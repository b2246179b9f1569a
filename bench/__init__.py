"""datathread's benchmark suite: `python -m bench` (or `make bench`) runs all and writes
docs/BENCHMARKS.md; `python -m bench NAME` runs one. Benchmarks are not tests: they measure.

The registry maps a name to (title, coroutine function `run(quick=False) -> BenchResult`); modules
are imported only when their benchmark runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable


def _lazy(module: str) -> Callable[..., Awaitable]:
    async def run(*, quick: bool = False):
        return await importlib.import_module(f"bench.{module}").run(quick=quick)

    return run


BENCHMARKS: dict[str, tuple[str, Callable[..., Awaitable]]] = {
    "steps": ("2. Step overhead: warm worker vs cold imports", _lazy("steps")),
    "turn": ("3. Turn overhead: a four-step turn with zero model latency", _lazy("turn")),
    "concurrency": ("4. Concurrency: 50 sessions at once on one process", _lazy("concurrency")),
    "context": ("5. Context size: big results and long threads", _lazy("context")),
    "cache": ("6. Prompt-cache effectiveness in a five-step turn", _lazy("cache")),
    "large": ("7. Large results: 1M rows to parquet in the workspace", _lazy("large")),
    "ack": ("1. Slack ack latency under load vs a bare Bolt app", _lazy("ack")),
    "answers": ("8. Answers sooner: model calls and concurrent tool calls", _lazy("answers")),
    "streaming": ("10. Streamed answers: first token to first text in Slack", _lazy("streaming")),
    "eval": ("9. `datathread eval --demo` with the scripted model", _lazy("eval")),
}
