"""The README's quickstart commands are `make` targets that `.ci/run` relies on: what they run is
checked here by a dry run (`make -n`), which prints each recipe line without running it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dry_run(target: str) -> list[str]:
    done = subprocess.run(["make", "-n", target], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_test_runs_lint_then_the_whole_suite():
    """A target inserted into the test recipe once took its pytest line with it: `make test` (and so
    CI) passed having run no test at all."""
    lines = dry_run("test")
    lint = max(i for i, line in enumerate(lines) if "ruff format --check" in line)
    suite = [i for i, line in enumerate(lines) if " -m pytest " in line and line.rstrip().endswith(" tests")]
    assert suite and suite[-1] > lint, lines


def test_make_chat_starts_the_terminal_chat():
    assert any(line.rstrip().endswith("datathread chat") for line in dry_run("chat")), dry_run("chat")
