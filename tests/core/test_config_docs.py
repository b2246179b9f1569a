"""The settings reference cannot drift: docs/CONFIGURATION.md's table and `.env.example` are what
`python -m core.config_docs` generates from core/config.py, every setting has a description, and every
variable the README and docs mention is a real setting."""

from __future__ import annotations

import re

import pytest

from core.config import Settings, load_settings
from core.config_docs import DOC, ENV_EXAMPLE, ROOT, env_example, env_names, render_doc, rows

# Read by an SDK or by a generated notebook, not by datathread's settings.
NOT_SETTINGS = {
    "DATATHREAD_WAREHOUSE_PATH",  # the exported notebook's own variable (docs/NOTEBOOKS.md)
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
}
MENTION = re.compile(
    r"\b(?:DATATHREAD|SLACK|MICROSOFT|ANTHROPIC|GCP|GOOGLE|REDIS|AWS|CLOUD_ML)_[A-Z0-9_]*[A-Z0-9]\b"
)
FIX = "run `.venv/bin/python -m core.config_docs` and commit the result"


def test_the_table_in_docs_is_generated_from_the_settings():
    assert render_doc(DOC.read_text()) == DOC.read_text(), FIX


def test_env_example_is_generated_from_the_settings():
    assert ENV_EXAMPLE.read_text() == env_example(), FIX


def test_every_setting_has_a_description_and_a_row():
    names = [env_names(field)[0] for field in Settings.model_fields]
    table = DOC.read_text()
    assert len(rows()) == len(names) == len(set(names))
    assert all(f"`{name}" in table for name in names)


def test_every_variable_the_docs_mention_is_a_setting():
    known = {name for field in Settings.model_fields for name in env_names(field)} | NOT_SETTINGS
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    unknown = {
        (page.name, name) for page in pages for name in MENTION.findall(page.read_text()) if name not in known
    }
    assert unknown == set(), "documented but not a setting in core/config.py"


SETTING_LINE = re.compile(r"^# ([A-Z][A-Z0-9_]*)=")
COMMENTED = [line for line in ENV_EXAMPLE.read_text().splitlines() if SETTING_LINE.match(line)]


def test_env_example_has_a_commented_line_for_every_setting_but_the_starters():
    assert len(COMMENTED) == len(Settings.model_fields) - 1  # ANTHROPIC_API_KEY ships uncommented


@pytest.mark.parametrize("line", COMMENTED, ids=lambda line: SETTING_LINE.match(line)[1])
def test_each_line_of_env_example_uncommented_as_it_is_gives_the_default(line, monkeypatch, tmp_path):
    """A newcomer uncommenting one line of the shipped .env.example and changing nothing gets a working
    setup with that setting's default: DATATHREAD_TURN_WORKERS=(depends on the host) stopped every
    command with "Input should be a valid integer"."""
    for field in Settings.model_fields:
        for name in env_names(field):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # DATATHREAD_HOME=.datathread is a folder here
    (tmp_path / ".env").write_text(line.removeprefix("# ") + "\n")
    defaults = load_settings(_env_file=None).model_dump()
    assert load_settings(_env_file=tmp_path / ".env").model_dump() == defaults
