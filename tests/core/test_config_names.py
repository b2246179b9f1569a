"""A `DATATHREAD_*` name that is not a setting is named, with the closest setting: table-driven over
the pure helper, and over every such name the repository itself uses (none may draw a warning)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config_names import names_given, setting_names, unknown_setting_warnings

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bDATATHREAD_[A-Z0-9_]*[A-Z0-9]\b")
# Modules that spell names wrong on purpose, to explain or to test the warning.
MISSPELLING_ON_PURPOSE = {
    ROOT / "core" / "config_names.py",
    ROOT / "bot" / "cli_common.py",
    Path(__file__).resolve(),
    ROOT / "tests" / "bot" / "test_cli_settings.py",
}


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (
            ["DATATHREAD_ISOLATON"],
            [
                "DATATHREAD_ISOLATON is not a datathread setting (did you mean DATATHREAD_ISOLATION?); "
                "it is ignored."
            ],
        ),
        (
            ["datathread_modl"],
            ["datathread_modl is not a datathread setting (did you mean DATATHREAD_MODEL?); it is ignored."],
        ),
        (
            ["DATATHREAD_SLACK_BOT_TOKEN"],
            [
                "DATATHREAD_SLACK_BOT_TOKEN is not a datathread setting (did you mean SLACK_BOT_TOKEN?); it is ignored."
            ],
        ),
        (["DATATHREAD_XYZZY"], ["DATATHREAD_XYZZY is not a datathread setting; it is ignored."]),
        (
            [
                "DATATHREAD_ISOLATION",
                "datathread_isolation",
                "DATATHREAD_MODEL_TIMEOUT",
                "AWS_DEFAULT_REGION",
            ],
            [],
        ),
        (["DATATHREAD_TEST_SPARE", "DATATHREAD_TEST_ANYTHING", "DATATHREAD_WAREHOUSE_PATH"], []),
        # not ours (another program's SLACK_ or AWS_ name), or not a name at all
        (
            ["HOME", "PATH", "SLACK_WEBHOOK_URL", "AWS_PROFILE", "DATATHREAD", "_X", "GOOGLE_CLOUD_PROJECT"],
            [],
        ),
        # a near miss of a name datathread reads that is not DATATHREAD_*: the missing-setting
        # sentence alone ("SLACK_SIGNING_SECRET is not set") left the typo to be found
        (
            ["SLACK_SIGNNG_SECRET", "slack_bot_tokn", "MICROSOFT_APP_PASWORD"],
            [
                "MICROSOFT_APP_PASWORD is not a setting datathread reads (did you mean MICROSOFT_APP_PASSWORD?); "
                "it is ignored.",
                "SLACK_SIGNNG_SECRET is not a setting datathread reads (did you mean SLACK_SIGNING_SECRET?); "
                "it is ignored.",
                "slack_bot_tokn is not a setting datathread reads (did you mean SLACK_BOT_TOKEN?); it is ignored.",
            ],
        ),
        (
            ["DATATHREAD_MAX_STEP", "DATATHREAD_MAX_STEP", "DATATHREAD_ISOLATON"],
            [
                "DATATHREAD_ISOLATON is not a datathread setting (did you mean DATATHREAD_ISOLATION?); it is ignored.",
                "DATATHREAD_MAX_STEP is not a datathread setting (did you mean DATATHREAD_MAX_STEPS?); it is ignored.",
            ],
        ),
    ],
)
def test_unknown_setting_warnings(names, expected):
    assert unknown_setting_warnings(names) == expected


def test_the_known_names_are_the_settings_aliases():
    assert {
        "DATATHREAD_ISOLATION",
        "ANTHROPIC_BASE_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    } <= setting_names()


def test_no_name_the_repository_uses_draws_a_warning():
    """Test hooks (DATATHREAD_TEST_*), the notebook's DATATHREAD_WAREHOUSE_PATH, CI's user: legitimate."""
    files = [
        path
        for path in [*ROOT.glob("*.md"), ROOT / "Makefile", *(ROOT / ".ci").iterdir()]
        + [p for d in ("core", "bot", "deploy", "tests", "docs", "bench") for p in (ROOT / d).rglob("*")]
        if path.is_file()
        and path.suffix in {"", ".py", ".md", ".yml", ".yaml", ".toml", ".sh"}
        and "__pycache__" not in path.parts
        and path.resolve() not in MISSPELLING_ON_PURPOSE
    ]
    used = {name for path in files for name in NAME.findall(path.read_text(errors="replace"))}
    assert {"DATATHREAD_TEST_SPARE", "DATATHREAD_WAREHOUSE_PATH", "DATATHREAD_CI_USER"} <= used
    assert unknown_setting_warnings(used) == []


def test_names_given_reads_the_dotenv_file_too(tmp_path, monkeypatch):
    monkeypatch.setenv("DATATHREAD_FROM_ENV", "1")
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# DATATHREAD_COMMENTED=1\nexport DATATHREAD_EXPORTED=1\nDATATHREAD_ISOLATON=strict\n"
    )
    names = names_given(env_file)
    assert {"DATATHREAD_FROM_ENV", "DATATHREAD_EXPORTED", "DATATHREAD_ISOLATON"} <= names
    assert "DATATHREAD_COMMENTED" not in names
    assert "DATATHREAD_ISOLATON" not in names_given(tmp_path / "absent.env")
    assert "DATATHREAD_ISOLATON" not in names_given(None)


def test_a_line_that_sets_no_readable_name_is_named(tmp_path):
    """`"oops=` is a binding to python-dotenv (of the name `"oops`, which no program can read): it was
    ignored without a word, where `NAME value` was warned about."""
    from core.config_names import unparsable_lines

    env = tmp_path / ".env"
    env.write_text('A=1\n"oops=\nNAME value\nexport B=2\nC.D=3\n')
    assert unparsable_lines(str(env)) == [
        f"{env} line {n} is not NAME=value; it is ignored." for n in (2, 3, 5)
    ]
