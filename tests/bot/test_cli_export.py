"""`datathread export` as a newcomer runs it, in process over a real SQLite store: without `-o` the
notebook is named after the key `chat` printed and lands in the working directory; `-o -` writes it
to stdout for a pipe."""

from __future__ import annotations

import json

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
