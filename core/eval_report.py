"""The evaluation report: one record per question, totals, JSON on disk and Markdown for people.

The JSON shape is a contract: a top-level `accuracy` (0–1, correct / questions in the suite; a question
that errored counts as not correct) and `questions: [{id, correct, ...}]`. The file is rewritten after
every question, so an interrupted run can be resumed from it (`--resume`). A run that stopped early —
the model's set-up failed question after question, or a signal (Ctrl-C, SIGTERM) ended it — names why
in `stopped_by` and lists only the questions it scored: such a report is partial, its `accuracy` still
over the whole suite (a question never asked is not correct), as `totals.questions` says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from core.events import ModelFault
from core.wording import counted, os_words

Status = Literal["correct", "wrong", "error"]
StopSignal = Literal["SIGINT", "SIGTERM", "SIGHUP"]  # Ctrl-C; `timeout`, a logout; a closed terminal


class QuestionResult(BaseModel):
    """What one question did: the verdict, why, and what it cost."""

    id: str | int
    question: str
    correct: bool
    status: Status
    reason: str = ""
    fault: ModelFault | None = None  # the error was the model's set-up, not this question (core/events.py)
    level: str = ""
    session_id: str = ""
    answer: str = ""
    final_sql: str = ""  # the query whose result was scored
    gold_rows: int | None = None
    result_rows: int | None = None
    model_calls: int = 0
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None  # model calls, list prices (core/model_cost.py)
    bytes_scanned: int = 0  # as the warehouse reports it (BigQuery: bytes processed)
    latency_s: float = 0.0


class Totals(BaseModel):
    questions: int = 0
    answered: int = 0  # questions with a result (correct or wrong), errors excluded
    correct: int = 0
    wrong: int = 0
    errors: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    bytes_scanned: int = 0
    latency_s_mean: float = 0.0
    latency_s_p50: float = 0.0
    latency_s_max: float = 0.0
    wall_s: float = 0.0


class EvalReport(BaseModel):
    suite: str
    model: str
    warehouse: str
    started_at: str
    # The run stopped early, the report is partial: this fault failed questions in a row, or a signal.
    stopped_by: ModelFault | StopSignal | None = None
    accuracy: float = 0.0
    totals: Totals = Field(default_factory=Totals)
    questions: list[QuestionResult] = Field(default_factory=list)

    def finish(self, *, suite_size: int, wall_s: float) -> EvalReport:
        """Recompute accuracy and totals from the question records."""
        self.totals = totals_of(self.questions, suite_size=suite_size, wall_s=wall_s)
        self.accuracy = self.totals.correct / suite_size if suite_size else 0.0
        return self


def totals_of(results: list[QuestionResult], *, suite_size: int, wall_s: float) -> Totals:
    latencies = sorted(r.latency_s for r in results)
    costs = [r.cost_usd for r in results]
    return Totals(
        questions=suite_size,
        answered=sum(r.status != "error" for r in results),
        correct=sum(r.correct for r in results),
        wrong=sum(r.status == "wrong" for r in results),
        errors=sum(r.status == "error" for r in results),
        model_calls=sum(r.model_calls for r in results),
        input_tokens=sum(r.input_tokens for r in results),
        output_tokens=sum(r.output_tokens for r in results),
        cache_read_tokens=sum(r.cache_read_tokens for r in results),
        cache_write_tokens=sum(r.cache_write_tokens for r in results),
        cost_usd=round(sum(c for c in costs if c is not None), 6)
        if any(c is not None for c in costs)
        else None,
        bytes_scanned=sum(r.bytes_scanned for r in results),
        latency_s_mean=round(sum(latencies) / len(latencies), 3) if latencies else 0.0,
        latency_s_p50=latencies[len(latencies) // 2] if latencies else 0.0,
        latency_s_max=latencies[-1] if latencies else 0.0,
        wall_s=round(wall_s, 3),
    )


def save_report(report: EvalReport, path: Path) -> None:
    """Write atomically: a reader (or a resume after a crash) never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_done(path: Path) -> list[QuestionResult]:
    """Questions of an earlier report that need no re-run (correct or wrong; errors run again)."""
    try:
        report = EvalReport.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except OSError as exc:  # a folder, no permission: the reason in words, not an errno tuple
        raise ValueError(f"cannot resume from {path}: {os_words(exc) or type(exc).__name__}.") from None
    except (ValueError, ValidationError):  # pydantic's multi-line report was printed whole
        raise ValueError(f"cannot resume from {path}: it is not a report of `datathread eval`.") from None
    return [r for r in report.questions if r.status != "error"]


def format_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"


def format_cost(cost: float | None) -> str:
    return "n/a" if cost is None else f"${cost:,.4f}"


def to_markdown(report: EvalReport) -> str:
    """The report as Markdown: a summary line, totals, and a table of the questions."""
    t = report.totals
    lines = [
        f"## Eval: {report.suite}",
        "",
        f"**Accuracy {report.accuracy:.1%}** ({t.correct}/{t.questions} correct, {t.wrong} wrong, "
        f"{counted(t.errors, 'error')}) · model `{report.model}` · warehouse {report.warehouse} · {report.started_at}",
        "",
        "| model calls | tokens in / out (cache read) | cost (est.) | bytes scanned | latency mean / p50 / max | wall |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {t.model_calls} | {t.input_tokens:,} / {t.output_tokens:,} ({t.cache_read_tokens:,}) "
        f"| {format_cost(t.cost_usd)} | {format_bytes(t.bytes_scanned)} "
        f"| {t.latency_s_mean:.1f} / {t.latency_s_p50:.1f} / {t.latency_s_max:.1f} s | {t.wall_s:.1f} s |",
        "",
        "| id | level | result | why | calls | tokens | cost | latency |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    mark = {"correct": "✅", "wrong": "❌", "error": "⚠️ error"}
    for r in report.questions:
        why = r.reason.replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {r.id} | {r.level} | {mark[r.status]} | {why} | {r.model_calls} "
            f"| {r.input_tokens + r.output_tokens:,} | {format_cost(r.cost_usd)} | {r.latency_s:.1f} s |"
        )
    return "\n".join(lines) + "\n"
