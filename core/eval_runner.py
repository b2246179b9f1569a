"""Runs an evaluation suite: each question as a fresh one-turn session through the real `Analyst`.

The bot's *final result* for a question is the result of the last successful query step of its turn —
the parquet file the last `query_warehouse` or `run_sql` call saved (`core/final_result.py`). That table
is scored against the gold result (the suite's `gold_sql` run on the same warehouse, or its `expected`
values) by `core/eval_compare.py`. Everything the bot does goes through the usual model, sandbox, policy, caps and
budgets; nobody is there to confirm an expensive BigQuery query, so such a query is refused as it would
be for anyone who cannot answer the prompt. Turn rate limits are for people and are lifted for the run.

A question's failure is its own record — except when `STOP_AFTER` questions in a row fail with the same
`ModelFault` (the key rejected, the API unreachable, …): then every other question would fail that way
too, so the run asks no more (`report.stopped_by`); the questions already running finish.

`stop()` (Ctrl-C, SIGTERM) ends the run at once instead: the questions under way are cancelled — their
turns saved and recorded as stopped, as a person's would be — and the report keeps those already scored,
with `stopped_by` naming what stopped it, so `--resume` asks the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from core.analyst import Analyst, Parts
from core.eval_compare import MAX_COMPARE_ROWS, ResultSet, Verdict, compare
from core.eval_report import EvalReport, QuestionResult, StopSignal
from core.eval_suite import EvalQuestion, EvalSuite, expected_rows
from core.events import IncomingMessage, ModelFault, TurnEvent, TurnOutcome
from core.final_result import final_query
from core.model_cost import model_cost_usd
from core.policy import check_sql
from core.warehouse import QueryContext

EVAL_USER = "eval"
STOP_AFTER = 3  # questions in a row (in the order they finish) failing with the same model fault

OnResult = Callable[[QuestionResult, EvalReport], Awaitable[None]]  # the result, the report so far


class GoldFailed(Exception):
    """The suite's gold SQL could not be run; the message says why."""


def parquet_result(data: bytes) -> ResultSet:
    """A saved result as plain rows, cut one row past the comparison limit (enough to refuse it)."""
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    table = table.slice(0, MAX_COMPARE_ROWS + 1)
    columns = [c.to_pylist() for c in table.columns]
    return ResultSet(columns=list(table.column_names), rows=list(zip(*columns, strict=True)))


class EvalRunner:
    """Runs questions concurrently; a question's failure is its own record, a model fault in a row the
    run's end (see the module docstring)."""

    def __init__(self, parts: Parts, *, concurrency: int = 4, question_timeout_s: float = 600.0):
        settings = parts.settings.model_copy(update={"user_turns_per_hour": 0, "channel_turns_per_hour": 0})
        self.parts = dataclasses.replace(parts, settings=settings)
        self.analyst = Analyst(self.parts)
        self.concurrency = max(1, concurrency)
        self.question_timeout_s = question_timeout_s
        self.run_id = uuid.uuid4().hex[:10]
        self.stopped_by: StopSignal | None = None  # set by stop()
        self._asking: list[asyncio.Task] = []  # the questions of the run under way

    def stop(self, reason: StopSignal) -> None:
        """End the run now (see the module docstring); `run` returns the report so far. The first
        reason is kept: a second signal changes nothing."""
        self.stopped_by = self.stopped_by or reason
        for task in self._asking:
            task.cancel()

    async def close(self) -> None:
        await self.analyst.close()

    async def run(
        self,
        suite: EvalSuite,
        *,
        suite_name: str,
        done: list[QuestionResult] | None = None,
        on_result: OnResult | None = None,
    ) -> EvalReport:
        """Run every question not already scored in `done`; the report lists results in suite order."""
        started = time.perf_counter()
        report = EvalReport(
            suite=suite_name,
            model=self.parts.settings.model,
            warehouse=self.parts.settings.warehouse,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        kept = {str(r.id): r for r in done or [] if r.status != "error"}  # errors run again
        results: dict[str, QuestionResult] = {q.key: kept[q.key] for q in suite.questions if q.key in kept}
        slots = asyncio.Semaphore(self.concurrency)
        recent: list[ModelFault | None] = []

        async def one(question: EvalQuestion) -> None:
            async with slots:
                if report.stopped_by or self.stopped_by:
                    return
                result = await self.run_question(question)
            results[question.key] = result
            recent[:] = [*recent[-(STOP_AFTER - 1) :], result.fault]
            if len(recent) == STOP_AFTER and recent[0] and len(set(recent)) == 1:
                report.stopped_by = recent[0]
            if on_result:
                report.questions = [results[q.key] for q in suite.questions if q.key in results]
                report.finish(suite_size=len(suite.questions), wall_s=time.perf_counter() - started)
                await on_result(result, report)

        # Tasks awaited with wait(), not gather(): gather ends at the first child cancelled — a question
        # still waiting for its slot — while the one under way is still saving its stopped turn, and
        # the store closed under it. Whatever ends the run, no question outlives it.
        tasks = [asyncio.create_task(one(q)) for q in suite.questions if q.key not in results]
        self._asking = tasks
        try:
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            self._asking = []
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if failed := next((t.exception() for t in tasks if not t.cancelled() and t.exception()), None):
            raise failed
        report.stopped_by = report.stopped_by or self.stopped_by
        report.questions = [results[q.key] for q in suite.questions if q.key in results]
        return report.finish(suite_size=len(suite.questions), wall_s=time.perf_counter() - started)

    async def run_question(self, question: EvalQuestion) -> QuestionResult:
        """Gold first (a broken gold is the suite's error, not the bot's), then the bot's turn."""
        message = IncomingMessage(
            text=question.question,
            surface="terminal",
            thread_key=("eval", self.run_id, question.key),
            user_id=EVAL_USER,
            channel_id=EVAL_USER,
        )
        base = QuestionResult(
            id=question.id,
            question=question.question,
            level=question.level,
            correct=False,
            status="error",
            session_id=self.analyst.session_id(message),
        )
        try:
            gold = await self.gold_result(question, message)
        except GoldFailed as exc:
            return base.model_copy(update={"reason": f"gold: {exc}"})
        started = time.perf_counter()
        try:
            outcome = await asyncio.wait_for(
                self.analyst.handle(message, _ignore), timeout=self.question_timeout_s
            )
        except TimeoutError:
            reason = f"the turn did not finish within {self.question_timeout_s:.0f} s"
            return base.model_copy(update={"reason": reason, "latency_s": self.question_timeout_s})
        latency = round(time.perf_counter() - started, 3)
        measured = base.model_copy(update={**self._usage(outcome), "latency_s": latency})
        if not outcome.ok:
            failed = {"reason": f"the turn failed: {outcome.error}", "fault": outcome.fault}
            return measured.model_copy(update=failed)
        return await self._score(question, gold, outcome, measured)

    async def _score(
        self, question: EvalQuestion, gold: ResultSet, outcome: TurnOutcome, measured: QuestionResult
    ) -> QuestionResult:
        final = final_query(outcome.steps)
        got: ResultSet | None = None
        sql = final.sql if final else ""
        if final is not None:
            try:
                got = parquet_result(await self.parts.sandbox.read_file(outcome.session_id, final.path))
            except Exception as exc:  # the file vanished or is unreadable: the bot's result is unknown
                reason = f"could not read the final result {final.path}: {type(exc).__name__}"
                return measured.model_copy(update={"reason": reason, "final_sql": sql})
        verdict: Verdict = compare(gold, got, question.rules())
        return measured.model_copy(
            update={
                "correct": verdict.correct,
                "status": "correct" if verdict.correct else "wrong",
                "reason": verdict.reason,
                "final_sql": sql,
                "gold_rows": len(gold.rows),
                "result_rows": None if got is None else len(got.rows),
            }
        )

    async def gold_result(self, question: EvalQuestion, message: IncomingMessage) -> ResultSet:
        """The expected result: `expected` as given, or `gold_sql` run read-only on the warehouse."""
        if question.gold_sql is None:
            columns, rows = expected_rows(question.expected)
            return ResultSet(columns=columns, rows=rows)
        warehouse = self.parts.warehouse
        allowlist = self.analyst.access.allowlist_for(message)
        verdict = check_sql(
            question.gold_sql,
            dialect=warehouse.dialect,
            allowlist=allowlist,
            default_project=warehouse.default_project,
            default_dataset=warehouse.default_dataset,
        )
        if not verdict.allowed:
            raise GoldFailed(f"refused by the SQL policy: {verdict.reason}")
        s = self.parts.settings
        # Its own workspace next to the question's: steps of one session must never overlap.
        session_id = f"{self.analyst.session_id(message)}-gold"
        ctx = QueryContext.for_message(
            message,
            s,
            session_id=session_id,
            turn_id=f"gold-{self.run_id}",
            allowlist=allowlist,
            store=self.parts.store,
        )
        result = await warehouse.query(question.gold_sql, "gold", ctx)
        if not result.ok or not result.saved_as:
            detail = (result.error or "it returned no result").strip().splitlines()
            raise GoldFailed(detail[0][:300] if detail else "it failed")
        return parquet_result(await self.parts.sandbox.read_file(session_id, result.saved_as))

    def _usage(self, outcome: TurnOutcome) -> dict:
        s = outcome.stats
        return {
            "answer": outcome.answer[:2000],
            "model_calls": s.model_calls,
            "steps": s.steps,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "cache_read_tokens": s.cache_read_tokens,
            "cache_write_tokens": s.cache_write_tokens,
            "cost_usd": model_cost_usd(self.parts.settings.model, s),
            "bytes_scanned": s.bytes_scanned,
        }


async def _ignore(event: TurnEvent) -> None:
    """Eval turns have no surface: the record is the outcome, not the events."""
