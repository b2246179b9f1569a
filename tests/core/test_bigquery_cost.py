"""Pure helpers of the BigQuery warehouse: cost words, cap decisions, labels, budgets, notes, credentials."""

from __future__ import annotations

import base64
import json

import pytest

from core.bigquery_client import _service_account_info, build_credentials, resolve_config
from core.bigquery_cost import (
    MIN_BILLED_BYTES,
    billed_bytes,
    budgets,
    decide,
    format_bytes,
    format_cost,
    job_labels,
    over_budget_message,
    sanitise_label,
)
from core.config import ConfigError, load_settings
from core.table_notes import parse_markdown, parse_yaml


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1_500, "1.5 KB"),
        (12_345_678_901, "12.3 GB"),
        (250 * 10**9, "250 GB"),
        (3 * 10**12, "3.0 TB"),
    ],
)
def test_format_bytes(n, words):
    assert format_bytes(n) == words


@pytest.mark.parametrize(
    ("n", "words"),
    [
        (12_300_000_000, "12.3 GB (~$0.07 at $6.25/TiB)"),
        (2**40, "1.1 TB (~$6.25 at $6.25/TiB)"),
        (1_000, "1.0 KB (~<$0.01 at $6.25/TiB)"),
        (0, "0 B (~$0.00 at $6.25/TiB)"),
    ],
)
def test_format_cost(n, words):
    assert format_cost(n) == words


def test_billed_bytes_rounds_up_to_mb_with_the_10_mb_minimum():
    assert billed_bytes(0) == 0
    assert billed_bytes(1) == MIN_BILLED_BYTES
    assert billed_bytes(1, tables=3) == 3 * MIN_BILLED_BYTES
    assert billed_bytes(50 * 2**20 + 1) == 51 * 2**20


@pytest.mark.parametrize(
    ("estimate", "action", "cap"),
    [
        # run without asking: never more than the soft cap (an external table dry-runs at 0 bytes and
        # could bill up to the hard cap, 100 GB, with nobody asked)
        (0, "run", 10 * 10**9),
        (10 * 10**9, "run", 10 * 10**9),
        # asked: what the person was shown, and 10 % more, within the hard cap
        (10 * 10**9 + 1, "confirm", 11 * 10**9 + 2),
        (50 * 10**9, "confirm", 55 * 10**9),
        (100 * 10**9, "confirm", 100 * 10**9),
        (100 * 10**9 + 1, "refuse", 100 * 10**9),
    ],
)
def test_decide_bands(estimate, action, cap):
    d = decide(estimate, soft_cap=10 * 10**9, hard_cap=100 * 10**9)
    assert d.action == action and d.maximum_bytes_billed == cap


def test_tiny_hard_cap_still_allows_the_billing_minimum():
    assert decide(1000, soft_cap=0, hard_cap=10**6).maximum_bytes_billed == MIN_BILLED_BYTES


@pytest.mark.parametrize(
    ("raw", "key", "out"),
    [
        ("Slack", False, "slack"),
        ("C0123ABC", False, "c0123abc"),
        ("a b/c.d", False, "a_b_c_d"),
        ("x" * 80, False, "x" * 63),
        ("1abc", True, "k_1abc"),
        ("", True, "k_"),
    ],
)
def test_sanitise_label(raw, key, out):
    assert sanitise_label(raw, key=key) == out


def test_job_labels_hash_the_user_and_drop_empty_values():
    labels = job_labels(
        surface="teams", channel_id="19:abc@thread.tacv2", user_id="29:1XyZ", session_id="t-abc"
    )
    assert labels["surface"] == "teams" and labels["channel"] == "19_abc_thread_tacv2"
    assert len(labels["user"]) == 32 and "xyz" not in labels["user"]
    assert job_labels(surface="terminal", channel_id="", user_id="", session_id="s")
    assert "channel" not in job_labels(surface="terminal", channel_id="", user_id="", session_id="s")


def test_budgets_keys_limits_and_reset():
    now = 1_700_000_000.0  # 22:13 UTC
    found = budgets(
        surface="slack",
        channel_id="C1",
        user_id="U1",
        turn_id="t1",
        per_turn=1,
        per_user_day=2,
        per_channel_day=3,
        now=now,
    )
    assert [b.limit for b in found] == [1, 2, 3]
    assert found[0].key == "bq:turn:t1" and found[2].key == "bq:day:20231114:channel:slack:C1"
    assert "U1" not in found[1].key
    assert found[1].resets == "at 00:00 UTC (in 2 hours)" and found[1].ttl_s == 6400 + 60
    none = budgets(
        surface="s", channel_id="", user_id="U", turn_id="", per_turn=1, per_user_day=0, per_channel_day=5
    )
    assert none == []
    text = over_budget_message(found[1], used=10**9, estimate=5 * 10**9, price_per_tib=6.25)
    assert "your daily budget" in text and "00:00 UTC" in text and "5.0 GB" in text


def test_table_notes_yaml_and_markdown():
    notes = parse_yaml(
        "overview: USD net of refunds.\n"
        "tables:\n"
        "  shop.orders:\n    description: One row per order.\n    columns: {amount: net USD}\n"
        "  Proj.Shop.Customers: People who ordered.\n"
    )
    assert "amount: net USD" in notes.for_table("proj.shop.orders")
    assert notes.for_table("PROJ.SHOP.CUSTOMERS") == "People who ordered."
    assert notes.for_table("other.shop.customers") == ""
    assert notes.summary().splitlines() == [
        "USD net of refunds.",
        "- proj.shop.customers: People who ordered.",
        "- shop.orders: One row per order.",
    ]
    md = parse_markdown("# Title\nOverview line.\n\n## `orders`\nFirst.\nSecond.\n## b.c\nC.\n")
    assert md.overview == "Overview line." and md.for_table("p.d.orders") == "First.\nSecond."
    assert len(parse_markdown("".join(f"## t{i}\n{'x' * 50}\n" for i in range(100))).summary()) <= 1500


def test_service_account_json_plain_or_base64_and_clear_errors():
    info = {"type": "service_account", "project_id": "p"}
    assert _service_account_info(json.dumps(info)) == info
    assert _service_account_info(base64.b64encode(json.dumps(info).encode()).decode()) == info
    for bad in ("not json at all", "{oops", json.dumps({"type": "authorized_user"})):
        with pytest.raises(ConfigError):
            _service_account_info(bad)


def test_billing_project_is_required(tmp_path):
    settings = load_settings(
        _env_file=None, warehouse="bigquery", bigquery_api_url="http://bq.test", home=tmp_path
    )
    with pytest.raises(ConfigError, match="GCP_PROJECT"):
        resolve_config(settings)
    ok = resolve_config(settings.model_copy(update={"gcp_project": "bill"}))
    assert ok.project == "bill" and ok.api_url == "http://bq.test"


NOT_A_KEY = ""  # the sentence alone: the file's type says what is wrong
MISSING = " (service account info was not in the expected format, missing fields "
BAD_PEM = " (its private_key is not a PEM private key)."
SERVICE_ACCOUNT = {"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com",
                   "token_uri": "https://oauth2.googleapis.com/token"}  # fmt: skip


@pytest.mark.parametrize(
    ("content", "flaw"),
    [
        (b"build-host-7\n", NOT_A_KEY),  # /etc/hostname, say
        (b"\xff\xfe\x00\x01", NOT_A_KEY),
        (b"{}", NOT_A_KEY),
        (b"[1, 2]", NOT_A_KEY),
        (json.dumps({"type": "service_account"}).encode(), MISSING),
        (json.dumps({**SERVICE_ACCOUNT, "private_key": "nope"}).encode(), BAD_PEM),
    ],
    ids=["text", "binary", "empty_object", "list", "missing_fields", "bad_private_key"],
)
def test_a_key_file_that_cannot_be_used_is_one_human_sentence(tmp_path, content, flaw):
    """Not Python's repr of google.auth's (message, JSONDecodeError(...)) tuple: the variable, the
    path, and what is wrong with the file, in words."""
    key = tmp_path / "key.json"
    key.write_bytes(content)
    settings = load_settings(_env_file=None, warehouse="bigquery", google_application_credentials=key)
    with pytest.raises(ConfigError) as refused:
        build_credentials(settings)
    message = str(refused.value)
    start = f"GOOGLE_APPLICATION_CREDENTIALS ({key}) is not a service-account JSON key file"
    assert message.startswith(start + flaw) if flaw else message == start + "."
    assert message.endswith(").") or not flaw
    assert "Error(" not in message and "('" not in message and "\n" not in message


@pytest.mark.parametrize(
    ("info", "flaw"),
    [({"type": "service_account"}, MISSING), ({**SERVICE_ACCOUNT, "private_key": "nope"}, BAD_PEM)],
    ids=["missing_fields", "bad_private_key"],
)
def test_a_service_account_json_that_cannot_be_used_is_one_human_sentence(info, flaw):
    settings = load_settings(_env_file=None, warehouse="bigquery", gcp_service_account_json=json.dumps(info))
    with pytest.raises(ConfigError) as refused:
        build_credentials(settings)
    message = str(refused.value)
    assert message.startswith("GCP_SERVICE_ACCOUNT_JSON is not a usable service-account key" + flaw)
    assert message.endswith(").") and ".." not in message and "cryptography.io" not in message
