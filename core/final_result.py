"""A turn's *final result*: the last successful query step and the parquet file it saved.

One definition for everything that asks "what did this answer rest on": `datathread eval` scores that
table, a 👍 saves that step's SQL as a verified query. Steps come as `StepRecord`s (a live turn) or as
the dicts of a stored turn record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from core.events import StepRecord

QUERY_TOOLS = ("query_warehouse", "run_sql")


@dataclass(frozen=True)
class FinalQuery:
    tool: str  # query_warehouse (warehouse SQL) or run_sql (DuckDB over workspace files)
    sql: str
    path: str  # the parquet file the step saved, relative to the workspace


def final_query(
    steps: Sequence[StepRecord | dict], *, tools: tuple[str, ...] = QUERY_TOOLS
) -> FinalQuery | None:
    """The last successful query step (of `tools`) that saved a result; None when the turn ran none."""
    for step in reversed(steps):
        data = asdict(step) if isinstance(step, StepRecord) else step
        if data.get("tool") not in tools or not data.get("ok"):
            continue
        saved = [f for f in data.get("files") or () if str(f).endswith(".parquet")]
        if saved:
            return FinalQuery(
                tool=data["tool"], sql=str((data.get("input") or {}).get("sql", "")), path=saved[-1]
            )
    return None
