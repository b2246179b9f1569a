"""The step code itself (`core/steps.py`), run directly in a workspace directory as the sandbox runs it."""

from __future__ import annotations

import time
from types import SimpleNamespace

from core import steps
from core.sandbox import StepRequest
from core.steps import run_step


def test_unnamed_results_never_overwrite_each_other(tmp_path, monkeypatch):
    """Two queries without `save_as` in the same second (or at once) each keep their own file."""
    same_second = SimpleNamespace(time=lambda: 1_764_000_000.0, perf_counter=time.perf_counter)
    monkeypatch.setattr(steps, "time", same_second)
    saved = []
    for n in (1, 2):
        request = StepRequest(kind="sql", session_id="s-steps", code=f"SELECT {n} AS n", timeout_s=30)
        result = run_step(request, tmp_path, None)
        assert result.ok, result.error
        saved.append(result.saved_as)
    assert saved[0] != saved[1] and all(name.startswith("sql_") for name in saved)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == sorted(saved)
    named = run_step(
        StepRequest(
            kind="sql", session_id="s-steps", code="SELECT 3 AS n", timeout_s=30, save_as="three.parquet"
        ),
        tmp_path,
        None,
    )
    assert named.saved_as == "three.parquet"
