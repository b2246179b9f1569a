"""Files the commands write where the user says (`-o`, `--output`, `--markdown`): a path that cannot be
written is one sentence and exit 2, before any work; a write that fails anyway is one sentence too.
They were tracebacks (IsADirectoryError, PermissionError, ENOSPC), `eval --output` after asking every
question."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bot.cli import app

APP = {"MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555", "MICROSOFT_APP_TYPE": "MultiTenant"}


def one_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path / "home"))
    (tmp_path / "adir").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--demo", "--output", "{out}"],
        ["eval", "--demo", "--markdown", "{out}"],
    ],
    ids=["eval-output", "eval-markdown"],  # teams-package, as export, puts its file in a folder given
)
def test_a_directory_given_as_the_file_is_one_sentence_before_any_work(command, place, fake_model):
    env = {**APP, "ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": fake_model.url}
    args = [a.format(out=place / "adir") for a in command]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {place / 'adir'} is a directory: name a file inside it"
    assert fake_model.requests == []  # eval asked nothing
    assert list((place / "adir").iterdir()) == []


def test_export_takes_a_directory_as_the_folder_of_its_default_name(place):
    """`export -o DIR` puts `<key>.ipynb` inside (tests/bot/test_cli_export.py); a session it cannot find
    is still one sentence, and nothing is written there."""
    result = CliRunner().invoke(app, ["export", "some-session", "-o", str(place / "adir")])
    assert result.exit_code == 1, result.output
    assert one_line(result.output).startswith("error: ") and "some-session" in result.output
    assert list((place / "adir").iterdir()) == []


def test_a_folder_this_user_cannot_write_is_named(place):
    """Real permissions: as root the check is the same call, so an ordinary user's folder is simulated
    by one that is not a directory at all (a file in the way)."""
    (place / "file").write_text("x")
    result = CliRunner().invoke(app, ["teams-package", "-o", str(place / "file" / "t.zip")], env=APP)
    assert result.exit_code == 2, result.output
    assert one_line(result.output).startswith(
        f"error: {place / 'file' / 't.zip'} cannot be written: its folder"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_a_write_that_fails_anyway_is_one_sentence(place):
    result = CliRunner().invoke(app, ["teams-package", "-o", "/dev/full"], env=APP)
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == "error: could not write /dev/full: No space left on device"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: checked as an ordinary user by .ci/run")
def test_an_unwritable_folder_is_one_sentence(place):
    closed = place / "closed"
    closed.mkdir(mode=0o555)
    result = CliRunner().invoke(app, ["teams-package", "-o", str(closed / "t.zip")], env=APP)
    assert result.exit_code == 2, result.output
    assert "is not writable by this user" in one_line(result.output)


@pytest.mark.parametrize("command", ["teams-package", "export"])
def test_a_path_that_cannot_even_be_looked_at_is_one_sentence(command, place):
    """Path.is_dir()/exists() raise what stat says unless it is "no such file": a 300-byte name
    (ENAMETOOLONG) here, and, as an ordinary user, a folder they may not enter (EACCES, below) were
    tracebacks from `export -o` and `teams-package -o`."""
    target = place / ("n" * 300 + ".zip")
    args = [command, *(["some-session"] if command == "export" else []), "-o", str(target)]
    result = CliRunner().invoke(app, args, env=APP)
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {target} cannot be written: file name too long"


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root enters any folder: checked as an ordinary user by .ci/run"
)
@pytest.mark.parametrize("command", ["teams-package", "export"])
def test_a_folder_this_user_cannot_enter_is_one_sentence(command, place):
    shut = place / "shut"
    shut.mkdir(mode=0o000)
    target = shut / "inner" / "x.zip"
    args = [command, *(["some-session"] if command == "export" else []), "-o", str(target)]
    try:
        result = CliRunner().invoke(app, args, env=APP)
    finally:
        shut.chmod(0o700)
    assert result.exit_code == 2, result.output
    assert one_line(result.output) == f"error: {target} cannot be written: permission denied"


OUTPUTS = {  # each command's file option, and export's folder form (`-o DIR/`, the default name inside)
    "export": ["export", "some-session", "-o", "{out}"],
    "export-folder": ["export", "some-session", "-o", "{out}/"],
    "teams-package": ["teams-package", "-o", "{out}"],
    "eval-output": ["eval", "--demo", "--output", "{out}"],
    "eval-markdown": ["eval", "--demo", "--markdown", "{out}"],
}


def missing_folder_said(command: str, target: Path, blocker: Path) -> str:
    why = f"does not exist, and cannot be created: {blocker}"
    if command == "export-folder":
        return f"error: {target}/ {why} is"
    return f"error: {target} cannot be written: its folder {target.parent} {why} is"


@pytest.mark.parametrize("command", OUTPUTS)
def test_a_folder_that_is_not_there_and_cannot_be_made_is_said_not_to_exist(command, place):
    """`export -o /missing/dir/file.ipynb` was refused as "not writable", and a newcomer checked
    permissions rather than the path typed: a folder that is not there, and cannot be made where it
    was named (a file in the way here; as an ordinary user, a folder they may not write: below), is
    said not to exist, and why it cannot be made. Nothing is asked or written."""
    (place / "file").write_text("x")
    target = place / "file" / "missing" / "out.ipynb"
    args = [a.format(out=target) for a in OUTPUTS[command]]
    result = CliRunner().invoke(app, args, env={**APP, "ANTHROPIC_API_KEY": "sk-ant-test-000000"})
    assert result.exit_code == 2, result.output
    said = one_line(result.output)
    assert said.startswith(missing_folder_said(command, target, place / "file")), said
    assert said.rstrip(".").endswith("is not a directory"), said


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: checked as an ordinary user by .ci/run")
@pytest.mark.parametrize("command", OUTPUTS)
def test_a_folder_that_is_not_there_under_one_this_user_cannot_write_is_said_not_to_exist(command, place):
    closed = place / "closed"
    closed.mkdir(mode=0o555)
    target = closed / "missing" / "out.ipynb"
    args = [a.format(out=target) for a in OUTPUTS[command]]
    result = CliRunner().invoke(app, args, env={**APP, "ANTHROPIC_API_KEY": "sk-ant-test-000000"})
    assert result.exit_code == 2, result.output
    said = one_line(result.output)
    assert said.startswith(missing_folder_said(command, target, closed)), said
    assert said.rstrip(".").endswith("is not writable by this user"), said
