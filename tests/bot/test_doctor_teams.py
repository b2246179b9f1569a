"""`datathread doctor`'s Teams rows: besides the token the bot sends with, the channel's signing keys it
checks every Teams message's token with, fetched from the fake Bot Connector's OpenID metadata."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bot.cli import app

APP = {
    "MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555",
    "MICROSOFT_APP_PASSWORD": "not-a-real-secret",
    "MICROSOFT_APP_TYPE": "MultiTenant",
}


def doctor_rows(tmp_path, env: dict) -> dict[str, tuple[str, str]]:
    base = {"DATATHREAD_HOME": str(tmp_path / "home"), "COLUMNS": "250"}
    result = CliRunner().invoke(app, ["doctor"], env={**base, **env})
    assert "Traceback" not in result.output
    rows = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 3 and cells[0]:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_the_signing_keys_row_says_whether_teams_tokens_can_be_checked(tmp_path, monkeypatch, connector):
    monkeypatch.chdir(tmp_path)
    env = {**APP, "DATATHREAD_BOT_OPENID_METADATA_URL": connector.openid_url}
    rows = doctor_rows(tmp_path, env)
    assert rows["teams signing keys"] == ("ok", f"1 key from {connector.openid_url}"), rows
    connector.hang_openid = 1  # the key endpoint takes the connection and never answers
    rows = doctor_rows(tmp_path, env)
    status, said = rows["teams signing keys"]
    assert status == "FAIL" and "Teams signing keys not loaded" in said and "no answer within 2.5 s" in said
    assert "every Teams message is refused (401)" in said


HOME = "8a1d2c3b-0000-4000-8000-00000000aaaa"


@pytest.mark.parametrize(
    ("env", "status", "said"),
    [
        (
            {"MICROSOFT_APP_TYPE": "SingleTenant", "MICROSOFT_APP_TENANT_ID": HOME},
            "ok",
            f"tenant {HOME} only",
        ),
        ({"DATATHREAD_ALLOWED_TEAMS": HOME}, "ok", "the tenants in DATATHREAD_ALLOWED_TEAMS only"),
        ({}, "WARN", "ANY tenant that installs the app (MultiTenant): set DATATHREAD_ALLOWED_TEAMS"),
        (
            {"MICROSOFT_APP_TYPE": "SingleTenant", "MICROSOFT_APP_TENANT_ID": "contoso.onmicrosoft.com"},
            "WARN",
            "ANY tenant that installs the app: MICROSOFT_APP_TENANT_ID=contoso.onmicrosoft.com is a domain",
        ),
    ],
    ids=["single-tenant", "allowlist", "multi-tenant", "tenant-as-domain"],
)
def test_the_tenants_row_says_whose_messages_are_answered(
    tmp_path, monkeypatch, connector, env, status, said
):
    monkeypatch.chdir(tmp_path)
    rows = doctor_rows(tmp_path, {**APP, "DATATHREAD_BOT_OPENID_METADATA_URL": connector.openid_url, **env})
    assert rows["teams tenants"][0] == status and said in rows["teams tenants"][1], rows["teams tenants"]
