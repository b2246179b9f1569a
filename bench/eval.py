"""9. `datathread eval --demo` with the scripted model: the whole shipped suite through the real Analyst,
DuckDB warehouse and sandbox, once answered with each question's gold SQL (must score 100 %) and once
with every fourth answer doubled (`gold UNION ALL gold`: extra rows, must score exactly the rest).
Wall time at concurrency 4 against concurrency 1 measured in the same run.
"""

from __future__ import annotations

import time

from bench.harness import BenchResult, Figure, bench_settings, make_home, routed_model, temp_dir


def _script(suite, *, wrong_every: int = 0) -> dict[str, str]:
    script = {}
    for n, q in enumerate(suite.questions):
        sql = q.gold_sql.strip().rstrip(";")
        if wrong_every and n % wrong_every == 0:
            sql = f"SELECT * FROM ({sql}) UNION ALL SELECT * FROM ({sql})"
        script[q.question] = sql
    return script


async def _run(suite, script: dict[str, str], concurrency: int):
    from core.analyst import build_parts
    from core.eval_runner import EvalRunner
    from tests.fakes.anthropic_scripts import by_question

    with temp_dir("eval") as tmp:
        fake = routed_model(by_question(script))
        try:
            settings = bench_settings(make_home(tmp), fake.url, model="claude-sonnet-5-5")
            runner = EvalRunner(await build_parts(settings), concurrency=concurrency)
            try:
                started = time.perf_counter()
                report = await runner.run(suite, suite_name="demo")
                return report, time.perf_counter() - started
            finally:
                await runner.close()
        finally:
            fake.stop()


async def run(*, quick: bool = False) -> BenchResult:
    from core.eval_suite import DEMO_SUITE, load_suite

    suite = load_suite(DEMO_SUITE)
    if quick:
        suite = suite.model_copy(update={"questions": suite.questions[:8]})
    result = BenchResult("eval", "9. `datathread eval --demo` with the scripted model")
    n = len(suite.questions)
    right, wall4 = await _run(suite, _script(suite), 4)
    result.add(
        Figure(
            f"accuracy, {n} questions answered with their gold SQL",
            right.accuracy * 100,
            "%",
            target="100 %",
            met=right.accuracy == 1.0,
        )
    )
    wrong_n = len(range(0, n, 4))
    perturbed, _ = await _run(suite, _script(suite, wrong_every=4), 4)
    expected = (n - wrong_n) / n
    result.add(
        Figure(
            f"accuracy, every 4th answer with extra rows ({wrong_n} of {n})",
            perturbed.accuracy * 100,
            "%",
            target=f"{expected:.1%} exactly",
            met=perturbed.accuracy == expected,
        )
    )
    _, wall1 = await _run(suite, _script(suite), 1)
    result.add(
        Figure(
            f"suite wall time, concurrency 4 ({n} questions)",
            wall4,
            "s",
            baseline=wall1,
            baseline_name="concurrency 1",
            ratio=wall4 / wall1,
        )
    )
    t = right.totals
    result.note(
        f"per question (concurrency 4): latency mean {t.latency_s_mean:.2f} s, p50 {t.latency_s_p50:.2f} s, "
        f"max {t.latency_s_max:.2f} s; {t.model_calls} model calls in all (2 per question)."
    )
    wrong = [r for r in right.questions if not r.correct]
    if wrong:
        result.note("not correct with gold SQL: " + "; ".join(f"{r.id}: {r.reason}" for r in wrong))
    return result
