"""`datathread doctor`'s checks of the chat platforms: Slack's tokens and the scopes the manifest asks
for, Teams' sign-in token, the signing keys Teams' tokens are checked with and whose tenants are
answered. Apart from the other parts' checks (bot/doctor_checks.py, whose `Check` and timeout they
share) because each platform has several rows and they grow with the platform."""

from __future__ import annotations

import asyncio

from bot import doctor_checks as checks  # its timeout read at each call (tests set it)
from bot.doctor_checks import Check
from core.config import Settings
from core.wording import counted

BOT_FRAMEWORK_SCOPE = "https://api.botframework.com/.default"
LOGIN_URL = "https://login.microsoftonline.com"


async def check_slack(settings: Settings) -> Check | tuple[Check, ...]:
    """The bot token (and the app token for Socket Mode); then, from the same auth.test's
    `x-oauth-scopes`, a row for the manifest's scopes and one for the `files:read` shared files need."""
    if not settings.slack_bot_token:
        return Check("slack", "off", "no SLACK_BOT_TOKEN")
    from bot.slack_identity import SLACK_TOKENS, SlackUnreachable, granted_scopes, slack_response
    from core.config import ConfigError

    try:
        answer = await slack_response(settings, *SLACK_TOKENS[0])
        if settings.slack_app_token:
            await slack_response(settings, *SLACK_TOKENS[1])
    except (ConfigError, SlackUnreachable) as exc:
        return Check("slack", "fail", str(exc))
    modes = ["Socket Mode (SLACK_APP_TOKEN)"] if settings.slack_app_token else []
    modes += ["HTTP events at /slack/events"] if settings.slack_signing_secret else []
    who = f"@{answer.get('user')} in {answer.get('team')}"
    granted = granted_scopes(answer)
    scopes, files = slack_scopes_check(granted), slack_files_check(granted)
    if not modes:
        return (
            Check(
                "slack",
                "fail",
                f"{who}, but set SLACK_SIGNING_SECRET (HTTP) or SLACK_APP_TOKEN (Socket Mode)",
            ),
            scopes,
            files,
        )
    return Check("slack", "ok", f"{who}; {' and '.join(modes)}"), scopes, files


# slack/manifest.yml's bot scopes (tests/bot/test_slack_manifest.py keeps the two equal), each with
# what goes without it. Here, not read from the manifest: it is not installed with the package.
BOT_SCOPES = {
    "chat:write": "every answer",
    "app_mentions:read": "@datathread in channels",
    "channels:history": "follow-ups in public channels",
    "groups:history": "follow-ups in private channels",
    "im:history": "DMs",
    "mpim:history": "group DMs",
    "commands": "/ask",
    "assistant:write": "the thread's status and streamed answers",
    "files:read": "files people share",
    "files:write": "charts and CSVs",
    "users:read": "who may ask: people from other organizations and guests are told apart by it, and "
    "without it anyone Slack does not place in your workspace is refused; the asker's time zone",
}


def slack_scopes_check(scopes: set[str] | None) -> Check:
    """Whether the bot token has every scope the manifest asks for (files:read has its own row). An
    app reinstalled after a manifest change without some of them passed doctor, then lost answers
    (`missing_scope`) or never heard DMs."""
    if scopes is None:
        return Check("slack scopes", "unchecked", "Slack did not list the token's scopes (x-oauth-scopes)")
    missing = [s for s in BOT_SCOPES if s not in scopes and s != "files:read"]
    if not missing:
        return Check("slack scopes", "ok", f"all {len(BOT_SCOPES)} scopes of slack/manifest.yml granted")
    lacks = ", ".join(f"{s} ({BOT_SCOPES[s]})" for s in missing)
    return Check(
        "slack scopes",
        "fail",
        f"the bot token lacks {lacks}: add {'them' if len(missing) > 1 else 'it'} to the app "
        "(slack/manifest.yml) and reinstall it",
    )


def slack_files_check(scopes: set[str] | None) -> Check:
    """Whether the bot token may read the files people share (without it Slack sends its sign-in page)."""
    if scopes is None:
        return Check("slack files", "unchecked", "Slack did not list the token's scopes (x-oauth-scopes)")
    if "files:read" in scopes:
        return Check("slack files", "ok", "files:read granted: files shared with a question are read")
    return Check(
        "slack files",
        "fail",
        "the bot token lacks files:read, so files people share are refused: add the scope "
        "(slack/manifest.yml) and reinstall the app",
    )


async def check_teams(settings: Settings) -> Check | tuple[Check, ...]:
    """The Bot Framework token the bot sends with, and the channel's signing keys it checks Teams'
    tokens with: without those keys every Teams message is refused (401)."""
    if not settings.microsoft_app_id:
        return Check("teams", "off", "no MICROSOFT_APP_ID: /api/messages is UNAUTHENTICATED (local use only)")
    return (*await asyncio.gather(_teams_token(settings), _teams_keys(settings)), _teams_tenants(settings))


def _teams_tenants(settings: Settings) -> Check:
    """Whose messages the bot answers (core/access.py): said plainly when it is anyone's."""
    from core.access import home_tenant

    if settings.allowed_teams.strip():
        return Check("teams tenants", "ok", "the tenants in DATATHREAD_ALLOWED_TEAMS only")
    if home := home_tenant(settings):
        said = f"tenant {home} only (MICROSOFT_APP_TENANT_ID; DATATHREAD_ALLOWED_TEAMS names others instead)"
        return Check("teams tenants", "ok", said)
    anyone = "ANY tenant that installs the app"
    if settings.microsoft_app_type == "MultiTenant":
        said = f"{anyone} (MultiTenant): set DATATHREAD_ALLOWED_TEAMS to the tenant ids to answer"
    else:  # a tenant given as a domain
        said = (
            f"{anyone}: MICROSOFT_APP_TENANT_ID={settings.microsoft_app_tenant_id} is a domain, and Teams "
            "names a conversation's tenant by its GUID: give the GUID there or in DATATHREAD_ALLOWED_TEAMS"
        )
    return Check("teams tenants", "warn", said)


async def _teams_keys(settings: Settings) -> Check:
    from bot.teams_keys import KeysNotFetched, channel_metadata_url, fetch_keys

    url = channel_metadata_url(settings)
    try:
        keys = await fetch_keys(url, deadline_s=checks.CHECK_TIMEOUT_S)
    except KeysNotFetched as exc:
        said = f"Teams signing keys not loaded from {url}: {exc}; every Teams message is refused (401)"
        return Check("teams signing keys", "fail", said)
    return Check("teams signing keys", "ok", f"{counted(len(keys), 'key')} from {url}")


async def _teams_token(settings: Settings) -> Check:
    label = f"app {settings.microsoft_app_id} ({settings.microsoft_app_type})"
    if settings.microsoft_app_type == "UserAssignedMSI":
        return Check("teams", "unchecked", f"{label}: a managed identity's token exists only on Azure")
    if not settings.microsoft_app_password:
        return Check("teams", "fail", f"{label}: set MICROSOFT_APP_PASSWORD (the client secret)")
    import httpx

    # The client-credentials request the Bot Framework makes for every reply it sends.
    tenant = settings.microsoft_app_tenant_id if settings.microsoft_app_type == "SingleTenant" else None
    form = {
        "grant_type": "client_credentials",
        "client_id": settings.microsoft_app_id,
        "client_secret": settings.microsoft_app_password.get_secret_value(),
        "scope": BOT_FRAMEWORK_SCOPE,
    }
    async with await checks.new_http_client() as client:
        try:
            response = await client.post(
                f"{LOGIN_URL}/{tenant or 'botframework.com'}/oauth2/v2.0/token", data=form
            )
        except httpx.HTTPError as exc:
            return Check("teams", "fail", f"{label}: cannot reach {LOGIN_URL} ({type(exc).__name__})")
    if response.status_code != 200:
        body = response.json() if "json" in response.headers.get("content-type", "") else {}
        reason = str(body.get("error_description") or body.get("error") or response.status_code)
        return Check("teams", "fail", f"{label}: token refused ({reason.splitlines()[0][:140]})")
    return Check("teams", "ok", f"{label}: Bot Framework token issued")
