"""The tool loop: one bounded conversation with Claude per turn, emitting events as it goes.

Loop state is a dataclass; the loop stops at `end_turn`, `refusal`, the step limit or the token
budget. Tools run one at a time, in order (a session's steps never overlap), and parallel tool calls
are answered in one message. The cached prefix (tools + system prompt) is byte-for-byte stable.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from core import history as hist
from core.events import (
    AnswerReady,
    ArtifactReady,
    EventSink,
    StepFinished,
    StepRecord,
    StepStarted,
    Thinking,
    TurnStats,
)
from core.model import ModelClient
from core.tools import TOOLS, Tool, ToolContext, call_tool, refused, step_detail, tool_specs

CACHE = {"type": "ephemeral"}

SYSTEM_PROMPT = """You are datathread, a careful data analyst who answers questions in a chat thread.

{warehouse}

How you work:
- Discover before you query: list_tables and describe_table when a table is new to you.
- query_warehouse runs one read-only query and saves the full result in the thread's workspace as a
  parquet file; you see a preview only. Aggregate in SQL; do not pull raw rows you don't need.
- run_sql (DuckDB) and run_python (pandas, numpy, matplotlib, duckdb) work on the workspace files by
  relative path, e.g. SELECT * FROM 'delays.parquet' or pd.read_parquet('delays.parquet'). Files from
  earlier questions in this thread are still there.
- Charts: matplotlib, clear title and axis labels, plt.savefig('name.png', dpi=150, bbox_inches='tight'),
  then attach_file. Data the person asks for: write a CSV, then attach_file.
- If a tool returns an error, read it, fix the query or code and try again; if something is refused by
  policy, do not try to get around it — explain what you can do instead.
- Older turns of a long thread are shortened to their question and answer; the files they made are
  still in the workspace (see them with run_python: import os; print(sorted(os.listdir('.')))).
- Never invent numbers. Every figure in your answer must come from a tool result in this thread.

How you answer:
- Lead with the direct answer in one or two sentences, then the key numbers (a small Markdown table
  of at most ~15 rows is fine), then one line on how you got them (tables, filters, definitions).
- Be concise: this is a chat thread. Use Markdown (bold, lists, tables, code); no headings above ###.
- If the question is ambiguous, make a sensible assumption, say which, and answer.
"""


@dataclass
class LoopLimits:
    max_steps: int = 16
    max_tokens: int = 4096
    token_budget: int = 400_000


@dataclass
class TurnState:
    """Everything one turn accumulates; the loop's only mutable state."""

    turn_id: str
    messages: list[dict]
    model_calls: int = 0
    steps: list[StepRecord] = field(default_factory=list)
    artifacts: list[ArtifactReady] = field(default_factory=list)
    usage: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"), 0
        )
    )
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


def build_system(warehouse_notes: str) -> list[dict]:
    """System prompt as one cached block; no timestamps or per-turn data, so its bytes never change."""
    return [{"type": "text", "text": SYSTEM_PROMPT.format(warehouse=warehouse_notes), "cache_control": CACHE}]


def build_tools(tools: tuple[Tool, ...] = TOOLS) -> list[dict]:
    """Tool specs with a cache breakpoint on the last one (tools are the start of the cached prefix)."""
    specs = tool_specs(tools)
    specs[-1] = {**specs[-1], "cache_control": CACHE}
    return specs


def with_moving_breakpoint(messages: list[dict]) -> list[dict]:
    """Copy of messages with a cache breakpoint on the newest block, so each step reuses the last."""
    out = copy.copy(messages)
    last = out[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if blocks:
        blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    out[-1] = {"role": last["role"], "content": blocks}
    return out


def _to_param(block: Any) -> dict:
    data = block.model_dump(exclude_none=True) if hasattr(block, "model_dump") else dict(block)
    if data.get("type") == "text":
        return {"type": "text", "text": data.get("text", "")}
    if data.get("type") == "tool_use":
        return {"type": "tool_use", "id": data["id"], "name": data["name"], "input": data.get("input") or {}}
    data.pop("citations", None)
    return data


class TurnAborted(Exception):
    """The loop cannot go on (token budget); the message is for people."""


async def run_loop(
    *,
    model: ModelClient,
    model_name: str,
    state: TurnState,
    system: list[dict],
    tools: list[dict],
    ctx: ToolContext,
    sink: EventSink,
    limits: LoopLimits,
) -> TurnState:
    """Drive the model until it answers. Appends to `state.messages`; raises model errors upward."""
    tool_rounds = 0
    while True:
        force_answer = tool_rounds >= limits.max_steps
        params: dict[str, Any] = {
            "model": model_name,
            "max_tokens": limits.max_tokens,
            "system": system,
            "tools": tools,
            "messages": with_moving_breakpoint(hist.compact(state.messages)),
        }
        if force_answer:
            params["tool_choice"] = {"type": "none"}
        await sink(Thinking(turn_id=state.turn_id))
        response = await model.create(**params)
        state.model_calls += 1
        _add_usage(state, response)
        content = [_to_param(b) for b in response.content]
        reason = response.stop_reason
        if reason == "refusal":
            content = [b for b in content if b["type"] == "text"] or [
                {"type": "text", "text": "I can't help with that request."}
            ]
        state.messages.append({"role": "assistant", "content": content or [{"type": "text", "text": "…"}]})
        text = "\n".join(b["text"] for b in content if b["type"] == "text").strip()
        tool_uses = [b for b in content if b["type"] == "tool_use"]

        if reason == "pause_turn":
            continue
        if tool_uses and reason in ("tool_use", "max_tokens"):
            if text:
                await sink(Thinking(turn_id=state.turn_id, text=text.splitlines()[0][:200]))
            truncated = reason == "max_tokens"
            results = [await _run_tool(b, ctx, state, sink, truncated=truncated) for b in tool_uses]
            state.messages.append({"role": "user", "content": results})
            tool_rounds += 1
            spent = state.usage["input_tokens"] + state.usage["output_tokens"]
            if spent > limits.token_budget:
                raise TurnAborted(
                    "This question used up its token budget before finishing. Try a narrower question."
                )
            continue
        if reason == "refusal":
            state.answer = text or "I can't help with that request."
        elif reason in ("max_tokens", "model_context_window_exceeded"):
            state.answer = (
                text + "\n\n_(My answer was cut short at the length limit — ask me to continue.)_"
            ).strip()
        else:
            state.answer = text or "I have no answer to give for that."
        await sink(AnswerReady(turn_id=state.turn_id, text=state.answer))
        return state


def _add_usage(state: TurnState, response: Any) -> None:
    usage = getattr(response, "usage", None)
    for key in state.usage:
        state.usage[key] += int(getattr(usage, key, 0) or 0)


async def _run_tool(
    block: dict, ctx: ToolContext, state: TurnState, sink: EventSink, *, truncated: bool
) -> dict:
    step_id = f"{state.turn_id}-{len(state.steps) + 1}"
    name, raw = block["name"], block.get("input")
    tool = ctx.tools.get(name)
    await sink(
        StepStarted(
            turn_id=state.turn_id,
            step_id=step_id,
            tool=name,
            title=tool.title if tool else f"Unknown tool {name}",
            detail=step_detail(name, raw if isinstance(raw, dict) else {}),
        )
    )
    started = time.perf_counter()
    if truncated:
        outcome = refused(
            "Your message was cut off at the output limit, so this call's input may be incomplete. "
            "Send smaller steps (shorter code or SQL)."
        )
    else:
        outcome = await call_tool(name, raw, ctx)
    record = StepRecord(
        step_id=step_id,
        tool=name,
        input=raw if isinstance(raw, dict) else {"raw": raw},
        ok=not outcome.is_error,
        summary=outcome.summary,
        duration_s=round(time.perf_counter() - started, 3),
        rows=outcome.rows,
        bytes_scanned=outcome.bytes_scanned,
        files=outcome.files,
        error=outcome.content[:2000] if outcome.is_error else "",
    )
    state.steps.append(record)
    await sink(StepFinished(turn_id=state.turn_id, record=record))
    if outcome.artifact:
        state.artifacts.append(outcome.artifact)
        await sink(outcome.artifact)
    result = {"type": "tool_result", "tool_use_id": block["id"], "content": outcome.content}
    if outcome.is_error:
        result["is_error"] = True
    return result
