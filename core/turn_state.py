"""The tool loop's data: the limits of one turn and what the turn accumulates (messages, steps,
files, token usage). Plain dataclasses, shared by the loop (`core/agent.py`) and the tool rounds it
runs (`core/tool_round.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.events import ArtifactReady, StepRecord, TurnStats

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def weighted_tokens(usage: dict[str, int]) -> int:
    """Tokens at their price: input and output whole, cache reads at a tenth, cache writes at 1.25.

    With a cache breakpoint on every request nearly the whole context is cache reads and
    `input_tokens` stays near zero, so input + output alone never stopped a turn; counted whole, a
    long legitimate turn would (reads cost a tenth of input)."""
    spent = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    return (
        spent
        + usage.get("cache_read_input_tokens", 0) // 10
        + usage.get("cache_creation_input_tokens", 0) * 5 // 4
    )


@dataclass
class LoopLimits:
    """What one turn may do: steps, output per call, tokens, and tool calls per message and turn."""

    max_steps: int = 16
    max_tokens: int = 4096
    token_budget: int = 400_000
    parallel_tools: int = 4  # tool calls of one message running at once (per session: one turn at a time)
    calls_per_message: int = 8  # tool calls of one message that run; the rest are answered "not run"
    calls_per_step: int = 4  # with max_steps, the tool calls a whole turn may make

    @property
    def max_calls(self) -> int:
        return self.max_steps * self.calls_per_step


@dataclass
class TurnState:
    """Everything one turn accumulates; the loop's only mutable state."""

    turn_id: str
    messages: list[dict]
    model_calls: int = 0
    steps: list[StepRecord] = field(default_factory=list)
    artifacts: list[ArtifactReady] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))
    answer: str = ""
    started: float = field(default_factory=time.perf_counter)

    def stats(self) -> TurnStats:
        return TurnStats(
            steps=len(self.steps),
            rows=sum(s.rows or 0 for s in self.steps if s.tool in ("query_warehouse", "run_sql")),
            bytes_scanned=sum(s.bytes_scanned or 0 for s in self.steps),
            input_tokens=self.usage["input_tokens"],
            output_tokens=self.usage["output_tokens"],
            cache_read_tokens=self.usage["cache_read_input_tokens"],
            cache_write_tokens=self.usage["cache_creation_input_tokens"],
            model_calls=self.model_calls,
            duration_s=round(time.perf_counter() - self.started, 3),
        )

    def add_usage(self, response: Any) -> int:
        """Count one model reply's usage; returns its weighted tokens (`weighted_tokens`)."""
        usage = getattr(response, "usage", None)
        added = {key: int(getattr(usage, key, 0) or 0) for key in USAGE_KEYS}
        for key, n in added.items():
            self.usage[key] += n
        return weighted_tokens(added)
