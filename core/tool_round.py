"""One message's tool calls: run them (concurrently where their files allow), record each as a step,
and answer each in the calls' order — including the calls over the limits, answered "not run", so
the history stays valid whatever the model sent.
"""

from __future__ import annotations

import time

from core.events import ArtifactReady, EventSink, StepFinished, StepRecord, StepStarted
from core.tool_batch import footprint, run_concurrently
from core.tool_outcome import refused
from core.tools import ToolContext, call_tool, step_detail
from core.turn_state import LoopLimits, TurnState


async def run_tools(
    tool_uses: list[dict], ctx: ToolContext, state: TurnState, sink: EventSink, *, truncated: bool, limit: int
) -> list[dict]:
    """Run one message's tool calls, concurrently where their files allow; results in the calls' order."""
    first = len(state.steps)
    step_ids = [f"{state.turn_id}-{first + i + 1}" for i in range(len(tool_uses))]
    done: list[tuple[dict, StepRecord, ArtifactReady | None] | None] = [None] * len(tool_uses)
    begun: dict[int, float] = {}

    async def run(i: int) -> dict:
        begun[i] = time.perf_counter()
        done[i] = await _run_tool(tool_uses[i], step_ids[i], ctx, state.turn_id, sink, truncated=truncated)
        return done[i][0]

    try:
        footprints = [footprint(b["name"], b.get("input")) for b in tool_uses]
        return await run_concurrently(footprints, run, limit=limit)
    finally:  # recorded in the calls' order, even when the batch was interrupted (a stopped turn):
        for i, item in enumerate(done):  # a step stopped mid-way too — its code ran, the audit shows it
            if item is not None:
                state.steps.append(item[1])
                if item[2] is not None:
                    state.artifacts.append(item[2])
            elif i in begun:
                title = _title(ctx, tool_uses[i]["name"])
                state.steps.append(_stopped(tool_uses[i], step_ids[i], title, time.perf_counter() - begun[i]))


def not_run(block: dict, limits: LoopLimits, *, turn_full: bool) -> dict:
    """The result of a call over the limits: said to the model, so the history stays valid."""
    why = (
        f"this turn has made its {limits.max_calls} tool calls: answer with what you have"
        if turn_full
        else f"at most {limits.calls_per_message} tool calls of one message run: send the rest in your next one"
    )
    return {
        "type": "tool_result",
        "tool_use_id": block["id"],
        "content": f"Not run: {why}.",
        "is_error": True,
    }


def _title(ctx: ToolContext, name: str) -> str:
    """A tool's title for people ("Querying the warehouse"), or what the model asked for, named."""
    tool = ctx.tools.get(name)
    return tool.title if tool else f"Unknown tool {name}"


def _stopped(block: dict, step_id: str, title: str, ran_s: float) -> StepRecord:
    raw = block.get("input")
    return StepRecord(
        step_id=step_id,
        tool=block["name"],
        title=title,
        input=raw if isinstance(raw, dict) else {"raw": raw},
        ok=False,
        summary="stopped",
        duration_s=round(ran_s, 3),
        error="Stopped before it finished: the turn was stopped.",
    )


async def _run_tool(
    block: dict, step_id: str, ctx: ToolContext, turn_id: str, sink: EventSink, *, truncated: bool
) -> tuple[dict, StepRecord, ArtifactReady | None]:
    name, raw = block["name"], block.get("input")
    title = _title(ctx, name)
    await sink(
        StepStarted(
            turn_id=turn_id,
            step_id=step_id,
            tool=name,
            title=title,
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
        title=title,
        input=raw if isinstance(raw, dict) else {"raw": raw},
        ok=not outcome.is_error,
        summary=outcome.summary,
        duration_s=round(time.perf_counter() - started, 3),
        rows=outcome.rows,
        bytes_scanned=outcome.bytes_scanned,
        bytes_billed=outcome.bytes_billed,
        files=outcome.files,
        error=(outcome.error or outcome.content)[:2000] if outcome.is_error else "",
        tables=outcome.tables,
    )
    await sink(StepFinished(turn_id=turn_id, record=record))
    if outcome.artifact:
        await sink(outcome.artifact)
    result = {"type": "tool_result", "tool_use_id": block["id"], "content": outcome.content}
    if outcome.is_error:
        result["is_error"] = True
    return result, record, outcome.artifact
