"""A bad setting ends every command with one sentence naming the variable, exit code 2, no traceback —
in-process through the typer app for the whole matrix, and as real subprocesses for the cases a
newcomer hits first (a bad REDIS_URL, a DATATHREAD_HOME that is a file or not writable)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer.main
from typer.testing import CliRunner

from bot.cli import app
from bot.log_setup import LOG_LEVEL_HELP, parse_level
from core.config import load_settings
from core.config_types import ELSEWHERE, HOME_PARTS
from tests.fakes.anthropic_api import text
from tests.fakes.cli import DATATHREAD, run

ROOT = os.geteuid() == 0

COMMANDS = [
    ["ask", "hi"],
    ["chat"],
    ["serve"],
    ["slack", "--socket"],
    ["doctor"],
    ["export", "abc"],
    ["audit"],
    ["teams-package"],
]
BAD = [
    ({"REDIS_URL": "notaurl"}, "REDIS_URL"),
    ({"REDIS_URL": "redis://:hunter2@127.0.0.1:99999/0"}, "REDIS_URL"),  # was a traceback, exit 1
    ({"REDIS_URL": "redis://127.0.0.1:6379/abc"}, "REDIS_URL"),  # was database 0, unsaid
    ({"DATATHREAD_HOME": "/dev/null"}, "DATATHREAD_HOME"),
    ({"DATATHREAD_HOME": ""}, "DATATHREAD_HOME"),  # was the working directory, state scattered there
    ({"DATATHREAD_MODEL": ""}, "DATATHREAD_MODEL"),  # was the model id "": "model not found" at each question
    ({"ANTHROPIC_BASE_URL": "localhost:8080"}, "ANTHROPIC_BASE_URL"),
    ({"DATATHREAD_SLACK_API_URL": "slack"}, "DATATHREAD_SLACK_API_URL"),
    ({"MICROSOFT_APP_ID": "not-a-guid"}, "MICROSOFT_APP_ID"),
    ({"MICROSOFT_APP_TYPE": "Bogus"}, "MICROSOFT_APP_TYPE"),
    ({"MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555"}, "MICROSOFT_APP_TENANT_ID"),
    ({"MICROSOFT_APP_TENANT_ID": "not a tenant"}, "MICROSOFT_APP_TENANT_ID"),
    ({"DATATHREAD_STEP_TIMEOUT": "0"}, "DATATHREAD_STEP_TIMEOUT"),
    ({"DATATHREAD_MODEL_TIMEOUT": "soon"}, "DATATHREAD_MODEL_TIMEOUT"),
    ({"DATATHREAD_MODEL_TIMEOUT": "inf"}, "DATATHREAD_MODEL_TIMEOUT"),
    ({"DATATHREAD_SLASH_COMMAND": "ask"}, "DATATHREAD_SLASH_COMMAND"),
    ({"DATATHREAD_TABLE_NOTES": "/nonexistent/notes.yml"}, "DATATHREAD_TABLE_NOTES"),
    ({"SLACK_BOT_TOKEN": "hello"}, "SLACK_BOT_TOKEN"),
    ({"SLACK_APP_TOKEN": "xoxb-where-the-app-token-goes"}, "SLACK_APP_TOKEN"),
    # `C1=` was an empty allowlist (every dataset of GCP_PROJECT); an entry without `=` was dropped unsaid
    ({"DATATHREAD_CHANNEL_DATASETS": "C1="}, "DATATHREAD_CHANNEL_DATASETS"),
    ({"DATATHREAD_CHANNEL_DATASETS": "myproj.finance"}, "DATATHREAD_CHANNEL_DATASETS"),
]


def one_sentence(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.parametrize(("env", "variable"), BAD, ids=[v for _, v in BAD])
def test_every_command_refuses_a_bad_setting_in_one_sentence(env, variable, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    base = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    for command in COMMANDS:
        result = CliRunner().invoke(app, command, env={**base, **env})
        assert result.exit_code == 2, (command, result.output)
        line = one_sentence(result.output)
        assert line.startswith("error: ") and variable in line, (command, line)
    assert not (tmp_path / "home").exists()  # refused before anything was created
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nor in the working directory


def test_uncommented_empty_lines_of_env_example_start_every_command(tmp_path, monkeypatch):
    """`# ANTHROPIC_BASE_URL=` uncommented in .env once stopped every command ("ANTHROPIC_BASE_URL= is not
    an http(s) URL"): an empty optional setting is unset, here the default endpoint."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "ANTHROPIC_BASE_URL=\nREDIS_URL=\nDATATHREAD_ISOLATION=\nMICROSOFT_APP_ID=\n"
    )
    env = {"ANTHROPIC_BASE_URL": None, "DATATHREAD_HOME": str(tmp_path / "home")}  # conftest's fake URL out
    result = CliRunner().invoke(app, ["audit"], env=env)
    assert result.exit_code == 0 and "error" not in result.output, result.output


MISSPELT = "warning: DATATHREAD_ISOLATON is not a datathread setting (did you mean DATATHREAD_ISOLATION?); it is ignored."


def test_a_misspelled_setting_is_named_and_the_answer_still_comes(home, fake_model):
    """DATATHREAD_ISOLATON=strict once ran without strict isolation and without a word: each unknown
    DATATHREAD_* name of the environment and of .env is named once on stderr, with the closest setting,
    as is a near miss of another name datathread reads and a .env line that is no setting at all; the
    command goes on. Test hooks and the notebook's own variable are not settings and not typos."""
    fake_model.enqueue(text("42."))
    (home.parent / ".env").write_text(
        "DATATHREAD_MAX_STEP=4\nthis line is no setting\nDATATHREAD_ISOLATON=strict\nSLACK_SIGNNG_SECRET=x\n"
    )
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "DATATHREAD_ISOLATON": "strict",
        "DATATHREAD_WAREHOUSE_PATH": str(home / "warehouse" / "nycflights13.duckdb"),
        "DATATHREAD_TEST_PREPARE": "off",
    }
    result = run(["ask", "the answer?"], home, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "42."
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]  # after: "session: …"
    assert warnings == [
        "warning: .env line 2 is not NAME=value; it is ignored.",  # was python-dotenv's line, twice
        MISSPELT,
        "warning: DATATHREAD_MAX_STEP is not a datathread setting (did you mean DATATHREAD_MAX_STEPS?); "
        "it is ignored.",
        "warning: SLACK_SIGNNG_SECRET is not a setting datathread reads (did you mean SLACK_SIGNING_SECRET?); "
        "it is ignored.",
    ]
    assert "python-dotenv" not in result.stderr


def test_every_command_names_a_misspelled_setting_before_it_checks_the_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "DATATHREAD_ISOLATON": "strict",
        "DATATHREAD_HOME": "/dev/null",
    }
    for command in COMMANDS:
        result = CliRunner().invoke(app, command, env=env)
        assert result.exit_code == 2, (command, result.output)
        lines = result.output.splitlines()
        assert lines[0] == MISSPELT and lines[1].startswith("error: DATATHREAD_HOME") and len(lines) == 2, (
            lines
        )


def test_home_that_is_a_file_and_redis_url_in_subprocesses(home):
    afile = home.parent / "afile"
    afile.write_text("not a directory")
    for command, env, words in [
        (["ask", "hi"], {"REDIS_URL": "notaurl"}, "REDIS_URL is not a Redis URL"),
        (["ask", "hi"], {"REDIS_URL": "redis://:hunter2@127.0.0.1:99999/0"}, "REDIS_URL has a port"),
        (["chat"], {"DATATHREAD_HOME": str(afile)}, "exists and is not a directory"),
    ]:
        result = run(command, home, env={"ANTHROPIC_API_KEY": "sk-ant-test-000000", **env})
        assert result.returncode == 2, result.stderr
        assert words in one_sentence(result.stderr) and "hunter2" not in result.stderr


def closed_to_this_user(path, user_mode: int, *, own: bool = False) -> list[str]:
    """Make `path` one this user cannot write: as an ordinary user chmodded to `user_mode`; as root
    given to nobody (`own`: kept, and chmodded too), and the returned command prefix drops root's
    override capabilities (setpriv), because root may go anywhere."""
    if os.geteuid() != 0 or own:
        path.chmod(user_mode)
    else:
        os.chown(path, 65534, 65534)
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] if os.geteuid() == 0 else []


def ask_where_closed(
    closed, user_mode: int, env: dict, *, cwd, own: bool = False
) -> subprocess.CompletedProcess:
    """`datathread ask hi` (with a key, `env` and no other ANTHROPIC_/DATATHREAD_ variable) where
    `closed` is one this user cannot write (`closed_to_this_user`); opened again (0755) after."""
    prefix = closed_to_this_user(closed, user_mode, own=own)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD"))} | {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        **env,
    }
    try:
        return subprocess.run(
            [*prefix, DATATHREAD, "ask", "hi"], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
        )
    finally:
        closed.chmod(0o755)


def run_below_a_closed_directory(
    tmp_path, name: str, *, mode: int, user_mode: int, home: str, command: list[str]
):
    """Run `datathread COMMAND` with DATATHREAD_HOME=<name>/<home>, where <name> is closed to this user:
    as an ordinary user it is chmodded to `user_mode`; as root it belongs to nobody (mode `mode`) and
    root's override capabilities are dropped (setpriv), because root may go anywhere."""
    parent = tmp_path / name
    parent.mkdir(mode=mode)
    prefix = closed_to_this_user(parent, user_mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD"))}
    env |= {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(parent / home)}
    try:
        result = subprocess.run(
            [*prefix, DATATHREAD, *command], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
        )
    finally:
        parent.chmod(mode)
    return parent, result


def test_home_not_writable_by_this_user(tmp_path):
    """Real permission checks: a 0755 directory of another owner (root: with its overrides dropped)."""
    # `serve` only: the in-process matrix covers the other commands
    parent, result = run_below_a_closed_directory(
        tmp_path, "theirs", mode=0o755, user_mode=0o555, home="home", command=["serve"]
    )
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert "DATATHREAD_HOME" in line and "not writable by this user" in line
    assert not (parent / "home").exists()


def test_the_default_home_not_writable_is_named_by_its_path(tmp_path):
    """No DATATHREAD_HOME, and ./.datathread is another user's: the sentence said only "DATATHREAD_HOME
    is not writable by this user", leaving a newcomer who never set it to guess which folder that is."""
    home = tmp_path / ".datathread"
    home.mkdir(mode=0o755)
    result = ask_where_closed(home, 0o555, {}, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert (
        line == f"error: DATATHREAD_HOME (default ./.datathread) is not writable by this user; {ELSEWHERE}."
    ), line


def test_a_checkout_another_user_owns_says_where_to_keep_state_instead(tmp_path):
    """A read-only checkout (root's, run by another user): ./.datathread cannot be made there, and the
    sentence said so without saying what to do — set DATATHREAD_HOME, as the disk-full one says."""
    checkout = tmp_path / "checkout"
    checkout.mkdir(mode=0o755)
    result = ask_where_closed(checkout, 0o555, {}, cwd=checkout)
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert line == (
        "error: DATATHREAD_HOME (default ./.datathread) does not exist, and cannot be created: "
        f"{checkout} is not writable by this user; {ELSEWHERE}."
    ), line
    assert not (checkout / ".datathread").exists()


@pytest.mark.parametrize("part", HOME_PARTS)
def test_a_part_of_home_another_user_made_is_one_sentence(part, tmp_path):
    """`sudo datathread chat` once, then an ordinary run: `logs/`, `warehouse/`… belong to root. That
    was a traceback from logging or DuckDB; now one sentence naming the folder, before anything runs.
    Real permissions: as an ordinary user the folder is chmodded closed; as root it belongs to nobody
    and root's override capabilities are dropped (setpriv)."""
    home = tmp_path / "home"
    closed = home / part
    closed.mkdir(parents=True)
    # nothing answers at ANTHROPIC_BASE_URL: the old code went on to ask it
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "DATATHREAD_HOME": str(home)}
    result = ask_where_closed(closed, 0o555, env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert "DATATHREAD_HOME" in line and f"has a {part}/ folder this user cannot write" in line, line
    assert sorted(p.name for p in home.iterdir()) == [part]  # refused before anything was made
    # root's run closed it by giving it to nobody; an ordinary user's by chmod: each is told its remedy
    remedy = "made by another user, a sudo run perhaps: give it back with chown" if ROOT else "chmod u+w"
    assert remedy in line, line


def test_a_part_of_home_this_user_made_read_only_says_chmod_not_chown(tmp_path):
    """It guessed "made by another user, a sudo run perhaps" for the user's own read-only folder."""
    home = tmp_path / "home"
    closed = home / "logs"
    closed.mkdir(parents=True)
    # this user's own, 0555; as root too, with its overrides dropped so that 0555 holds
    result = ask_where_closed(closed, 0o555, {"DATATHREAD_HOME": str(home)}, cwd=tmp_path, own=True)
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert line.endswith(
        "logs; it is read-only: make it writable with chmod u+w, or set DATATHREAD_HOME elsewhere)."
    ), line


def test_a_bad_secret_is_named_but_never_echoed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["ask", "hi"], env={**env, "SLACK_BOT_TOKEN": "xoxp-a-user-token-4242"})
    line = one_sentence(result.output)
    assert result.exit_code == 2 and "SLACK_BOT_TOKEN is not a bot token" in line, line
    assert "4242" not in result.output


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("sk-ant-api03-4242\u00fc\u00f1", "contains a character that is not ASCII (a typographic quote?)"),
        ("sk-ant-api03-4242 copied with prose", "contains a space or a quote inside it"),
        ('"sk-ant-api03-4242"', "contains a space or a quote inside it"),  # quoted in the environment
    ],
    ids=["non-ascii", "space", "quotes"],
)
def test_a_key_no_http_header_can_carry_is_refused_without_being_echoed(key, words, tmp_path, monkeypatch):
    """It went out as a header: "could not reach the Claude API" from `ask`, a raw UnicodeEncodeError
    from `doctor`. Its name and what is wrong, never the key (SecretStr behind a validator was echoed
    at first: the secret check did not look inside Annotated)."""
    monkeypatch.chdir(tmp_path)
    for command in (["ask", "hi"], ["doctor"]):
        env = {"ANTHROPIC_API_KEY": key, "DATATHREAD_HOME": str(tmp_path / "home")}
        result = CliRunner().invoke(app, command, env=env)
        line = one_sentence(result.output)
        assert result.exit_code == 2 and line == f"error: ANTHROPIC_API_KEY {words}: copy it again.", line
        assert "4242" not in result.output
    padded = load_settings(_env_file=None, anthropic_api_key="  sk-ant-api03-ok\n")  # still trimmed
    assert padded.anthropic_api_key.get_secret_value() == "sk-ant-api03-ok"


@pytest.mark.parametrize("name", ["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"])
def test_a_slack_secret_no_http_header_can_carry_is_refused_without_being_echoed(name, tmp_path, monkeypatch):
    """A token pasted with a typographic quote or a letter of the prose around it passed the prefix
    check and failed only inside aiohttp, at the first call; a signing secret so, as every request's
    signature refused."""
    monkeypatch.chdir(tmp_path)
    prefix = {"SLACK_BOT_TOKEN": "xoxb-", "SLACK_APP_TOKEN": "xapp-"}.get(name, "")
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    for value, words in [
        (f"{prefix}4242\u2019", "contains a character that is not ASCII (a typographic quote?)"),
        (f"{prefix}4242 and", "contains a space or a quote inside it"),
    ]:
        result = CliRunner().invoke(app, ["doctor"], env={**env, name: value})
        line = one_sentence(result.output)
        assert result.exit_code == 2 and line == f"error: {name} {words}: copy it again.", line
        assert "4242" not in result.output


@pytest.mark.parametrize(
    "name", ["DATATHREAD_SLACK_API_URL", "DATATHREAD_PUBLIC_URL", "DATATHREAD_TEAMS_SERVICE_URL"]
)
def test_a_login_in_a_service_url_is_refused_without_being_echoed(name, tmp_path, monkeypatch):
    """None of these services takes a login in its URL: Slack's failed inside aiohttp ("Cannot combine
    AUTHORIZATION header with … credentials encoded in URL"), and the public URL would have put the
    password into every download link. (ANTHROPIC_BASE_URL may carry one: a gateway's.)"""
    monkeypatch.chdir(tmp_path)
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["doctor"], env={**env, name: "https://x:pw4242@example.com/api/"})
    line = one_sentence(result.output)
    assert result.exit_code == 2, line
    assert line == (
        f"error: {name}=https://[redacted]@example.com/api/ holds a user name or password "
        "(user:password@): leave them out."
    ), line
    assert "pw4242" not in result.output
    proxied = load_settings(_env_file=None, anthropic_base_url="https://x:pw4242@gateway.example/")
    assert proxied.anthropic_base_url == "https://x:pw4242@gateway.example/"


def test_a_link_secret_too_short_to_sign_safely_is_refused_without_being_echoed(tmp_path, monkeypatch):
    """A download link is an HMAC under DATATHREAD_LINK_SECRET: a word-long key can be recovered from
    one link offline, and then every workspace file could be fetched. 32 characters (what the docs
    ask for) are taken as they are."""
    monkeypatch.chdir(tmp_path)
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["ask", "hi"], env={**env, "DATATHREAD_LINK_SECRET": "hunter2-4242"})
    line = one_sentence(result.output)
    assert result.exit_code == 2 and "DATATHREAD_LINK_SECRET is too short" in line, line
    assert "at least 32" in line and "4242" not in result.output
    assert load_settings(_env_file=None, link_secret="k" * 32).link_secret.get_secret_value() == "k" * 32


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET"),
        ({"SLACK_SIGNING_SECRET": "abc"}, "SLACK_BOT_TOKEN"),
        (
            {"MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555", "MICROSOFT_APP_TYPE": "MultiTenant"},
            "MICROSOFT_APP_PASSWORD",
        ),
        ({"MICROSOFT_APP_PASSWORD": "secret"}, "MICROSOFT_APP_ID"),
    ],
)
def test_serve_refuses_half_a_slack_or_teams_setup_at_start(given, missing, tmp_path, monkeypatch):
    """One of the two settings without the other started as if all were well, then answered every
    Slack request with a 503, or failed every Teams answer at sign-in (Teams' password without its
    app id: /api/messages in loopback-only mode); now `serve` says which is missing before it listens."""
    monkeypatch.chdir(tmp_path)
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home"), **given}
    result = CliRunner().invoke(app, ["serve", "--port", "0"], env=env)
    line = one_sentence(result.output)
    assert result.exit_code == 2 and f"but {missing} is not" in line, line


def test_a_broken_table_notes_file_stops_chat_and_ask_in_one_sentence(tmp_path, monkeypatch):
    """On the demo warehouse the notes were not read at all, so a broken file went unnoticed."""
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "notes.yml"
    notes.write_text("tables: [\n")
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # never reached: the notes are read first
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "DATATHREAD_TABLE_NOTES": str(notes),
    }
    for command in (["ask", "hi"], ["chat"]):
        result = CliRunner().invoke(app, command, env=env, input="")
        line = one_sentence(result.output)
        assert result.exit_code == 2 and "DATATHREAD_TABLE_NOTES" in line and "not valid YAML" in line, line


def test_the_docs_placeholder_key_is_named_before_any_call(tmp_path, monkeypatch):
    """`.env.example` ships `ANTHROPIC_API_KEY=sk-ant-...`: copied as it is, the API said only that the
    key was rejected ("an admin needs to check it"), after a round trip."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the .env's key is the one read
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-...\n")
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    for command in (["ask", "hi"], ["chat"], ["serve"]):
        result = CliRunner().invoke(app, command, env=env, input="")
        line = one_sentence(result.output)
        assert result.exit_code == 2 and "still the placeholder" in line, (command, line)
    result = CliRunner().invoke(app, ["doctor"], env={**env, "COLUMNS": "300"})
    assert "still the placeholder" in result.output and result.exit_code == 1, result.output


def test_version_names_the_release_the_package_version_and_the_commit(tmp_path):
    """`datathread 0.1.0` was all it said, for releases 880 commits apart (core/release.py)."""
    from importlib.metadata import version

    from core.release import ROOT as CHECKOUT
    from core.release import checkout_commit

    commit = checkout_commit()
    assert commit or not (CHECKOUT / ".git").exists()  # a checkout's commit is always found
    release = f"{version('datathread')}+{commit}" if commit else version("datathread")

    def printed(**env: str) -> str:
        result = subprocess.run(
            [DATATHREAD, "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert printed() == f"datathread {release}"
    # Set at deploy time (the Modal image has no .git), it is the one named; a bad setting stops nothing.
    assert printed(DATATHREAD_RELEASE="1.2.3+abcdef123456") == "datathread 1.2.3+abcdef123456"
    assert printed(DATATHREAD_STEP_TIMEOUT="nan") == f"datathread {release}"


def test_audit_format_accepts_only_supported_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"DATATHREAD_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["audit", "--format", "xml"], env=env)
    assert result.exit_code == 2 and "--format" in result.output and "jsonl" in result.output
    result = CliRunner().invoke(app, ["audit", "--format", "csv"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("turn_id,")  # the CSV is stdout; a note may go to stderr


# Every command with --log-level, and arguments that take it to the command's first sentence.
LOG_LEVEL_COMMANDS = {
    "ask": ["ask", "hi"],
    "chat": ["chat"],
    "serve": ["serve"],
    "slack": ["slack", "--socket"],
    "eval": ["eval", "--demo"],
    "schedule run-now": ["schedule", "run-now", "nope"],
    "forget": ["forget", "--thread", "nope"],
}


def log_level_options() -> dict[str, click.Parameter]:
    """The --log-level option of every command of the app, by command path."""

    def walk(command: click.Command, path: list[str]):
        for sub_name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, sub_name])
        for param in command.params:
            if "--log-level" in param.opts:
                yield " ".join(path), param

    return dict(walk(typer.main.get_command(app), []))


def test_every_log_level_is_the_one_definition():
    """`eval` had a copy without the callback: `--log-level info` was a TypeError, `bogus` an AttributeError."""
    options = log_level_options()
    assert set(options) == set(LOG_LEVEL_COMMANDS)
    for name, option in options.items():
        callback = getattr(option.callback, "__wrapped__", None)  # typer wraps it (functools.update_wrapper)
        assert callback is parse_level and option.help == LOG_LEVEL_HELP, name


def test_the_readme_names_the_commands_that_log_on_stderr_by_default():
    """It said logs reach stderr only with --log-level, while `serve` shows INFO and `eval` ERROR."""
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8").split())
    defaults = {name: option.default for name, option in log_level_options().items() if option.default}
    assert defaults  # serve and eval
    for name, level in defaults.items():
        assert f"`{name}` shows `{level}`" in readme, name


@pytest.mark.parametrize("name", sorted(LOG_LEVEL_COMMANDS))
def test_log_level_is_documented_and_checked(name, tmp_path, monkeypatch):
    command = LOG_LEVEL_COMMANDS[name]
    monkeypatch.chdir(tmp_path)
    help_text = CliRunner().invoke(app, [*name.split(), "--help"], env={"COLUMNS": "200"}).output
    assert "--log-level" in help_text and "DEBUG" in help_text and "datathread.log" in help_text
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "ANTHROPIC_API_KEY": None, "COLUMNS": "200"}
    result = CliRunner().invoke(app, [*command, "--log-level", "LOUD"], env=env)
    assert result.exit_code == 2 and "'LOUD' is not one of DEBUG, INFO, WARNING, ERROR" in result.output
    # Any case: the command goes on to its own sentence (no key, no such schedule), not a traceback.
    result = CliRunner().invoke(app, [*command, "--log-level", "info"], env=env, input="")
    assert result.exit_code == 2, result.output
    assert one_sentence(result.output).startswith("error: ")


def test_home_under_a_directory_this_user_cannot_search(tmp_path):
    """DATATHREAD_HOME=/root/x as an ordinary user: Python 3.11's Path.exists raises PermissionError on a
    parent the user may not search; that is one sentence and exit 2, not a traceback."""
    _, result = run_below_a_closed_directory(
        tmp_path, "closed", mode=0o700, user_mode=0o000, home="x/home", command=["ask", "hi"]
    )
    assert result.returncode == 2, result.stderr
    line = one_sentence(result.stderr)
    assert "DATATHREAD_HOME" in line and "cannot be reached" in line


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["ask", "hi"], ["chat"]])
def test_a_back_end_this_host_lacks_is_one_sentence(command, tmp_path, monkeypatch):
    """DATATHREAD_ISOLATION naming a back end that is not here (Seatbelt is macOS's), checked up front:
    before, `serve`'s turn worker failed at start and uvicorn printed a traceback; `ask` and `chat`
    start their fork server with the first step, so nothing else would catch it before a question."""
    monkeypatch.chdir(tmp_path)
    absent = "landlock" if sys.platform == "darwin" else "seatbelt"
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "DATATHREAD_ISOLATION": absent,
    }
    result = CliRunner().invoke(app, command, env=env, input="")
    assert result.exit_code == 2, result.output
    line = one_sentence(result.output)
    assert line.startswith(f"error: DATATHREAD_ISOLATION={absent}") and "datathread doctor" in line


@pytest.mark.parametrize(
    ("content", "sentence"),
    [
        ("build-host-7\n", "is not a service-account JSON key file."),
        ('{"type": "gdch_service_account"}', "holds 'gdch_service_account' credentials, which datathread"),
    ],
    ids=["not_json", "unsupported_type"],
)
def test_a_key_file_that_is_no_key_is_one_sentence_naming_it(content, sentence, tmp_path, monkeypatch):
    """GOOGLE_APPLICATION_CREDENTIALS naming some other file (/etc/hostname, say) is said in words,
    not as google.auth's (message, JSONDecodeError(...)) tuple; so is a type datathread does not load."""
    monkeypatch.chdir(tmp_path)
    key = tmp_path / "hostname"
    key.write_text(content)
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "p",
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
    }
    result = CliRunner().invoke(app, ["ask", "hi"], env=env)
    assert result.exit_code == 2, result.output
    assert one_sentence(result.output).startswith(f"error: GOOGLE_APPLICATION_CREDENTIALS ({key}) {sentence}")


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_a_settings_file_that_is_not_utf8_is_one_sentence(encoding, tmp_path, monkeypatch):
    """PowerShell 5's `>` writes UTF-16; an editor may save Latin-1: every command was a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes("ANTHROPIC_API_KEY=sk-ant-test-000000\n# café\n".encode(encoding))
    for command in (["audit"], ["ask", "hi"]):
        result = CliRunner().invoke(app, command, env={"DATATHREAD_HOME": str(tmp_path / "home")})
        assert result.exit_code == 2, result.output
        assert (
            one_sentence(result.output)
            == "error: The settings file .env is not UTF-8 text: save it as UTF-8."
        )


def test_slack_socket_without_its_tokens_says_so_before_building_anything(tmp_path, monkeypatch):
    """In a fresh directory `slack --socket` without a token built the demo warehouse (35 s on a busy
    host) and started the sandbox's checks before it said "Set SLACK_BOT_TOKEN"."""
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    key = {"ANTHROPIC_API_KEY": "sk-ant-test-000000"}
    for env, sentence in (
        (key, "error: Set SLACK_BOT_TOKEN (xoxb-…) to run the Slack app."),
        (
            {**key, "SLACK_BOT_TOKEN": "xoxb-1"},
            "error: Set SLACK_APP_TOKEN (xapp-…, scope connections:write) for Socket Mode.",
        ),
        ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}, "error: No Claude API key"),
    ):
        result = CliRunner().invoke(app, ["slack", "--socket"], env={"DATATHREAD_HOME": str(home), **env})
        assert result.exit_code == 2 and one_sentence(result.output).startswith(sentence), result.output
        assert not (home / "warehouse").exists()


def test_a_stale_google_key_stops_only_what_uses_it(tmp_path, monkeypatch):
    """Other Google tools read GOOGLE_APPLICATION_CREDENTIALS too: a file gone or unreadable stopped
    the DuckDB demo (and doctor) with a sentence about BigQuery credentials it does not use."""
    monkeypatch.chdir(tmp_path)
    gone = tmp_path / "old-key.json"
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "GOOGLE_APPLICATION_CREDENTIALS": str(gone)}
    result = CliRunner().invoke(app, ["audit"], env=env)
    assert result.exit_code == 0 and "error" not in result.output, result.output
    for more in (
        {"DATATHREAD_WAREHOUSE": "bigquery", "GCP_PROJECT": "p"},
        {"DATATHREAD_MODEL_PROVIDER": "vertex"},
    ):
        result = CliRunner().invoke(app, ["audit"], env={**env, **more})
        assert result.exit_code == 2, result.output
        assert one_sentence(result.output) == f"error: GOOGLE_APPLICATION_CREDENTIALS={gone} is not a file."


def test_a_settings_file_that_cannot_be_read_is_one_sentence(tmp_path, monkeypatch):
    """A `.env` this user may not read (left by root, or mode 600 of another user) was a traceback from
    every command. Host root reads any file, so there the read fails another way (EIO)."""
    monkeypatch.chdir(tmp_path)
    if os.geteuid() == 0:
        (tmp_path / ".env").symlink_to("/proc/self/mem")  # a regular file whose first read is EIO
        why = "input/output error"
    else:
        (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-test-000000\n")
        (tmp_path / ".env").chmod(0)
        why = "permission denied"
    for command in (["audit"], ["ask", "hi"], ["doctor"]):
        result = CliRunner().invoke(app, command, env={"DATATHREAD_HOME": str(tmp_path / "home")})
        assert result.exit_code == 2, result.output
        assert one_sentence(result.output) == (
            f"error: The settings file .env cannot be read ({why}): fix its permissions or move it away."
        )


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["slack", "--socket"]])
@pytest.mark.parametrize(
    ("env", "sentence"),
    [
        (
            {"REDIS_URL": "redis://127.0.0.1:9/0"},
            "error: Redis at 127.0.0.1:9 is not reachable: connection refused.",
        ),
        (  # GCP_PROJECT unset too: said at once, not at the next run
            {"DATATHREAD_WAREHOUSE": "bigquery"},
            "error: No Google credentials for BigQuery: set GCP_SERVICE_ACCOUNT_JSON or "
            "GOOGLE_APPLICATION_CREDENTIALS (and GCP_PROJECT, the project that runs and pays for queries)",
        ),
    ],
)
def test_a_part_the_server_cannot_start_is_one_sentence_before_it_serves(
    command, env, sentence, tmp_path, monkeypatch
):
    """`serve` opened the store and the warehouse in the app's start-up, under uvicorn: an unreachable
    Redis or BigQuery without credentials was a 25-line traceback and exit 3 (`slack --socket`: exit 1)."""
    monkeypatch.chdir(tmp_path)
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GCP_SERVICE_ACCOUNT_JSON", "GCP_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    base = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "DATATHREAD_HOME": str(tmp_path / "home")}
    if command[0] == "slack":
        base |= {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
    else:
        base |= {"DATATHREAD_ISOLATION": "best"}  # strict, serve's default, may be refused on this host
    result = CliRunner().invoke(app, command, env={**base, **env})
    assert result.exit_code == 2, result.output
    assert one_sentence(result.output).startswith(sentence)


@pytest.mark.parametrize(
    "command", [["serve", "--port", "0"], ["ask", "hi"], ["chat"], ["slack", "--socket"]]
)
def test_modal_without_credentials_is_one_sentence_naming_what_to_set(command, tmp_path, monkeypatch):
    """DATATHREAD_SANDBOX=modal with no Modal token anywhere started as if all were well, and the first
    step failed inside the Modal client. Checked on this machine, without the network."""
    monkeypatch.chdir(tmp_path)
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "DATATHREAD_SANDBOX": "modal",
        "HOME": str(tmp_path),  # no ~/.modal.toml
        **{name: None for name in os.environ if name.startswith("MODAL_")},
    }
    if command[0] == "slack":  # its tokens are said first when missing: present here, never called
        env |= {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}
    result = CliRunner().invoke(app, command, env=env, input="")
    assert result.exit_code == 2, result.output
    line = one_sentence(result.output)
    assert line.startswith("error: DATATHREAD_SANDBOX=modal needs Modal credentials")
    assert "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in line and "modal token new" in line


def test_modal_credentials_in_the_home_file_let_chat_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".modal.toml").write_text('[default]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n')
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-test-000000",
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "DATATHREAD_SANDBOX": "modal",
        "HOME": str(tmp_path),
        **{name: None for name in os.environ if name.startswith("MODAL_")},
    }
    result = CliRunner().invoke(app, ["chat"], env=env, input="")  # no question: no step, no network
    assert result.exit_code == 0, result.output
    assert "Modal" not in result.output and "Resume with: datathread chat --session" in result.output
