"""The README's quickstart commands are `make` targets that `.ci/run` relies on: what they run is
checked here by a dry run (`make -n`), which prints each recipe line without running it."""

from __future__ import annotations

import os
import subprocess
import sys
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


def make(*args: str, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`make ARGS` in the clone, with no PY, UV_CACHE_DIR or XDG_CACHE_HOME from the caller's shell."""
    base = {
        k: v for k, v in os.environ.items() if k not in ("PY", "UV_CACHE_DIR", "XDG_CACHE_HOME", "MAKEFLAGS")
    }
    command = [*prefix, "make", "--no-print-directory", *args]
    return subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=base | (env or {}), timeout=60
    )


def fake_python(where: Path, answer: str) -> Path:
    """An interpreter as the Makefile sees it: the Makefile asks each interpreter (PY, the venv's
    python) one question, answered `ok|old VERSION REAL_PATH`; this one answers `answer` to anything."""
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(f"#!/bin/sh\necho '{answer}'\n")
    where.chmod(0o755)
    return where


def fake_venv(where: Path, python: Path) -> Path:
    """A venv whose bin/python is `python` (a symlink, as `python -m venv` makes it)."""
    (where / "bin").mkdir(parents=True)
    (where / "pyvenv.cfg").write_text("home = /somewhere\n")
    (where / "bin" / "python").symlink_to(python)
    return where


def test_a_venv_made_by_another_interpreter_than_PY_is_made_again(tmp_path):
    """`make chat PY=python3.11` over the 3.10 venv a failed `make setup PY=python3.10` left failed in
    0.1 s with uv's "incompatible" error; a 3.13 venv ran on under PY=python3.12. Now a venv of
    another interpreter than a named PY is removed first, saying why; without PY it is kept."""
    real = os.path.realpath(sys.executable)
    other = fake_venv(
        tmp_path / "other", fake_python(tmp_path / "bin" / "python3.13", "ok 3.13.0 /opt/python3.13")
    )
    own = fake_venv(tmp_path / "own", Path(real))
    for venv, named, remade in ((other, True, True), (own, True, False), (other, False, False)):
        py = [f"PY={sys.executable}"] if named else []
        done = make("-n", "setup", f"VENV={venv}", *py)
        assert done.returncode == 0, done.stderr
        assert (f"rm -rf {venv}" in done.stdout.splitlines()) is remade, (venv, named, done.stdout)
    said = make("-n", "setup", f"VENV={other}", f"PY={sys.executable}").stdout
    assert f"is Python 3.13.0 (/opt/python3.13), not PY={sys.executable}" in said, said


def test_a_venv_older_than_311_is_made_again_even_without_PY(tmp_path):
    """A venv of Python 3.10 (an older setup's, an editor's) cannot hold datathread, whoever made it."""
    venv = fake_venv(
        tmp_path / "venv", fake_python(tmp_path / "bin" / "python3.10", "old 3.10.13 /opt/python3.10")
    )
    done = make("-n", "setup", f"VENV={venv}")
    assert f"rm -rf {venv}" in done.stdout.splitlines() and "older than the 3.11" in done.stdout, done.stdout


def test_a_python_older_than_311_is_one_sentence_before_anything_is_made(tmp_path):
    """`make setup PY=python3.10` made a venv, installed uv (20 s), then showed echoed recipe lines and
    uv's error, and left the venv behind: now one sentence at once, exit 2, and no venv."""
    py = fake_python(tmp_path / "bin" / "python3.10", "old 3.10.13 /opt/python3.10")
    venv = tmp_path / "venv"
    done = make("setup", f"PY={py}", f"VENV={venv}")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    said = done.stderr.splitlines()[0]
    assert said.startswith(
        f"error: datathread needs Python 3.11 or newer; PY={py} is 3.10.13; run make setup PY=python3.1"
    )
    assert said.endswith("."), said
    assert not venv.exists()


def test_a_python_that_does_not_run_is_one_sentence_and_the_venv_is_kept(tmp_path):
    venv = fake_venv(tmp_path / "venv", Path(os.path.realpath(sys.executable)))
    done = make("setup", "PY=no-such-python3", f"VENV={venv}")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith(
        "error: PY=no-such-python3 is not a Python that runs here; run make setup PY="
    )
    assert (venv / "pyvenv.cfg").exists()


SHOW_UV_CACHE = ("--eval", 'show-uv-cache: ; @echo "[$$UV_CACHE_DIR]"', "show-uv-cache")


def test_uv_caches_inside_the_venv_where_home_cannot_be_written(tmp_path):
    """A container running as an arbitrary uid (HOME=/, read-only): `make setup` failed with "Failed
    to initialize cache at /.cache/uv … Permission denied". Real permissions: the home is closed to
    this user (as root: root's override capabilities are dropped, since root may write anywhere)."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    prefix = ("setpriv", "--inh-caps=-all", "--bounding-set=-all") if os.geteuid() == 0 else ()
    try:
        closed = make(*SHOW_UV_CACHE, env={"HOME": str(home)}, prefix=prefix)
        xdg = make(*SHOW_UV_CACHE, env={"XDG_CACHE_HOME": str(home / "cache")}, prefix=prefix)
    finally:
        home.chmod(0o755)
    assert closed.stdout.strip() == xdg.stdout.strip() == f"[{ROOT / '.venv' / '.uv-cache'}]", closed.stderr
    assert make(*SHOW_UV_CACHE, env={"HOME": str(home)}).stdout.strip() == "[]"  # writable: uv's own
    given = make(*SHOW_UV_CACHE, env={"HOME": "/", "UV_CACHE_DIR": str(tmp_path / "c")}, prefix=prefix)
    assert given.stdout.strip() == f"[{tmp_path / 'c'}]"
