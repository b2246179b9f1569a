"""`datathread export` as a newcomer runs it, in process over a real SQLite store: without `-o` the
notebook is named after the key `chat` printed and lands in the working directory; `-o -` writes it
to stdout for a pipe."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke

KEY = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}


def test_export_names_the_notebook_after_the_session_or_writes_it_to_stdout(home, fake_model):
    fake_model.enqueue(text("336,776 flights."))
    asked = invoke(
        ["ask", "how many flights?", "--session", "sales"],
        home,
        env={**KEY, "ANTHROPIC_BASE_URL": fake_model.url},
    )
    assert asked.returncode == 0, asked.stderr

    written = invoke(["export", "sales"], home)  # the working directory is home's parent
    assert written.returncode == 0, written.stderr
    path = home.parent / "sales.ipynb"  # not te-<24 hex>.ipynb
    assert written.stdout.strip() == "sales.ipynb" and path.is_file()
    cells = [c["source"] for c in json.loads(path.read_text())["cells"]]

    piped = invoke(["export", "sales", "-o", "-"], home)
    assert piped.returncode == 0, piped.stderr
    assert [c["source"] for c in json.loads(piped.stdout)["cells"]] == cells  # (cell ids are per export)
    assert "how many flights?" in piped.stdout
    assert not (home.parent / "-").exists()


def test_the_default_name_never_overwrites_a_notebook_of_someone_elses(home, fake_model):
    """`sales.ipynb` is a name people give their own notebooks: without `-o`, only an earlier export of
    this same thread is replaced (exporting again updates it); anything else stays, in one sentence."""
    fake_model.enqueue(text("336,776 flights."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    assert invoke(["ask", "how many flights?", "--session", "sales"], home, env=env).returncode == 0
    path = home.parent / "sales.ipynb"
    assert invoke(["export", "sales"], home).returncode == 0
    assert invoke(["export", "sales"], home).returncode == 0  # its own earlier export: updated

    theirs = b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    path.write_bytes(theirs)
    refused = invoke(["export", "sales"], home)
    assert refused.returncode == 2
    assert "sales.ipynb already exists here and is not an export of this thread" in refused.stderr
    assert path.read_bytes() == theirs
    assert invoke(["export", "sales", "-o", str(path)], home).returncode == 0  # named: as asked
    assert b"how many flights?" in path.read_bytes()


def test_a_folder_gets_the_default_name_inside_it(home, fake_model):
    """`-o somedir/` wrote a FILE named `somedir` (and printed that), and `-o somedir` for a folder that
    exists was refused: a folder, existing or ending in /, now gets `<key>.ipynb` inside it, as `cp` does."""
    fake_model.enqueue(text("336,776 flights."))
    env = {**KEY, "ANTHROPIC_BASE_URL": fake_model.url}
    assert invoke(["ask", "how many flights?", "--session", "sales"], home, env=env).returncode == 0
    for given, folder in (("new/", home.parent / "new"), (str(home.parent / "new"), home.parent / "new")):
        written = invoke(["export", "sales", "-o", given], home)
        assert written.returncode == 0, written.stderr
        assert written.stdout.strip() == str(Path(given) / "sales.ipynb")
        assert folder.is_dir() and b"how many flights?" in (folder / "sales.ipynb").read_bytes()

    theirs = home.parent / "new" / "sales.ipynb"
    theirs.write_text("{}")  # someone's own notebook: a folder names no file, so it stays
    refused = invoke(["export", "sales", "-o", "new/"], home)
    assert refused.returncode == 2 and theirs.read_text() == "{}"
    assert "new/sales.ipynb already exists and is not an export of this thread" in refused.stderr


def test_an_empty_output_is_one_sentence(home):
    refused = invoke(["export", "sales", "-o", ""], home)
    assert refused.returncode == 2, refused.stderr
    assert (
        refused.stderr.strip()
        == "error: -o is empty: name a notebook file, a folder to put it in, or - for stdout."
    )


def test_a_schedules_record_is_not_exported_as_a_thread(home):
    """SCHEDULES.md names `schedule:ID` sessions (in audit): exported, its created/paused events came out
    as questions and answers in `schedule:ID.ipynb`."""
    sid = invoke(
        ["schedule", "add", "--cron", "0 9 * * mon", "--surface", "slack", "--channel", "C1", "q"], home
    )
    assert sid.returncode == 0, sid.stderr
    result = invoke(["export", f"schedule:{sid.stdout.strip()}"], home)
    assert result.returncode == 2 and "is a schedule's record of changes, not a thread" in result.stderr
    assert not list(home.parent.glob("*.ipynb"))


def test_an_unreachable_redis_is_a_bad_setting_as_for_every_command(home):
    """`export` said the same sentence as `audit`, `schedule` and `ask` for a Redis nothing answers,
    but exited 1 where they exit 2."""
    from tests.fakes.redis_server import free_port

    nothing = f"redis://127.0.0.1:{free_port()}/0"
    result = invoke(["export", "te-abc", "-o", "-"], home, env={"REDIS_URL": nothing})
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Redis at 127.0.0.1" in result.stderr and "Traceback" not in result.stderr
