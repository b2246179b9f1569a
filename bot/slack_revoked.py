"""When Slack takes none of the bot's messages at all: its token was revoked, the app uninstalled (or
its bot deactivated), or the app was installed without a scope the answer needs.

Then every call of a turn fails the same way, and the turn paid for its model calls and queries
anyway: with `token_revoked` on every call, three questions made six model calls, and the log said
one WARNING per lost answer, never that the app needs reinstalling; `missing_scope` never named the
scope (Slack says it: `needed`). Refused so on a turn's first post, the turn now stops before its
first model call (`core.events.NobodyListening`), with one ERROR that says what to do (`locked_out`).
Slack's own word that the app was uninstalled or its tokens revoked (`app_uninstalled`,
`tokens_revoked`, https://docs.slack.dev/reference/events/app_uninstalled) is an ERROR too
(`on_revoked`), not an event "no listener handles".
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError

from bot.slack_client import slack_error

log = logging.getLogger("datathread.slack")

# Slack no longer takes the token: https://docs.slack.dev/reference/methods/chat.postMessage#errors
TOKEN_REFUSED = frozenset({"token_revoked", "invalid_auth", "account_inactive", "not_authed"})
REINSTALL = (
    "Slack refuses the bot token ({code}): the app was uninstalled from the workspace or its token "
    "revoked. Reinstall the app and set SLACK_BOT_TOKEN to its bot token"
)
ADD_SCOPE = (
    "Slack refuses {method}: the app lacks the {needed} scope. Add it to the app (slack/manifest.yml "
    "lists every scope datathread needs) and reinstall"
)


def token_refused(exc: BaseException) -> bool:
    return isinstance(exc, SlackApiError) and slack_error(exc) in TOKEN_REFUSED


def locked_out(exc: BaseException, method: str) -> str | None:
    """What to do, for the log, when Slack refused `method` because of the app's token or scopes
    (None for any other failure)."""
    if not isinstance(exc, SlackApiError):
        return None
    code = slack_error(exc)
    if code in TOKEN_REFUSED:
        return REINSTALL.format(code=code)
    if code == "missing_scope":
        data = exc.response.data if isinstance(exc.response.data, dict) else {}
        return ADD_SCOPE.format(method=method, needed=f"`{data.get('needed') or '?'}`")
    return None


def on_revoked(body: dict, event: dict) -> None:
    """`app_uninstalled` or `tokens_revoked`: one ERROR naming the workspace and what to do."""
    team = body.get("team_id") or "?"
    if event.get("type") == "tokens_revoked" and not (event.get("tokens") or {}).get("bot"):
        log.warning("slack: Slack revoked user tokens of this app in workspace %s (not the bot's)", team)
        return
    what = "uninstalled the app" if event.get("type") == "app_uninstalled" else "revoked the bot token"
    log.error(  # nothing is deleted by itself: a mistaken uninstall must not lose everything
        "slack: Slack %s in workspace %s: nothing there can be answered until the app is reinstalled "
        "and SLACK_BOT_TOKEN set to its new bot token; if it is gone for good, `datathread forget --team %s` "
        "removes its data",
        what,
        team,
        team,
    )
