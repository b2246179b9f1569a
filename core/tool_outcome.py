"""What one tool call returns (`ToolOutcome`), and the two ways most calls make one: a refusal, and a
sandbox step's result as the model and people see it (`describe_step`).

Kept apart from `core/tools.py` so the optional toolsets (`core/tools_s3.py`, `core/schedules_tool.py`)
and the loop (`core/tool_round.py`) share the outcome's shape without the contract tools themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.events import ArtifactReady
from core.file_stems import safe_file_stem
from core.sandbox import StepResult
from core.shared_names import renamed_note
from core.wording import counted, error_line


@dataclass
class ToolOutcome:
    """The result of one call: text for the model, a one-line summary for people, and any artifact."""

    content: str
    is_error: bool = False
    summary: str = ""
    rows: int | None = None
    bytes_scanned: int | None = None
    bytes_billed: int | None = None
    files: tuple[str, ...] = ()
    artifact: ArtifactReady | None = None
    tables: tuple[str, ...] = ()  # what a query read, as the policy saw it (for receipts)
    error: str = ""  # what went wrong, for people: a step's error without its output and labels


def refused(reason: str) -> ToolOutcome:
    return ToolOutcome(
        content=reason, is_error=True, summary="refused: " + reason.split(".")[0][:80], error=reason
    )


def describe_step(result: StepResult, *, what: str) -> ToolOutcome:
    """Turn a sandbox result into the model's view (bounded) and a people's summary."""
    if not result.ok:
        detail = result.error or "The step failed."
        out = (f"stdout:\n{result.output}\n" if result.output else "") + f"error:\n{detail}"
        if result.files:  # a partial file counts against the workspace quota until it is deleted
            left = ", ".join(f"{f['path']} ({f['size']:,} bytes)" for f in result.files[:20])
            out += f"\nFiles it left or changed before failing: {left}"
        return ToolOutcome(
            content=out,
            is_error=True,
            summary=f"failed: {error_line(detail, 100) or 'the step failed'}",
            files=tuple(f["path"] for f in result.files),
            error=detail,
        )
    parts: list[str] = []
    if result.saved_as:
        schema = ", ".join(f"{c['name']} {c['type']}" for c in result.columns[:60])
        if len(result.columns) > 60:  # a 70-column result never named c60-c69
            schema += f" and {len(result.columns) - 60} more (read the file for all)"
        parts.append(f"Saved {counted(result.rows or 0, 'row')} to '{result.saved_as}'. Columns: {schema}.")
        parts.append(f"Preview (first rows):\n{result.preview}")
        if (result.rows or 0) > result.preview.count("\n"):
            parts.append(f"(Preview only. The full result is in '{result.saved_as}'.)")
    if result.output:
        parts.append(f"stdout:\n{result.output}")
    new = [f"{f['path']} ({f['size']:,} bytes)" for f in result.files if f["path"] != result.saved_as]
    if new:
        parts.append("New or changed files: " + ", ".join(new))
    if not parts:
        parts.append("Done (no output). Use print() to see values.")
    rows = counted(result.rows, "row") if result.rows is not None else ""  # the audit said "1 rows"
    summary = ", ".join(x for x in (what, rows, f"{result.duration_s:.2f}s") if x)
    return ToolOutcome(
        content="\n".join(parts),
        summary=summary,
        rows=result.rows,
        bytes_scanned=result.bytes_scanned,
        bytes_billed=result.bytes_billed,
        files=tuple(f["path"] for f in result.files),
    )


def describe_saved(
    result: StepResult, save_as: str | None, shared: tuple[str, ...], *, what: str
) -> ToolOutcome:
    """`describe_step` of a query whose result was saved, saying first when it could not take the name
    its `save_as` asked for, one of the `shared` files' (core/shared_names.py)."""
    outcome = describe_step(result, what=what)
    stem = safe_file_stem(save_as, "")
    if result.ok and stem and (note := renamed_note(f"{stem}.parquet", result.saved_as or "", shared)):
        outcome.content = f"{note}\n{outcome.content}"
    return outcome
