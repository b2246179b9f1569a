"""`python -m bench turn --quick` as far as its first repetition of each half: one turn through the core
Analyst, one through `datathread serve`'s Slack route into the fake Slack, each ended as the benchmark
ends it (the Slack harness's drain). The suite never runs `python -m bench`: the benchmark passed no
`turn_workers=0`, so its Slack half met turn worker processes the harness cannot drain, and
`make bench` died there with an AttributeError 48 s in, the test suite green. The warm-up turns only
(the timed repetitions are the same code again), on the test process's shared fork server: the
benchmark's temp homes are put under this test's tmp_path, where the shared server fits them."""

from __future__ import annotations

import tempfile

import pytest

from bench import turn


@pytest.fixture
def bench_temp(tmp_path, monkeypatch):
    """The benchmark's `temp_dir` (tempfile) under tmp_path: its homes can borrow the shared fork server."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


async def test_the_turn_benchmark_runs_its_core_and_slack_turns(bench_temp):
    walls, parts = await turn._core_turns(0)  # raises unless the four-step turn answered with both files
    assert walls == [] and parts == []  # the warm-up turn is not timed
    answers, acks = await turn._slack_turns(0)  # the mention acked, answered in Slack, the runner drained
    assert answers == [] and acks == []
