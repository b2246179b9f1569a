"""`datathread eval SUITE.yaml` and `datathread eval --demo`: measure the bot's accuracy on a suite.

Exit codes are for CI: 0, or 1 when `--min-accuracy` is given and missed, 2 for a bad suite or setting
(one sentence, no traceback) — a model set-up that failed questions in a row included: that stops the
run (core/eval_runner.py) rather than score a suite's worth of one error as the bot's accuracy. The JSON
report (`--output`) is rewritten after every question, so `--resume` picks an interrupted run up where
it stopped. Ctrl-C, SIGTERM or a closed terminal stops the run where it is (`Stopper`): the report
keeps what was scored, marked partial (`stopped_by`), and one line says how far it got and the command
that finishes it. Scoring and the report: core/eval_*.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shlex
import signal
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
from core.wording import counted

if TYPE_CHECKING:  # imported where used: every other command starts without YAML and the eval stack
    from rich.table import Table

    from core.eval_report import EvalReport, QuestionResult
    from core.eval_runner import EvalRunner
    from core.eval_suite import EvalSuite

err = Console(stderr=True, soft_wrap=True)

# Completes "Stopped after N questions failed because …" when a model fault stops the run.
FAULT_CAUSES = {
    ModelFault.UNREACHABLE: "the Claude API could not be reached",
    ModelFault.NO_REPLY: "the Claude API did not answer in time",
    ModelFault.NOT_CLAUDE: "the Claude API's address answered with something that is not a Claude reply",
    ModelFault.KEY_REJECTED: "the Claude API key was rejected",
    ModelFault.MODEL_DENIED: "the Claude API key may not use the configured model",
    ModelFault.MODEL_NOT_FOUND: "the configured Claude model was not found",
    ModelFault.NO_CREDIT: "the Claude API account is out of credit",
}


@app.command("eval")
def eval_command(
    ctx: typer.Context,
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
    _check_distinct(path, output, markdown)
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
    stopper = Stopper()
    try:
        report = asyncio.run(_run(settings, suite, path, done, output, concurrency, timeout, stopper))
    except KeyboardInterrupt:  # a second Ctrl-C: the report holds the questions scored until the first
        err.print("Stopped without waiting for the questions under way.")
        raise typer.Exit(130) from None
    if report is not None and report.stopped_by in FAULT_CAUSES:  # no table, no Markdown: an accuracy
        die(stopped_sentence(report, output))  # the bot never had a chance at
    if stopper.signal is not None and (report is None or report.stopped_by):
        with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) takes the line with it
            err.print(interrupted_sentence(report, _resume_command(ctx, output)), markup=False)
        raise typer.Exit(128 + stopper.signal)
    assert report is not None  # only a signal stops the run before it starts
    Console().print(results_table(report))
    if markdown:
        with writing(markdown):
            markdown.write_text(report_markdown(report), encoding="utf-8")
    if min_accuracy is not None and report.accuracy < min_accuracy:
        err.print(f"Accuracy {report.accuracy:.1%} is below the minimum of {min_accuracy:.1%}.")
        raise typer.Exit(1)


def _check_distinct(suite: Path, output: Path | None, markdown: Path | None) -> None:
    """`--output` or `--markdown` naming the suite itself (or each other) overwrote the suite with the
    report, and the next run failed on it: a suite written by hand was lost."""
    if output is not None and _same(output, suite) or markdown is not None and _same(markdown, suite):
        die(f"The report would overwrite the suite {suite}: give --output/--markdown another file.")
    if output is not None and markdown is not None and _same(output, markdown):
        die(f"--output and --markdown both name {output}: give each its own file.")


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def stopped_sentence(report: EvalReport, output: Path | None) -> str:
    """Why the run stopped and what to do, in one sentence (the JSON report keeps what was asked).

    The count is of the failures printed above it, not the streak that stopped the run (STOP_AFTER):
    the questions already running when the streak is seen finish too, so with `--concurrency 4` a
    rejected key printed six failures, then "Stopped after 3 questions in a row failed"."""
    failed = sum(q.fault == report.stopped_by for q in report.questions)
    resume = f", then `--resume` from {output}" if output else ""
    return (
        f"Stopped after {counted(failed, 'question')} failed because {FAULT_CAUSES[report.stopped_by]}: "
        f"check the model settings with `datathread doctor`{resume}."
    )


def interrupted_sentence(report: EvalReport | None, resume: str | None) -> str:
    """How far a stopped run got and `resume`, the command that finishes it (None: nothing to resume)."""
    if report is None:
        return "Stopped before any question was asked."
    total = counted(report.totals.questions, "question")
    if resume is None:
        return f"Stopped after {len(report.questions)} of {total} (without --output, nothing to resume)."
    return f"Stopped after {len(report.questions)} of {total}: `{resume}` finishes the run."


def _resume_command(ctx: typer.Context, output: Path | None) -> str | None:
    """This command as given (the suite, its `--only` questions, outputs and settings) with `--resume`,
    ready to paste; None without `--output`, the report a resume reads."""
    if output is None:
        return None
    args = ["datathread", ctx.info_name or "eval"]
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if param.name in ("resume", "log_level") or source is None or source.name.startswith("DEFAULT"):
            continue
        value, flag = ctx.params[param.name], max(param.opts, key=len)  # --output, not -o
        if param.param_type_name == "argument":
            args.append(str(value))
        elif getattr(param, "is_flag", False):
            args.append(flag)
        else:
            args += [part for item in (value if param.multiple else [value]) for part in (flag, str(item))]
    return shlex.join([*args, "--resume"])


class Stopper:
    """The first Ctrl-C, SIGTERM (`timeout`, a logout) or closed terminal (SIGHUP) stops the run where
    it is — `EvalRunner.stop`, or the start when no question is asked yet — and the command ends with
    128 + the signal; a second Ctrl-C ends it without waiting for the questions under way to wind down.

    Without it, asyncio's Ctrl-C cancelled the whole run and SIGTERM killed it: nothing was said, and
    the report was left as after the last question, with no sign that it was partial. A signal the
    process started with ignored (`nohup`, a background job) stays ignored."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self.runner: EvalRunner | None = None
        self._starting: asyncio.Task | None = None

    @contextlib.contextmanager
    def handling(self):
        """The loop's signal handlers while the run lasts, then what was there before."""
        from bot.stop_signals import STOP_SIGNALS, loop_signal_handlers

        self._starting = asyncio.current_task()
        handlers = {sig: functools.partial(self._on_signal, sig) for sig in STOP_SIGNALS}
        with loop_signal_handlers(asyncio.get_running_loop(), handlers):
            yield self

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.signal is not None:
            if sig == signal.SIGINT:
                raise KeyboardInterrupt  # a loop callback's KeyboardInterrupt leaves asyncio.run
            return
        self.signal = sig
        if self.runner is not None:
            self.runner.stop(sig.name)
        elif self._starting is not None:
            self._starting.cancel()

    def attach(self, runner: EvalRunner) -> EvalRunner:
        """The runner a signal stops from now on; stopped at once if a signal came during the start
        (whose cancellation the start may have taken for its own and carried on)."""
        self.runner = runner
        if self.signal is not None:
            runner.stop(self.signal.name)
        return runner

    def stopped_the_start(self) -> bool:
        """True when the cancellation being handled is this stop's, during the start (the task goes on)."""
        if self.signal is None or self.runner is not None or self._starting is None:
            return False
        self._starting.uncancel()
        return True


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
    stopper: Stopper,
) -> EvalReport | None:
    """The run's report, None when a signal stopped it before any question was asked."""
    with stopper.handling():
        try:
            parts = await _parts(settings)
        except asyncio.CancelledError:
            if stopper.stopped_the_start():
                return None
            raise
        return await _ask(stopper.attach(_new_runner(parts, concurrency, timeout)), suite, path, done, output)


async def _parts(settings: Settings):
    from core.analyst import build_parts
    from core.sessions import StoreUnavailable

    try:
        return await build_parts(settings)
    except (ConfigError, StoreUnavailable) as exc:
        die(str(exc))


def _new_runner(parts, concurrency: int, timeout: float) -> EvalRunner:
    from core.eval_runner import EvalRunner

    return EvalRunner(parts, concurrency=concurrency, question_timeout_s=timeout)


async def _ask(
    runner: EvalRunner, suite: EvalSuite, path: Path, done: list[QuestionResult], output: Path | None
) -> EvalReport:
    from core.eval_report import save_report

    if done:
        err.print(f"Resuming: {counted(len(done), 'question')} already scored in {output}.")

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
            f"{counted(t.model_calls, 'model call')} · {counted(t.input_tokens + t.output_tokens, 'token')} · "
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
