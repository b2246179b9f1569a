"""What each surface needs from the settings, checked before any surface is imported.

Why a module of its own: these checks read only `Settings`, and the CLI says what is missing in a
second — before Slack's, Teams' and the core's imports (2-3 s) — so they cannot live in the modules that
serve the surfaces (`bot/slack_app.py`, `bot/teams_auth.py`, `bot/slack_socket.py`), which import those.
"""

from __future__ import annotations

from core.config import ConfigError, Settings


def slack_half_configured(settings: Settings) -> str:
    """Why Slack over HTTP cannot work with one of its two settings given and not the other, or ''.

    Without the signing secret no request to /slack/events can be verified, so every one was refused
    with a 503 while `serve` had started as if all were well; without the token none can be answered."""
    token, secret = bool(settings.slack_bot_token), bool(settings.slack_signing_secret)
    if token and not secret:
        return (
            "SLACK_BOT_TOKEN is set but SLACK_SIGNING_SECRET is not, so Slack's requests could not be "
            "verified and none would be answered: set it (the app's Basic Information page), run "
            "`datathread slack --socket` instead, or unset SLACK_BOT_TOKEN to serve Teams only."
        )
    if secret and not token:
        return (
            "SLACK_SIGNING_SECRET is set but SLACK_BOT_TOKEN is not, so no answer could be posted: set "
            "the bot token (xoxb-…, the app's OAuth & Permissions page), or unset SLACK_SIGNING_SECRET."
        )
    return ""


def teams_half_configured(settings: Settings) -> str:
    """Why Teams cannot work with its app id and password not given together, or ''.

    An app id without its password (MultiTenant or SingleTenant) started `serve` as if all were well,
    and every answer then failed to sign in; a password without an app id left /api/messages in its
    loopback-only mode, which doctor reported as "not configured". A managed identity has no password."""
    app_id, password = bool(settings.microsoft_app_id), bool(settings.microsoft_app_password)
    if app_id and not password and (settings.microsoft_app_type or "").lower() != "userassignedmsi":
        return (
            "MICROSOFT_APP_ID is set but MICROSOFT_APP_PASSWORD is not, so no answer could be sent to "
            "Teams: set the client secret of the Azure Bot's app registration, or unset MICROSOFT_APP_ID "
            "to serve Slack only."
        )
    if password and not app_id:
        return "MICROSOFT_APP_PASSWORD is set but MICROSOFT_APP_ID is not: set the Azure Bot's app id too."
    return ""


def require_socket_tokens(settings: Settings) -> None:
    """Fail fast, in one sentence, when a token Socket Mode needs is missing."""
    if not settings.slack_bot_token:
        raise ConfigError("Set SLACK_BOT_TOKEN (xoxb-…) to run the Slack app.")
    if not settings.slack_app_token:
        raise ConfigError("Set SLACK_APP_TOKEN (xapp-…, scope connections:write) for Socket Mode.")


# What a process needs to post a scheduled run to each surface (its runs' answers and their files).
POSTING_SETTINGS = {"slack": "SLACK_BOT_TOKEN", "teams": "MICROSOFT_APP_ID and MICROSOFT_APP_PASSWORD"}
SURFACE_NAMES = {"slack": "Slack", "teams": "Teams"}


def poster_problem(settings: Settings, surface: str) -> str:
    """Why a run of this surface could not be posted from here, or '': without the token the answer
    was computed, then failed to post with a traceback (Slack) or a sign-in error (Teams)."""
    if surface == "slack" and not settings.slack_bot_token:
        return "This schedule posts to Slack: set SLACK_BOT_TOKEN (xoxb-…) to run it from here."
    if surface == "teams" and not settings.microsoft_app_id:
        return "This schedule posts to Teams: set MICROSOFT_APP_ID and MICROSOFT_APP_PASSWORD to run it from here."
    if surface == "teams":
        return teams_half_configured(settings)
    return ""


def postable_surfaces(settings: Settings) -> frozenset[str]:
    """The surfaces whose scheduled runs this process can post: the scheduler claims only those. A
    replica without SLACK_BOT_TOKEN claimed every Slack run, failed to post it three times (at
    slack.com, without a token) and paused the schedule for the replicas that could."""
    return frozenset(surface for surface in POSTING_SETTINGS if not poster_problem(settings, surface))
