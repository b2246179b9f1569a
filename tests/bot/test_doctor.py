"""`datathread doctor` makes one real, cheap call per configured part, in parallel and under a timeout:
against the loopback fakes (scripted Messages API, fake Slack Web API, a real Redis, moto S3, BigQuery
REST through `responses`) everything configured is ok; a bogus key, an unknown model, a rejected
Slack token, a black-holed Redis and a missing bucket each fail on their own line, in one timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import boto3
import pytest
import responses
from moto import mock_aws
from typer.testing import CliRunner

from bot.cli import app
from bot.doctor import CHECK_TIMEOUT_S, SAFETY_TIMEOUT_S
from tests.fakes.bigquery_api import API, Answer, FakeBigQuery, service_account_key
from tests.fakes.black_hole import BlackHole
from tests.fakes.cli import DATATHREAD
from tests.fakes.process_output import Output
from tests.fakes.redis_server import RedisServer, free_port
from tests.fakes.slack_api import FakeSlackAPI

KEY = "sk-ant-doctor-000001"


@pytest.fixture
def slack_api():
    api = FakeSlackAPI().start()
    yield api
    api.stop()


@pytest.fixture
def aws(monkeypatch):
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="datalake")
        yield


def doctor_run(tmp_path, env: dict):
    """`datathread doctor` in process with a home under `tmp_path`, wide enough for whole rows."""
    base = {"DATATHREAD_HOME": str(tmp_path / "home"), "COLUMNS": "250", "AWS_REGION": "us-east-1"}
    return CliRunner().invoke(app, ["doctor"], env={**base, **env})


def doctor(tmp_path, env: dict) -> tuple[int, dict[str, tuple[str, str]], float]:
    started = time.monotonic()
    result = doctor_run(tmp_path, env)
    elapsed = time.monotonic() - started
    assert "Traceback" not in result.output
    rows = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0] and not cells[0].startswith("protection"):
            rows[cells[0]] = (cells[1], cells[2])
    return result.exit_code, rows, elapsed


def test_every_configured_part_is_reached(tmp_path, monkeypatch, fake_model, slack_api, aws):
    monkeypatch.chdir(tmp_path)
    fake_model.api_keys = {KEY}
    redis = RedisServer().start()
    bq = FakeBigQuery(API)
    bq.on_query("SELECT 1", Answer(rows=[[1]], bytes_processed=0))
    try:
        with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
            bq.register(mock)
            code, rows, _ = doctor(
                tmp_path,
                {
                    "ANTHROPIC_API_KEY": KEY,
                    "ANTHROPIC_BASE_URL": fake_model.url,
                    "DATATHREAD_MODEL": "claude-test",
                    "SLACK_BOT_TOKEN": "xoxb-doctor",
                    "SLACK_APP_TOKEN": "xapp-doctor",
                    "DATATHREAD_SLACK_API_URL": slack_api.url,
                    "REDIS_URL": redis.url,
                    "DATATHREAD_WAREHOUSE": "bigquery",
                    "GCP_PROJECT": "bill",
                    "DATATHREAD_BIGQUERY_API_URL": API,
                    "DATATHREAD_S3_BUCKETS": "datalake/raw",
                },
            )
    finally:
        redis.stop()
    assert code == 0, rows
    for part in ("model", "session store", "warehouse", "slack", "s3"):
        assert rows[part][0] == "ok", (part, rows[part])
    assert "key and model accepted" in rows["model"][1]
    host_port = redis.url.split("//", 1)[1].split("/")[0]
    assert rows["session store"][1] == f"Redis at {host_port} (ping ok)", rows["session store"]
    assert "@datathread in Fake" in rows["slack"][1] and "Socket Mode" in rows["slack"][1]
    assert rows["slack files"][0] == "ok" and "files:read granted" in rows["slack files"][1]
    assert rows["slack scopes"] == ("ok", "all 11 scopes of slack/manifest.yml granted")
    assert "dry run ok" in rows["warehouse"][1] and "datalake" in rows["s3"][1]
    assert rows["teams"][0] == "not configured"
    assert [c.method for c in slack_api.calls] == ["auth.test", "apps.connections.open"]
    assert any(r["configuration"].get("dryRun") for r in bq.inserts)


@pytest.mark.parametrize(
    ("scopes", "status", "said"),
    [
        ("chat:write,commands,files:write", "FAIL", "the bot token lacks files:read"),
        (None, "configured (not checked)", "did not list the token's scopes"),
    ],
    ids=["without-files-read", "no-header"],
)
def test_a_bot_token_without_files_read_is_its_own_row(
    tmp_path, monkeypatch, slack_api, scopes, status, said
):
    """An app installed before shared files were read has no `files:read`: Slack then answers every
    shared file with its sign-in page. The auth.test doctor already makes lists the token's scopes."""
    monkeypatch.chdir(tmp_path)
    slack_api.scopes = scopes
    _, rows, _ = doctor(
        tmp_path,
        {
            "SLACK_BOT_TOKEN": "xoxb-no-files-read",
            "SLACK_SIGNING_SECRET": "s3cr3t-s3cr3t",
            "DATATHREAD_SLACK_API_URL": slack_api.url,
        },
    )
    assert rows["slack"][0] == "ok", rows
    assert rows["slack files"][0] == status and said in rows["slack files"][1], rows["slack files"]
    if scopes:
        assert "reinstall the app" in rows["slack files"][1]
    assert [c.method for c in slack_api.calls] == ["auth.test"]  # the same one call


def test_a_bot_token_without_the_manifests_scopes_fails_naming_each(tmp_path, monkeypatch, slack_api):
    """Reinstalled after a manifest change without chat:write, im:history, mpim:history, users:read,
    assistant:write and files:write, doctor said ok (exit 0): it only looked for files:read. Then every
    answer was refused (`missing_scope`) and DMs never arrived."""
    monkeypatch.chdir(tmp_path)
    slack_api.scopes = "app_mentions:read,channels:history,commands,files:read,groups:history"
    env = {
        "SLACK_BOT_TOKEN": "xoxb-few-scopes",
        "SLACK_SIGNING_SECRET": "s3cr3t-s3cr3t",
        "DATATHREAD_SLACK_API_URL": slack_api.url,
    }
    code, rows, _ = doctor(tmp_path, env)
    assert code == 1 and rows["slack"][0] == "ok" and rows["slack scopes"][0] == "FAIL", rows
    # the row's detail, its folded lines joined
    lines = [line for line in doctor_run(tmp_path, env).output.splitlines() if "│" in line]
    start = next(n for n, line in enumerate(lines) if "slack scopes" in line)
    cells = [line.strip().split("│")[1:-1] for line in lines[start:]]
    end = next(n for n, c in enumerate(cells[1:], 1) if len(c) != 3 or c[0].strip())
    detail = " ".join(c[2].strip() for c in cells[:end])
    assert detail.startswith("the bot token lacks chat:write (every answer), "), detail
    for scope in ("im:history (DMs)", "mpim:history", "users:read", "assistant:write", "files:write"):
        assert scope in detail, detail
    assert "app_mentions:read" not in detail and "files:read" not in detail  # granted; its own row
    assert detail.endswith("add them to the app (slack/manifest.yml) and reinstall it"), detail
    assert rows["slack files"][0] == "ok"


def test_buckets_are_read_as_the_bot_reads_them(tmp_path, monkeypatch, aws):
    """`s3://datalake/raw` is a valid DATATHREAD_S3_BUCKETS entry (the bot strips the scheme), but doctor
    asked S3 for a bucket named "s3:" and failed it: "bucket s3:: Parameter validation failed"."""
    monkeypatch.chdir(tmp_path)
    # Not a test of time: on a host loaded 5x over, moto's first answers in this process took past 5 s.
    monkeypatch.setattr("bot.doctor.SAFETY_TIMEOUT_S", 60.0)
    _, rows, _ = doctor(tmp_path, {"DATATHREAD_S3_BUCKETS": "s3://datalake/raw, s3://datalake/curated/"})
    assert rows["s3"][0] == "ok" and "datalake" in rows["s3"][1] and "s3:" not in rows["s3"][1], rows["s3"]


def test_each_broken_part_fails_on_its_own_line_within_one_timeout(
    tmp_path, monkeypatch, fake_model, slack_api, aws
):
    monkeypatch.chdir(tmp_path)
    fake_model.api_keys = {"sk-ant-the-real-one"}
    slack_api.fail_methods["auth.test"] = "invalid_auth"
    hole = BlackHole().start()
    try:
        code, rows, elapsed = doctor(
            tmp_path,
            {
                "ANTHROPIC_API_KEY": "sk-ant-bogus-000000",
                "ANTHROPIC_BASE_URL": fake_model.url,
                "SLACK_BOT_TOKEN": "xoxb-bogus",
                "SLACK_SIGNING_SECRET": "s3cr3t-s3cr3t",
                "DATATHREAD_SLACK_API_URL": slack_api.url,
                "REDIS_URL": hole.url.replace("http://", "redis://"),
                "DATATHREAD_S3_BUCKETS": "missing-bucket",
                "MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555",
                "MICROSOFT_APP_PASSWORD": "not-a-real-secret",
                "MICROSOFT_APP_TENANT_ID": "contoso.onmicrosoft.com",
            },
        )
    finally:
        hole.stop()
    assert code == 1
    assert rows["model"] == (
        "FAIL",
        "anthropic · claude-sonnet-5-5: The Claude API key was rejected. An admin needs to check ANTHROPIC_API_KEY.",
    )
    assert (
        rows["slack"][0] == "FAIL"
        and "SLACK_BOT_TOKEN" in rows["slack"][1]
        and "invalid_auth" in rows["slack"][1]
    )
    assert rows["session store"][0] == "FAIL"
    assert rows["s3"][0] == "FAIL" and "missing-bucket" in rows["s3"][1]
    assert rows["teams"][0] == "FAIL" and "11111111-2222-3333-4444-555555555555" in rows["teams"][1]
    assert elapsed < SAFETY_TIMEOUT_S + 10  # parallel: about one timeout, not the sum of them


def test_an_unreachable_bigquery_is_said_with_its_cause(tmp_path, monkeypatch):
    """The key's token endpoint refuses connections: google's retry went on for 600 s, so the check was
    cut by the safety timeout and said "no answer within 5 s" (in 3.3 s, from a DNS failure). Now the
    product's bounded retry gives up first and its sentence names the cause."""
    monkeypatch.chdir(tmp_path)
    closed = f"http://127.0.0.1:{free_port()}"
    key = service_account_key(tmp_path / "key.json", f"{closed}/token")
    env = {
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "bill",
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
        "DATATHREAD_BIGQUERY_API_URL": closed,
    }
    code, rows, elapsed = doctor(tmp_path, env)
    status, detail = rows["warehouse"]
    assert code == 1 and status == "FAIL", rows
    assert detail.startswith("bigquery, project bill: Could not reach BigQuery within 2.5 s:"), detail
    assert "onnection refused" in detail, detail
    assert elapsed < SAFETY_TIMEOUT_S + 10


def test_at_80_columns_no_detail_is_cut(tmp_path, monkeypatch):
    """Piped or in a narrow terminal, a long word of a detail (the setting to use) came out as "b…":
    the details fold instead, and every word of what to do is there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "COLUMNS": "80", "ANTHROPIC_API_KEY": ""}
    result = CliRunner().invoke(app, ["doctor"], env=env)
    assert "…" not in result.output, result.output
    details = "".join(line.rstrip(" │").rsplit("│", 1)[-1].strip() for line in result.output.splitlines())
    assert "DATATHREAD_MODEL_PROVIDER=bedrock/vertex" in details, result.output


def test_a_proxy_login_in_the_claude_url_is_used_but_never_shown(tmp_path, monkeypatch, fake_model):
    """ANTHROPIC_BASE_URL=http://user:password@proxy/ is how some gateways take a login: doctor printed the
    password in its table, reached or not."""
    monkeypatch.chdir(tmp_path)
    fake_model.api_keys = {KEY}
    host = fake_model.url.split("//", 1)[1]
    for url, status in [
        (f"http://proxyuser:PROXYPASS99@{host}", "ok"),
        ("http://proxyuser:PROXYPASS99@127.0.0.1:9", "FAIL"),
    ]:
        env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": url, "DATATHREAD_MODEL": "claude-test"}
        result = doctor_run(tmp_path, env)
        model = next(line for line in result.output.splitlines() if line.strip("│ ").startswith("model"))
        assert status in model and "http://[redacted]@" in model, model
        assert "PROXYPASS99" not in result.output


def test_an_unknown_model_is_named(tmp_path, monkeypatch, fake_model):
    monkeypatch.chdir(tmp_path)
    code, rows, _ = doctor(
        tmp_path,
        {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake_model.url, "DATATHREAD_MODEL": "claude-nope"},
    )
    assert code == 1 and rows["model"][0] == "FAIL" and "DATATHREAD_MODEL" in rows["model"][1]
    assert CHECK_TIMEOUT_S <= 3


def test_checks_and_the_sandbox_probe_run_at_the_same_time(tmp_path, monkeypatch):
    """Three black-holed parts with 3 s timeouts: each fails on its own line after its own timeout
    (not the safety net), and they wait at the same time: each had reached its endpoint before the
    first one's timeout ran out (one after another, each would start a timeout after the last), so
    together they take about one timeout, not the 9 s they would one after another; the sandbox probe
    reports alongside. (Wall time alone, under 5 s with 2 s timeouts, failed on a loaded CI machine at
    5.7 s: the checks' own set-up and the sandbox probe take CPU the machine did not have.)"""
    from bot import doctor as doctor_module
    from bot import doctor_checks
    from core.config import load_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(doctor_checks, "CHECK_TIMEOUT_S", 3.0)
    monkeypatch.setattr(doctor_module, "SAFETY_TIMEOUT_S", 10.0)
    holes = [BlackHole().start() for _ in range(3)]
    try:
        env = {
            "DATATHREAD_HOME": str(tmp_path / "home"),
            "COLUMNS": "250",
            "AWS_REGION": "us-east-1",
            "ANTHROPIC_API_KEY": KEY,
            "ANTHROPIC_BASE_URL": holes[0].url,
            "REDIS_URL": holes[1].url.replace("http://", "redis://"),
            "DATATHREAD_S3_BUCKETS": "datalake",
            "DATATHREAD_S3_ENDPOINT_URL": holes[2].url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        doctor_checks.preload(load_settings())  # the imports, before the clock: the test times checks
        started = time.monotonic()
        result = CliRunner().invoke(app, ["doctor"], env=env)
        elapsed = time.monotonic() - started
    finally:
        for hole in holes:
            hole.stop()
    assert "Traceback" not in result.output and result.exit_code == 1, result.output
    lines = {line.strip("│ ").split("│")[0].strip(): line for line in result.output.splitlines()}
    for part in ("model", "session store", "s3"):
        assert "FAIL" in lines[part], (part, lines[part])
    assert "took too long" in lines["model"]
    assert "bucket datalake:" in lines["s3"] and "5 s" not in lines["s3"], lines["s3"]  # its own timeout
    redis_at = env["REDIS_URL"].removeprefix("redis://")  # named, not "a check": which store, which host
    assert f"Redis at {redis_at} did not answer within 3 s." in lines["session store"], lines["session store"]
    assert all(hole.connections for hole in holes)  # each check really went out to its endpoint
    assert "protection: back end" in result.output  # the probe's report, from its child process
    reached = [hole.accepted_at[0] for hole in holes]
    assert max(reached) - min(reached) < 3.0, f"one check waited for another: reached {reached}"
    assert elapsed < 9.0, (
        f"{elapsed:.1f} s: as long as the checks one after another (3 × 3 s)\n{result.output}"
    )


@pytest.mark.parametrize("status", [401, 403, 404, 413, 429, 500, 503, 529])
def test_the_model_check_says_what_the_bot_says_for_each_api_error(status):
    """doctor's model check avoids importing the Anthropic SDK; its sentences are the SDK path's."""
    import anthropic
    import httpx

    from bot.doctor_checks import model_status_sentence
    from core.model import describe_model_error

    request = httpx.Request("GET", "https://api.anthropic.com/v1/models/claude-test")
    response = httpx.Response(status, request=request, json={"error": {"message": "no"}})
    client = anthropic.Anthropic(api_key="sk-ant-test")
    error = client._make_status_error("no", body={"error": {"message": "no"}}, response=response)
    assert model_status_sentence(status) == describe_model_error(error)


def test_a_part_whose_library_cannot_be_imported_fails_on_its_own_line(tmp_path, monkeypatch, aws):
    """An install missing a part's library (AWS's botocore here) gets that part's row as FAIL with the
    reason, the other rows and the sandbox protections as usual — not a traceback from the up-front imports."""
    monkeypatch.chdir(tmp_path)
    for name in [m for m in list(sys.modules) if m.startswith(("boto3", "botocore"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "botocore", None)  # `import botocore.session` raises ImportError
    result = CliRunner().invoke(
        app,
        ["doctor"],
        env={
            "DATATHREAD_HOME": str(tmp_path / "home"),
            "COLUMNS": "250",
            "DATATHREAD_S3_BUCKETS": "datalake",
        },
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and result.exit_code == 1, result.output
    rows = {line.strip("│ ").split("│")[0].strip(): line for line in result.output.splitlines()}
    assert "FAIL" in rows["s3"] and "botocore" in rows["s3"], rows["s3"]
    assert "ok" in rows["session store"] and "protection: back end" in result.output


def test_modal_without_credentials_is_named_at_once(tmp_path, monkeypatch):
    """Before, the Modal line waited out its timeout in the Modal client's "Token missing"; the
    credentials are looked for on this machine first, and what to set is said."""
    monkeypatch.chdir(tmp_path)
    no_modal = {name: None for name in os.environ if name.startswith("MODAL_")}
    env = {
        "DATATHREAD_SANDBOX": "modal",
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "HOME": str(tmp_path),
        **no_modal,
    }
    code, rows, _ = doctor(tmp_path, env)
    assert code == 1 and rows["modal"][0] == "FAIL", rows
    assert "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in rows["modal"][1]


async def test_a_check_that_stops_on_a_sentence_of_ours_shows_it_without_a_class_name():
    """A malformed key file read "ConfigError: GOOGLE_APPLICATION_CREDENTIALS (…) is not a … key file."."""
    from bot.doctor import _bounded
    from core.config import ConfigError, load_settings

    async def refuses(settings):
        raise ConfigError("GOOGLE_APPLICATION_CREDENTIALS (/k.json) is not a service-account JSON key file.")

    async def crashes(settings):
        raise KeyError("x")

    settings = load_settings(_env_file=None)
    said = await _bounded("warehouse", refuses, settings)
    assert said.detail == "GOOGLE_APPLICATION_CREDENTIALS (/k.json) is not a service-account JSON key file."
    assert (await _bounded("warehouse", crashes, settings)).detail == "KeyError: 'x'"  # a bug shows its kind


def test_what_bounds_the_bill_is_listed_and_no_daily_model_budget_is_said_plainly(tmp_path, monkeypatch):
    """The daily model budgets are off by default: doctor says nothing bounds a day's Claude bill and
    which settings would; set, it lists them with the hourly, per-question and BigQuery limits."""
    monkeypatch.chdir(tmp_path)
    _, rows, _ = doctor(tmp_path, {"ANTHROPIC_API_KEY": ""})
    assert rows["limit: model, per day"] == (
        "OFF",
        "nothing bounds a day's Claude bill: set DATATHREAD_DAILY_TOKEN_BUDGET (all questions) or "
        "DATATHREAD_USER_DAILY_TOKEN_BUDGET (per person)",
    )
    assert rows["limit: questions an hour"] == ("on", "60 per person, 300 per channel")
    assert "limit: BigQuery bytes" not in rows  # DuckDB bills nothing

    closed = f"http://127.0.0.1:{free_port()}"
    env = {
        "ANTHROPIC_API_KEY": "",
        "DATATHREAD_DAILY_TOKEN_BUDGET": "5000000",
        "DATATHREAD_USER_DAILY_TOKEN_BUDGET": "400000",
        "DATATHREAD_USER_TURNS_PER_HOUR": "0",
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "bill",
        "GOOGLE_APPLICATION_CREDENTIALS": str(service_account_key(tmp_path / "key.json", f"{closed}/token")),
        "DATATHREAD_BIGQUERY_API_URL": closed,
        "DATATHREAD_BIGQUERY_USER_DAY_BYTES": "50000000000",
    }
    _, rows, _ = doctor(tmp_path, env)
    assert rows["limit: model, per day"] == (
        "on",
        "5,000,000 tokens for all questions, 400,000 tokens per person",
    )
    assert rows["limit: questions an hour"] == ("on", "300 per channel")
    assert rows["limit: model, per question"] == ("on", "400,000 tokens, 16 steps")
    assert rows["limit: BigQuery bytes"] == (
        "on",
        "100 GB a query, 500 GB a question, 50.0 GB per person, 5.0 TB per channel a day",
    )


def test_a_home_without_room_fails_its_own_row(tmp_path, monkeypatch):
    """A full disk under DATATHREAD_HOME: doctor said every part was ok (exit 0), and questions then
    failed on a step's files and the log. The free space is its own row, failing below the minimum."""
    from bot import doctor_checks

    monkeypatch.chdir(tmp_path)
    code, rows, _ = doctor(tmp_path, {"ANTHROPIC_API_KEY": ""})
    status, detail = rows["disk"]
    assert status == "ok" and detail.endswith(f"free under {tmp_path / 'home'}"), detail
    monkeypatch.setattr(doctor_checks, "MIN_FREE_BYTES", 2**62)  # more than any disk here has free
    code, rows, _ = doctor(tmp_path, {"ANTHROPIC_API_KEY": ""})
    status, detail = rows["disk"]
    assert code == 1 and status == "FAIL" and detail.startswith("only "), detail
    assert detail.endswith("steps' files, the log and answers will fail; free some space"), detail


def test_at_a_terminal_a_spinner_shows_while_the_checks_run(tmp_path):
    """With every service out of reach the table came after 9 s of an empty terminal, as if doctor
    had hung. Now a spinner says what it is doing until the table (piped output is the table alone)."""
    hole = BlackHole().start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "DATATHREAD", "SLACK"))}
    env |= {
        "DATATHREAD_HOME": str(tmp_path / "home"),
        "ANTHROPIC_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": hole.url,  # the model check waits out its timeout
        "TERM": "xterm-256color",
        "COLUMNS": "100",
    }
    main, terminal = os.openpty()
    proc = subprocess.Popen(
        [DATATHREAD, "doctor"], stdin=terminal, stdout=terminal, stderr=terminal, env=env, cwd=tmp_path
    )
    os.close(terminal)
    keep = os.fdopen(main, "rb", buffering=0)
    screen = Output(keep)
    try:
        screen.wait_for("Checking", timeout=60)
        assert "FAIL" not in screen.text  # shown while the checks still run
        assert proc.wait(timeout=60) == 1
        screen.wait_for("checked in")
        assert "FAIL" in screen.text.partition("Checking")[2]
    finally:
        if proc.poll() is None:
            proc.kill()
        screen.finished()
        keep.close()
        hole.stop()


def test_the_release_is_named_and_a_store_of_a_newer_schema_fails_its_row(tmp_path, monkeypatch):
    """Which release a replica runs was nowhere to be seen; a store a newer release marked is said, and
    doctor, which checks a deployment, changes nothing in it (core/store_schema.py)."""
    import sqlite3

    from core.release import release_id
    from core.store_schema import STORE_SCHEMA

    monkeypatch.chdir(tmp_path)
    code, rows, _ = doctor(tmp_path, {"ANTHROPIC_API_KEY": ""})
    assert rows["release"] == ("ok", f"datathread {release_id()}")
    database = tmp_path / "home" / "state.sqlite3"
    with sqlite3.connect(database) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 0  # looked at, not marked
        con.execute(f"PRAGMA user_version = {STORE_SCHEMA + 1}")
    code, rows, _ = doctor(tmp_path, {"ANTHROPIC_API_KEY": "", "DATATHREAD_RELEASE": "1.0.0+abcdef123456"})
    assert rows["release"] == ("ok", "datathread 1.0.0+abcdef123456")
    status, detail = rows["session store"]
    assert code == 1 and status == "FAIL" and "newer release" in detail, detail
