"""Settings: contract env names, defaults without accounts, one-sentence errors."""

from __future__ import annotations

import pytest

from core.config import ConfigError, Settings, load_settings, require_model, split_list
from core.config_types import literal_choices
from core.file_stems import safe_file_stem
from core.sandbox import is_valid_session_id
from core.sessions import session_id_for


def test_contract_environment_names_are_read(monkeypatch, tmp_path):
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-abcdef",
        "DATATHREAD_MODEL": "claude-x",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s3cr3t",
        "SLACK_APP_TOKEN": "xapp-1",
        "DATATHREAD_SLACK_API_URL": "http://x/api/",
        "MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555",
        "MICROSOFT_APP_TENANT_ID": "contoso.onmicrosoft.com",
        "MICROSOFT_APP_TYPE": "SingleTenant",
        "DATATHREAD_WAREHOUSE": "bigquery",
        "GCP_PROJECT": "p",
        "DATATHREAD_BIGQUERY_API_URL": "http://bq",
        "DATATHREAD_SANDBOX": "modal",
        "DATATHREAD_HOME": str(tmp_path),
        "DATATHREAD_STEP_TIMEOUT": "7",
        "REDIS_URL": "redis://x",
        "DATATHREAD_SLASH_COMMAND": "/data",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    s = load_settings(_env_file=None)
    assert (s.model, s.slack_api_url, s.microsoft_app_type, s.warehouse, s.gcp_project) == (
        "claude-x",
        "http://x/api/",
        "SingleTenant",
        "bigquery",
        "p",
    )
    assert (s.sandbox, s.home, s.step_timeout, s.redis_url, s.slash_command) == (
        "modal",
        tmp_path,
        7.0,
        "redis://x",
        "/data",
    )
    assert s.slack_bot_token.get_secret_value() == "xoxb-1"
    assert "sk-ant-abcdef" in s.secret_values() and "s3cr3t" in s.secret_values()


def test_defaults_need_no_account(monkeypatch):
    for name in ("DATATHREAD_WAREHOUSE", "DATATHREAD_SANDBOX", "REDIS_URL", "DATATHREAD_STEP_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    s = load_settings(_env_file=None)
    assert (s.warehouse, s.sandbox, s.redis_url, s.step_timeout, s.slash_command) == (
        "duckdb",
        "local",
        None,
        120.0,
        "/ask",
    )


def test_dotenv_file_is_read(tmp_path, monkeypatch):
    monkeypatch.delenv("DATATHREAD_MODEL", raising=False)
    (tmp_path / ".env").write_text("DATATHREAD_MODEL=from-dotenv\n")
    assert load_settings(_env_file=tmp_path / ".env").model == "from-dotenv"


BEDROCK_NEEDS = (
    "DATATHREAD_MODEL_PROVIDER=bedrock needs an AWS region: set AWS_REGION (or AWS_DEFAULT_REGION)"
)
VERTEX_NEEDS = "DATATHREAD_MODEL_PROVIDER=vertex needs"


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({}, "No Claude API key: set ANTHROPIC_API_KEY"),
        ({"anthropic_api_key": "  "}, "No Claude API key: set ANTHROPIC_API_KEY"),
        # Bedrock and Vertex use no Anthropic key: the sentence names what that provider still needs
        ({"model_provider": "bedrock", "anthropic_api_key": "sk-ant-test-000000"}, BEDROCK_NEEDS),
        ({"model_provider": "vertex"}, f"{VERTEX_NEEDS} ANTHROPIC_VERTEX_PROJECT_ID and CLOUD_ML_REGION ("),
        ({"model_provider": "vertex", "vertex_project": "p"}, f"{VERTEX_NEEDS} CLOUD_ML_REGION ("),
        (
            {"model_provider": "vertex", "vertex_region": "us-east5"},
            f"{VERTEX_NEEDS} ANTHROPIC_VERTEX_PROJECT_ID (",
        ),
    ],
)
def test_missing_model_credentials_is_one_actionable_sentence(overrides, names, monkeypatch):
    for name in (
        "ANTHROPIC_API_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "CLOUD_ML_REGION",
        "ANTHROPIC_VERTEX_PROJECT_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as info:
        require_model(load_settings(_env_file=None, **overrides))
    assert str(info.value).startswith(names) and "\n" not in str(info.value) and str(info.value).endswith(".")


def test_invalid_value_is_one_sentence(monkeypatch):
    monkeypatch.setenv("DATATHREAD_STEP_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="step_timeout|DATATHREAD_STEP_TIMEOUT"):
        load_settings(_env_file=None)


@pytest.mark.parametrize(("value", "expected"), [("", ()), ("a, b,,c ", ("a", "b", "c")), ("x", ("x",))])
def test_split_list(value, expected):
    assert split_list(value) == expected


def test_session_ids_are_stable_path_safe_and_distinct():
    a = session_id_for("slack", ("T1", "C1", "1700000000.000100"))
    assert a == session_id_for("slack", ("T1", "C1", "1700000000.000100"))
    assert a != session_id_for("slack", ("T1", "C1", "1700000000.000200"))
    assert a != session_id_for("teams", ("T1", "C1", "1700000000.000100"))
    assert is_valid_session_id(a) and "/" not in a


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden", "x" * 200, "a\x00b", "-rf"])
def test_invalid_session_ids_are_refused(bad):
    assert not is_valid_session_id(bad)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("delays", "delays"),
        ("delays.parquet", "delays"),
        ("../../etc/passwd", "etc_passwd"),
        ("/abs/x.csv", "abs_x"),
        (None, "default"),
        ("  ", "default"),
        ("top 3 carriers!", "top_3_carriers"),
        # letters of any script stay (they were "Versp_tung", "lpreis" and, all Japanese, the default)
        ("Verspätung 東京", "Verspätung_東京"),
        ("Ölpreis 🛢️", "Ölpreis"),
        ("遅延", "遅延"),
        ("Cafe\u0301", "Café"),  # one character, as it shows
        ("x\u202egnp.csv", "x_gnp"),  # a direction override is not a letter
        ("a/b\u200dc", "a_b_c"),
        ("𠀀" * 80, "𠀀" * 50),  # four bytes each: a file name has 255 bytes
        ("बिक्री रिपोर्ट", "बिक्री_रिपोर्ट"),  # vowel signs are marks, kept (they were cut to "ब_क_र…")
        ("ｐｄ", "pd"),  # fullwidth: Python reads it as `pd`, and so does the notebook's check
        ("a\u034fb", "ab"),  # a combining grapheme joiner shows nothing: "ab" must name one file
        ("\u3164", "default"),  # a Hangul filler alone is an invisible name
    ],
)
def test_safe_file_stem(name, expected):
    assert safe_file_stem(name, "default") == expected


def test_a_bad_default_home_is_named_by_its_variable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATATHREAD_HOME", raising=False)
    (tmp_path / ".datathread").write_text("a file where the default home would be")
    with pytest.raises(
        ConfigError, match=r"^DATATHREAD_HOME \(default \./\.datathread\) exists and is not a directory\.$"
    ):
        load_settings(_env_file=None)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("REDIS_URL", "redis//:hunter2@host", "REDIS_URL is not a Redis URL"),
        (
            "DATATHREAD_PUBLIC_URL",
            "bot.example.com",
            "DATATHREAD_PUBLIC_URL=bot.example.com is not an http(s) URL",
        ),
        ("MICROSOFT_APP_TYPE", "multitenant", None),
        ("DATATHREAD_DEFAULT_TZ", "Mars/Olympus", "is not a time zone"),
        ("DATATHREAD_MAX_STEPS", "0", "DATATHREAD_MAX_STEPS=0: Input should be greater than 0"),
    ],
)
def test_each_setting_kind_is_checked_in_one_sentence(name, value, words, monkeypatch, tmp_path):
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    if words is None:  # accepted, normalised
        assert load_settings(_env_file=None).microsoft_app_type == "MultiTenant"
        return
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert words in str(info.value) and "\n" not in str(info.value) and "hunter2" not in str(info.value)


def test_the_default_time_zone_is_stored_as_the_database_spells_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DATATHREAD_DEFAULT_TZ", "europe/berlin")
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    assert load_settings(_env_file=None).default_tz == "Europe/Berlin"


FLOAT_SETTINGS = [
    str(f.validation_alias.choices[0]) for f in Settings.model_fields.values() if f.annotation is float
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity", "+INF"])
@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_every_float_setting_refuses_non_finite_values(name, value, monkeypatch, tmp_path):
    """DATATHREAD_MODEL_TIMEOUT=inf once passed `gt=0`, and a silent model endpoint then hung forever."""
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value) == f"Invalid setting {name}={value}: Input should be a finite number."


def test_the_float_settings_are_all_found():
    assert {"DATATHREAD_MODEL_TIMEOUT", "DATATHREAD_STEP_TIMEOUT", "DATATHREAD_SCHEDULE_GRACE_S"} <= set(
        FLOAT_SETTINGS
    )


UNSET_BY_DEFAULT = [
    (name, str(f.validation_alias.choices[0]))
    for name, f in Settings.model_fields.items()
    if f.default is None
]


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(("field", "name"), UNSET_BY_DEFAULT, ids=[name for _, name in UNSET_BY_DEFAULT])
def test_an_empty_value_of_an_optional_setting_means_unset(field, name, value, monkeypatch, tmp_path):
    """`ANTHROPIC_BASE_URL=` (an uncommented line of .env.example) once stopped every command with
    "is not an http(s) URL"; REDIS_URL=, DATATHREAD_ISOLATION= and MICROSOFT_APP_ID= too, and the
    others became '' where the code checks for None (GCP_SERVICE_ACCOUNT_JSON= as an empty key)."""
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    assert getattr(load_settings(_env_file=None), field) is None


def test_uncommented_empty_lines_of_env_example_are_the_defaults(monkeypatch, tmp_path):
    from core.config_docs import env_example

    monkeypatch.chdir(tmp_path)
    lines = [line.removeprefix("# ") for line in env_example().splitlines() if line.endswith("=")]
    assert "ANTHROPIC_BASE_URL=" in lines and "REDIS_URL=" in lines
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    for line in lines:
        monkeypatch.delenv(line.removesuffix("="), raising=False)
    settings = load_settings(_env_file=tmp_path / ".env")
    assert (settings.anthropic_base_url, settings.redis_url, settings.isolation) == (None, None, None)
    assert settings.model_dump() == load_settings(_env_file=None).model_dump()


def test_an_empty_value_of_a_setting_with_a_default_is_still_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    monkeypatch.setenv("DATATHREAD_PUBLIC_URL", "")
    with pytest.raises(ConfigError, match=r"^DATATHREAD_PUBLIC_URL= is not an http\(s\) URL"):
        load_settings(_env_file=None)


def test_a_secret_pasted_with_a_newline_is_used_without_it(monkeypatch, tmp_path):
    """`SLACK_APP_TOKEN=$'xapp-…\\n'` (a Kubernetes secret from a file) ended in "forbidden control
    character" from deep in the HTTP client; an API key with one was reported as an unreachable API."""
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    given = {
        "ANTHROPIC_API_KEY": " sk-ant-test-1\n",
        "SLACK_BOT_TOKEN": "xoxb-1\r\n",
        "SLACK_APP_TOKEN": "xapp-2\n",
        "SLACK_SIGNING_SECRET": "abc123\n",
        "MICROSOFT_APP_PASSWORD": "\tpw\n",
    }
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(_env_file=None)
    secrets = [
        settings.anthropic_api_key,
        settings.slack_bot_token,
        settings.slack_app_token,
        settings.slack_signing_secret,
        settings.microsoft_app_password,
    ]
    assert [s.get_secret_value() for s in secrets] == ["sk-ant-test-1", "xoxb-1", "xapp-2", "abc123", "pw"]


@pytest.mark.parametrize(
    ("given", "said"), [({}, " (the default)"), ({"MICROSOFT_APP_TYPE": "singletenant"}, "")]
)
def test_a_single_tenant_bot_without_its_tenant_is_told_so_without_calling_a_given_type_a_default(
    monkeypatch, given, said
):
    """`MICROSOFT_APP_TYPE=singletenant` set on purpose was answered "SingleTenant (the default) needs…"."""
    monkeypatch.delenv("MICROSOFT_APP_TENANT_ID", raising=False)
    monkeypatch.delenv("MICROSOFT_APP_TYPE", raising=False)
    for name, value in {"MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555", **given}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value).startswith(f"MICROSOFT_APP_TYPE=SingleTenant{said} needs MICROSOFT_APP_TENANT_ID;")


@pytest.mark.parametrize("kind", ["", "STEP_"])
def test_more_warm_modal_containers_than_the_cap_is_a_bad_setting(monkeypatch, kind):
    """Modal refuses such a deploy with its own error; here it is one sentence naming both settings."""
    monkeypatch.setenv(f"DATATHREAD_MODAL_{kind}MIN_CONTAINERS", "3")
    monkeypatch.setenv(f"DATATHREAD_MODAL_{kind}MAX_CONTAINERS", "2")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value) == (
        f"DATATHREAD_MODAL_{kind}MIN_CONTAINERS=3 is more than DATATHREAD_MODAL_{kind}MAX_CONTAINERS=2; "
        "lower the first or raise the second."
    )
    monkeypatch.setenv(f"DATATHREAD_MODAL_{kind}MAX_CONTAINERS", "3")
    assert getattr(load_settings(_env_file=None), f"modal_{kind.lower()}min_containers") == 3  # equal is fine


PORT = "REDIS_URL has a port that is not a number from 1 to 65535 (e.g. host:6379)."
NOT_A_DB = (
    "REDIS_URL ends in something that is not a database number (redis-py would quietly use another "
    "database: 0 for /abc): end it with /0, or another number."
)


@pytest.mark.parametrize(
    ("url", "sentence"),
    [
        ("redis://:hunter2@127.0.0.1:99999/0", PORT),  # was a 66-line traceback from `redis_where`
        ("redis://:hunter2@127.0.0.1:0/0", PORT),  # redis-py connected to 6379 instead
        ("redis://:hunter2@127.0.0.1:6x79/0", PORT),
        ("redis://:hunter2@127.0.0.1:6379/abc", NOT_A_DB),  # redis-py used database 0, unsaid
        ("redis://:hunter2@127.0.0.1:6379/1/2", NOT_A_DB),  # redis-py used database 12
        ("redis://:hunter2@127.0.0.1:6379/1_0", NOT_A_DB),  # int() reads it as 10
        ("redis://:hunter2@127.0.0.1:6379/-1", NOT_A_DB),
        (
            "redis://:hunter2@h:6379/0?db=abc",
            "REDIS_URL has a ?db= that is not a database number (e.g. ?db=0).",
        ),
        (
            "redis://:hunter2@h:6379/0?db=3",  # redis-py let ?db= win, unsaid
            "REDIS_URL names one database at the end of its path and another in ?db=: keep one.",
        ),
        ("redis://:hunter2@h:6379?db=1&db=2", "REDIS_URL gives ?db= twice: keep one."),
        (
            "unix:///run/redis.sock?password=hunter2&db=x",
            "REDIS_URL has a ?db= that is not a database number (e.g. ?db=0).",
        ),
        (
            "redis://:hunter2@h:6379/0?colour=blue",  # a TypeError at the first command
            "REDIS_URL has ?colour=, which redis-py does not take here: remove it.",
        ),
        (
            "redis://:hunter2@h:6379/0?ssl_cert_reqs=none",  # a TLS option without TLS
            "REDIS_URL has ?ssl_cert_reqs=, which redis-py does not take here: remove it.",
        ),
        (
            "redis://:hunter2@h:6379/0?socket_timeout=soon",
            "REDIS_URL has a value of ?socket_timeout= that redis-py cannot read.",
        ),
        ("redis://:hunter2@h:6379/0?protocol=9", "REDIS_URL has an option whose value redis-py refuses."),
    ],
)
def test_a_redis_url_redis_py_would_misread_is_refused_in_a_sentence(url, sentence, monkeypatch, tmp_path):
    """Each one either failed later in a traceback or connected somewhere else than it says (another
    database, another port): on a shared Redis, another tenant's data. The password is never shown."""
    monkeypatch.setenv("REDIS_URL", url)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert str(info.value) == sentence and "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@127.0.0.1:6379/15",
        "redis://cache.internal",
        "redis://cache.internal/",
        "redis://cache.internal/3?db=3",
        "rediss://user:hunter2@cache.internal:6380/2?ssl_cert_reqs=none",
        "unix:///run/redis.sock?db=2&password=hunter2",
        "redis://cache.internal:6379/0?socket_timeout=5&protocol=3",
    ],
)
def test_a_redis_url_as_redis_py_reads_it_is_taken_as_given(url, monkeypatch, tmp_path):
    monkeypatch.setenv("REDIS_URL", url)
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    assert load_settings(_env_file=None).redis_url == url


CHOICES = [
    (str(f.validation_alias.choices[0]), choice)
    for f in Settings.model_fields.values()
    for choice in literal_choices(f.annotation)
]


@pytest.mark.parametrize(("name", "choice"), CHOICES, ids=[f"{n}={c}" for n, c in CHOICES])
def test_every_choice_setting_takes_its_words_in_any_case(name, choice, monkeypatch, tmp_path):
    """DATATHREAD_ISOLATION=STRICT was refused ("should be 'strict'…") while --log-level and a schedule's
    --tz take any case; stored as the contract spells it, so the code's comparisons hold."""
    monkeypatch.setenv(name, f" {choice.upper()} ")
    monkeypatch.setenv("DATATHREAD_HOME", str(tmp_path))
    monkeypatch.setenv("GCP_PROJECT", "p")  # what bigquery and vertex need besides
    monkeypatch.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "p")
    field = next(k for k, f in Settings.model_fields.items() if f.validation_alias.choices[0] == name)
    assert getattr(load_settings(_env_file=None), field) == choice


def test_the_choice_settings_are_all_found():
    assert {
        "DATATHREAD_ISOLATION",
        "DATATHREAD_SANDBOX",
        "DATATHREAD_WAREHOUSE",
        "DATATHREAD_MODEL_PROVIDER",
    } <= {name for name, _ in CHOICES}


@pytest.mark.parametrize("window", ["1", "3601"])
def test_a_scaledown_window_modal_refuses_is_a_bad_setting(monkeypatch, window):
    """Modal takes 2 to 3600 s; outside it, importing deploy/modal_app.py failed with Modal's traceback."""
    monkeypatch.setenv("DATATHREAD_MODAL_SCALEDOWN_WINDOW", window)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    said = str(info.value)
    assert "DATATHREAD_MODAL_SCALEDOWN_WINDOW" in said and "\n" not in said
