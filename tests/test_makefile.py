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


def test_make_lint_leaves_notebooks_exported_into_the_clone_alone(tmp_path):
    """`datathread export SID` writes SID.ipynb into the working directory — often the clone — and
    `make lint` (so `make test`) then failed on the notebook's imports. Lint's own commands, with the
    project's configuration, over a tree holding such a notebook and a real lint error beside it."""
    import json
    import sys

    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = {"cells": [{**cell, "source": ["import pandas as pd\n", "x=1"]}], "metadata": {}}
    (tmp_path / "s-1234.ipynb").write_text(json.dumps({**notebook, "nbformat": 4, "nbformat_minor": 5}))
    ruff = [sys.executable, "-m", "ruff"]
    for command in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run([*ruff, *command], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "module.py").write_text("import os\n")  # the check does run: it finds this one
    done = subprocess.run([*ruff, "check", "."], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1 and "module.py" in done.stdout and "s-1234" not in done.stdout
