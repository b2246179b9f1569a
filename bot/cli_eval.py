"""`datathread eval SUITE.yaml` and `datathread eval --demo`: measure the bot's accuracy on a suite.

Exit codes are for CI: 0, or 1 when `--min-accuracy` is given and missed, 2 for a bad suite or setting
(one sentence, no traceback) — a model set-up that failed questions in a row included: that stops the
run (core/eval_runner.py) rather than score a suite's worth of one error as the bot's accuracy. The JSON
report (`--output`) is rewritten after every question, so `--resume` picks an interrupted run up where
it stopped. Scoring and the report: core/eval_*.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from bot.cli_common import (
    app,
    check_output_file,
    check_sandbox,
    checked_or_exit,
    die,
    log_level_option,
    settings_or_exit,
    setup_log,
    writing,
)
from core.config import ConfigError, Settings, require_model
from core.events import ModelFault

if TYPE_CHECKING:  # imported where used: every other command starts without YAML and the eval stack
    from rich.table import Table

    from core.eval_report import EvalReport, QuestionResult
    from core.eval_suite import EvalSuite

err = Console(stderr=True, soft_wrap=True)

# Completes "Stopped after N questions failed because …" when a model fault stops the run.
FAULT_CAUSES = {
    ModelFault.UNREACHABLE: "the Claude API could not be reached",
    ModelFault.NO_REPLY: "the Claude API did not answer in time",
    ModelFault.KEY_REJECTED: "the Claude API key was rejected",
    ModelFault.MODEL_DENIED: "the Claude API key may not use the configured model",
    ModelFault.MODEL_NOT_FOUND: "the configured Claude model was not found",
    ModelFault.NO_CREDIT: "the Claude API account is out of credit",
}


@app.command("eval")
def eval_command(
    suite_path: Path = typer.Argument(None, metavar="SUITE.yaml", help="The suite to run."),
    demo: bool = typer.Option(False, "--demo", help="Run the suite shipped for the demo warehouse."),
    output: Path = typer.Option(None, "--output", "-o", help="Write the JSON report here."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the report as Markdown here."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=64, help="Questions run at once."),
    min_accuracy: float = typer.Option(None, "--min-accuracy", min=0.0, max=1.0, help="Exit 1 below this."),
    resume: bool = typer.Option(False, "--resume", help="Skip questions already scored in --output."),
    only: list[str] = typer.Option(None, "--only", help="Run only this question id (repeatable)."),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="Seconds one question may take."),
    log_level: str = log_level_option("ERROR"),
) -> None:
    """Run an evaluation suite through the bot and report execution accuracy, cost and latency."""
    from core.eval_report import load_done
    from core.eval_report import to_markdown as report_markdown
    from core.eval_suite import SuiteError, load_suite

    path = _suite_path(suite_path, demo)
    try:
        suite = load_suite(path)
    except SuiteError as exc:
        die(str(exc))
    if only:
        suite = _only(suite, only)
    for warning in suite.warnings():
        err.print(f"[yellow]warning:[/] {warning}")
    if resume and output is None:
        die("--resume needs --output: the report to resume from.")
    for written in (output, markdown):
        if written is not None:
            check_output_file(written)
    try:
        done = load_done(output) if resume and output else []
    except ValueError as exc:
        die(str(exc))
    settings = settings_or_exit()
    if demo and settings.warehouse != "duckdb":  # its gold SQL names the demo tables: every answer "fails"
        die(
            f"--demo is written for the demo DuckDB warehouse, not {settings.warehouse}: give a suite of your own."
        )
    # before any import of the core, the sandbox's start or the demo warehouse's build (seconds)
    checked_or_exit(settings, require_model)
    check_sandbox(settings)
    setup_log(settings, log_level)
    report = asyncio.run(_run(settings, suite, path, done, output, concurrency, timeout))
    if report.stopped_by:  # no table, no Markdown: an accuracy the bot never had a chance at
        die(stopped_sentence(report, output))
    Console().print(results_table(report))
    if markdown:
        with writing(markdown):
            markdown.write_text(report_markdown(report), encoding="utf-8")
    if min_accuracy is not None and report.accuracy < min_accuracy:
        err.print(f"Accuracy {report.accuracy:.1%} is below the minimum of {min_accuracy:.1%}.")
        raise typer.Exit(1)


def stopped_sentence(report: EvalReport, output: Path | None) -> str:
    """Why the run stopped and what to do, in one sentence (the JSON report keeps what was asked).

    The count is of the failures printed above it, not the streak that stopped the run (STOP_AFTER):
    the questions already running when the streak is seen finish too, so with `--concurrency 4` a
    rejected key printed six failures, then "Stopped after 3 questions in a row failed"."""
    failed = sum(q.fault == report.stopped_by for q in report.questions)
    resume = f", then `--resume` from {output}" if output else ""
    return (
        f"Stopped after {failed} questions failed because {FAULT_CAUSES[report.stopped_by]}: "
        f"check the model settings with `datathread doctor`{resume}."
    )


def _suite_path(suite_path: Path | None, demo: bool) -> Path:
    from core.eval_suite import DEMO_SUITE

    if demo and suite_path is not None:
        die("Give a suite file or --demo, not both.")
    if not demo and suite_path is None:
        die("Give a suite file (datathread eval SUITE.yaml) or --demo.")
    return DEMO_SUITE if demo else suite_path


def _only(suite: EvalSuite, ids: list[str]) -> EvalSuite:
    unknown = sorted(set(ids) - {q.key for q in suite.questions})
    if unknown:
        die(f"The suite has no question with id {', '.join(unknown)}.")
    return suite.model_copy(update={"questions": [q for q in suite.questions if q.key in ids]})


async def _run(
    settings: Settings,
    suite: EvalSuite,
    path: Path,
    done: list[QuestionResult],
    output: Path | None,
    concurrency: int,
    timeout: float,
) -> EvalReport:
    from core.analyst import build_parts
    from core.eval_report import save_report
    from core.eval_runner import EvalRunner
    from core.sessions import StoreUnavailable

    try:
        parts = await build_parts(settings)
    except (ConfigError, StoreUnavailable) as exc:
        die(str(exc))
    runner = EvalRunner(parts, concurrency=concurrency, question_timeout_s=timeout)
    if done:
        err.print(f"Resuming: {len(done)} questions already scored in {output}.")

    async def progress(result: QuestionResult, so_far: EvalReport) -> None:
        mark = {"correct": "[green]✓[/]", "wrong": "[red]✗[/]", "error": "[yellow]![/]"}[result.status]
        err.print(f"{mark} {result.id} [dim]{result.reason} · {result.latency_s:.1f}s[/]")
        if output:
            with writing(output):
                save_report(so_far, output)

    try:
        report = await runner.run(suite, suite_name=suite.name or path.name, done=done, on_result=progress)
    finally:
        await runner.close()
    if output:
        with writing(output):
            save_report(report, output)
    return report


def results_table(report: EvalReport) -> Table:
    """The report for a terminal: one row per question, totals in the caption."""
    from rich.table import Table

    from core.eval_report import format_bytes, format_cost

    t = report.totals
    table = Table(
        title=f"{report.suite}: accuracy {report.accuracy:.1%} ({t.correct}/{t.questions})",
        caption=(
            f"{t.model_calls} model calls · {t.input_tokens + t.output_tokens:,} tokens · "
            f"{format_cost(t.cost_usd)} est. · {format_bytes(t.bytes_scanned)} scanned · "
            f"latency mean {t.latency_s_mean:.1f}s, max {t.latency_s_max:.1f}s · wall {t.wall_s:.1f}s"
        ),
    )
    for name, justify in (("id", "left"), ("result", "left"), ("why", "left"), ("calls", "right")):
        table.add_column(name, justify=justify)
    table.add_column("tokens", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("latency", justify="right")
    style = {"correct": "[green]correct[/]", "wrong": "[red]wrong[/]", "error": "[yellow]error[/]"}
    for r in report.questions:
        table.add_row(
            str(r.id),
            style[r.status],
            r.reason,
            str(r.model_calls),
            f"{r.input_tokens + r.output_tokens:,}",
            format_cost(r.cost_usd),
            f"{r.latency_s:.1f}s",
        )
    return table
