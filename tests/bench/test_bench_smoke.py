"""Smoke test of the benchmark suite's pure parts: every module imports, the statistics, the cache
prefix arithmetic and the report (table, diff against the previous run) work. No timing asserted."""

from __future__ import annotations

import importlib

import pytest

from bench import BENCHMARKS
from bench.cache import cached_bytes, segments
from bench.harness import BenchResult, Figure, percentile
from bench.report import load_previous, write


def test_every_benchmark_module_imports_and_has_run():
    for name in BENCHMARKS:
        module = importlib.import_module(f"bench.{name}")
        assert callable(module.run), name


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1, 2, 3, 4], 50, 2), (list(range(1, 101)), 99, 99), (list(range(1, 101)), 100, 100), ([7], 99, 7)],
)
def test_percentile_is_nearest_rank(values, q, expected):
    assert percentile(values, q) == expected


def _body(*user_texts: str, mark_last: bool = True) -> dict:
    messages = [{"role": "user", "content": [{"type": "text", "text": t}]} for t in user_texts]
    if mark_last:
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {
        "tools": [{"name": "t", "cache_control": {"type": "ephemeral"}}],
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    }


def test_cached_bytes_takes_longest_matching_breakpoint_prefix():
    first, second = _body("a"), _body("a", "b")
    whole_first = sum(len(s) for s, _ in segments(first))
    assert cached_bytes(first, second) == whole_first  # the moving breakpoint is reused
    changed = _body("x", "b")
    static = sum(len(s) for s, _ in segments(first)[:2])
    assert cached_bytes(first, changed) == static  # only tools + system still match
    assert cached_bytes({"tools": [{"name": "other"}], "system": [], "messages": []}, second) == 0


def test_report_writes_table_and_diffs_against_previous(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    r = BenchResult("steps", "2. Step overhead")
    r.add(
        Figure(
            name="steps: x",
            value=50,
            unit="ms",
            baseline=1000,
            baseline_name="cold",
            ratio=0.05,
            target="≤ 0.1×",
            met=True,
        )
    )
    write(path, [r], machine={"cpus": "2"}, command="python -m bench steps")
    assert "| steps: x | 50.0 ms | 1,000 ms (cold) | 0.05× | ≤ 0.1× | yes |" in path.read_text()
    assert "- first run." in path.read_text()
    r2 = BenchResult("turn", "3. Turn")
    r2.add(Figure(name="turn: y", value=2.0, unit="s", target="< 1 s", met=False))
    r.figures[0].value = 60
    write(path, [r, r2], machine={"cpus": "2"}, command="python -m bench")
    text = path.read_text()
    assert "- steps: x: 50.0 → 60.0 ms (+20%)" in text and "- new: turn: y = 2.00 s" in text
    assert set(load_previous(path)["benches"]) == {"steps", "turn"}
    write(path, [r2], machine={"cpus": "2"}, command="python -m bench turn")  # a partial run
    text = path.read_text()
    assert "gone" not in text and "| steps: x | 60.0 ms |" in text and "from an earlier run" in text


def test_a_run_keeps_the_sections_measured_by_hand(tmp_path):
    path = tmp_path / "BENCHMARKS.md"
    r = BenchResult("steps", "2. Step overhead", [Figure("python step", 50.0, "ms")], notes=[])
    write(path, [r], machine={"cpus": "2"}, command="python -m bench steps")
    by_hand = "<!-- by hand -->\n## Test suite\n\n| run | wall |\n|---|---|\n| after | 5 min |\n<!-- end by hand -->"
    path.write_text(path.read_text().replace("<!-- bench-data", by_hand + "\n\n<!-- bench-data"))
    write(path, [r], machine={"cpus": "2"}, command="python -m bench steps")
    text = path.read_text()
    assert text.count(by_hand) == 1 and text.index(by_hand) < text.index("<!-- bench-data")
    assert load_previous(path)["benches"]["steps"]["figures"][0]["value"] == 50.0
