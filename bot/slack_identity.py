"""Who the bot is, for Bolt, without asking Slack inside an ack.

Bolt's AsyncApp, given a bot token, asks `auth.test` lazily: inside the first request it authorizes
(its single-team authorization middleware), so the first ack waited on Slack's Web API — up to the
client's 30 s when Slack was slow, ten times Slack's 3 s (https://docs.slack.dev/apis/events-api/#responding),
and Slack retried the event meanwhile. Here Bolt gets an `authorize` that never calls Slack: the
identity `auth.test` gave when the tokens were checked (Socket Mode checks them before it connects),
or else what the signed request itself says — an event's `authorizations` name the bot user it was
delivered to (https://docs.slack.dev/apis/events-api/#authorizations), which is all the listeners use
the identity for (to strip the bot's own mention, to ignore its own messages).

`serve` checks the bot token before it starts with one bounded `auth.test` (`bot_token_problem`).
The bound is the whole check's, retries included: slack_sdk's `timeout` is each attempt's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.slack_client import SDK_LOG
from core.config import ConfigError, Settings

log = logging.getLogger("datathread.slack")

TOKEN_CHECK_TIMEOUT_S = 10  # each check's whole call; Slack answers auth.test in well under a second
# Slack's own trouble, not the token's: such an answer says nothing about whether the token is good.
# https://docs.slack.dev/reference/methods/auth.test#errors
SLACK_SIDE_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}


class SlackUnreachable(RuntimeError):
    """Slack's Web API did not answer; the message is one sentence for people."""


# (variable, settings field, Web API method that proves it, what it must be)
SLACK_TOKENS = (
    ("SLACK_BOT_TOKEN", "slack_bot_token", "auth_test", "a bot token (xoxb-…)"),
    ("SLACK_APP_TOKEN", "slack_app_token", "apps_connections_open", "an app-level token (xapp-…)"),
)


async def call_slack(settings: Settings, name: str, field: str, method: str, kind: str) -> dict:
    """One Web API call with one token; a rejection is a ConfigError naming the variable and Slack's reason."""
    return dict((await slack_response(settings, name, field, method, kind)).data)


def granted_scopes(response: AsyncSlackResponse) -> set[str] | None:
    """The scopes Slack lists for the call's token in `x-oauth-scopes` (as Bolt reads them after
    auth.test), or None when the answer has no such header (a proxy dropped it)."""
    said = response.headers.get("x-oauth-scopes")
    return None if said is None else {scope.strip() for scope in said.split(",") if scope.strip()}


async def slack_response(
    settings: Settings, name: str, field: str, method: str, kind: str
) -> AsyncSlackResponse:
    """`call_slack`'s whole answer, headers included."""
    token = getattr(settings, field)
    client = AsyncWebClient(
        token=token.get_secret_value(),
        base_url=settings.slack_api_url,
        timeout=TOKEN_CHECK_TIMEOUT_S,
        logger=SDK_LOG,  # no INFO line of its own per retry: the check says the outcome
    )
    kwargs = {"app_token": token.get_secret_value()} if method == "apps_connections_open" else {}
    unreachable = f"Could not reach Slack at {settings.slack_api_url}"
    try:
        async with asyncio.timeout(TOKEN_CHECK_TIMEOUT_S):  # slack_sdk's timeout is per attempt
            return await getattr(client, method)(**kwargs)
    except SlackApiError as exc:
        if exc.response.status_code >= 500:  # Slack's own trouble, whatever its page says
            raise SlackUnreachable(
                f"{unreachable} (it answered HTTP {exc.response.status_code}); try again shortly."
            ) from None
        if not isinstance(exc.response.data, dict) or "error" not in exc.response.data:
            # no Slack reply at all (a proxy's or web server's page, HTML): the address is wrong, not the
            # token — "Slack rejected SLACK_BOT_TOKEN" had people replace a good one
            raise SlackUnreachable(
                f"{unreachable}: it answered with something that is not a Slack reply (a proxy or web page, "
                "perhaps); check DATATHREAD_SLACK_API_URL and the network."
            ) from None
        reason = exc.response.get("error", "rejected")
        if reason in SLACK_SIDE_ERRORS or exc.response.status_code >= 500:
            raise SlackUnreachable(f"{unreachable} (it answered {reason}); try again shortly.") from None
        raise ConfigError(f"Slack rejected {name} ({reason}); it must be {kind} of this app.") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SlackUnreachable(
            f"{unreachable} ({type(exc).__name__}); check the network or DATATHREAD_SLACK_API_URL."
        ) from None


class KnownBot(AsyncAuthorize):
    """Bolt's `authorize`: the bot token with the identity known at start, or the request's own."""

    def __init__(self, token: str, identity: dict | None = None):
        self.token = token
        self.identity = identity or {}

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_: object,
    ) -> AuthorizeResult:
        me = self.identity
        result = AuthorizeResult(
            enterprise_id=me.get("enterprise_id") or enterprise_id,
            team_id=me.get("team_id") or team_id,
            bot_user_id=me.get("user_id") or context.get(DELIVERED_TO),
            bot_id=me.get("bot_id"),
            bot_token=self.token,
            user_id=user_id,
        )
        result[KNOWN_AT_START] = bool(me.get("team_id"))  # else the team is the request's own word
        return result


# Set on the authorize result when its team is `auth.test`'s, not the request's (bot/slack_access.py).
KNOWN_AT_START = "datathread_known_at_start"
# The context key under which the HTTP route leaves the bot user an event was delivered to.
DELIVERED_TO = "datathread_delivered_to"


def delivered_to(body: dict) -> str | None:
    """The bot user a signed event names in its `authorizations`, or None."""
    first = _first_authorization(body)
    if first.get("is_bot") and isinstance(first.get("user_id"), str):
        return first["user_id"]
    return None


class OtherInstalls:
    """Events for another installation of this app, told once per workspace (or organization).

    The app installed per workspace in an Enterprise Grid sends every workspace's events to the same
    Request URL, each for its own bot user, while datathread answers with the one SLACK_BOT_TOKEN: in
    the other workspace's channels Slack refuses it (`channel_not_found`), and the log said only that.
    An event names the installation it was delivered to in `authorizations[0]`
    (https://docs.slack.dev/apis/events-api/#authorizations); `auth.test` at start said whose the token is.
    Without that (Slack unreachable at start) nothing is compared.

    One installation is one bot user, so the bot users are compared. The workspaces are not, where the
    bot users are known: an org-wide installation's event names the workspace it happened in
    (`is_enterprise_install: true`, https://api.slack.com/enterprise/apps/changes-apis),
    while `auth.test` names another, and every workspace but one was reported as another installation
    — the setup this ERROR itself recommends."""

    def __init__(self, identity: dict | None):
        self.identity = identity or {}
        self.told: set[str] = set()  # this app's own memory (one per process): a line per workspace

    def check(self, body: dict) -> None:
        me, first = self.identity, _first_authorization(body)
        if not me or not first:
            return
        theirs = {k: first.get(k) for k in ("team_id", "enterprise_id", "user_id")}
        if not another_installation(me, theirs, org_wide=bool(first.get("is_enterprise_install"))):
            return
        where = theirs["team_id"] or theirs["enterprise_id"] or theirs["user_id"] or "?"
        if where in self.told:
            return
        self.told.add(where)
        log.error(
            "slack: an event came for another installation of this app (workspace %s, organization %s, "
            "bot user %s), but SLACK_BOT_TOKEN is the installation of workspace %s (organization %s, bot "
            "user %s): people there get no answer, as Slack refuses this token in their channels. Install "
            "the app once for the whole organization (an org-wide install on Enterprise Grid) and use that "
            "installation's bot token, or give that workspace an app and a datathread of its own.",
            theirs["team_id"] or "-",
            theirs["enterprise_id"] or "-",
            theirs["user_id"] or "-",
            me.get("team_id") or "-",
            me.get("enterprise_id") or "-",
            me.get("user_id") or "-",
        )


def another_installation(me: dict, theirs: dict, *, org_wide: bool) -> bool:
    """Whether an event's authorization (`theirs`) is another installation than `auth.test`'s (`me`):
    another bot user; without both bot users, an org-wide install of the same organization is ours, and
    otherwise another workspace or organization is another installation."""
    if theirs.get("user_id") and me.get("user_id"):
        return theirs["user_id"] != me["user_id"]
    if org_wide and theirs.get("enterprise_id") and theirs["enterprise_id"] == me.get("enterprise_id"):
        return False
    return any(theirs.get(k) and me.get(k) and theirs[k] != me[k] for k in ("team_id", "enterprise_id"))


def _first_authorization(body: dict) -> dict:
    authorizations = body.get("authorizations")
    if isinstance(authorizations, list) and authorizations and isinstance(authorizations[0], dict):
        return authorizations[0]
    return {}


async def bot_token_problem(
    settings: Settings, say: Callable[[str], None], identity: dict | None = None
) -> str | None:
    """`serve`'s start: one `auth.test`, TOKEN_CHECK_TIMEOUT_S at most, said first through `say` (as
    Socket Mode says its check), since a silent Slack keeps it that long. A token Slack rejects
    (`invalid_auth`, `not_authed`, a revoked one…) is the sentence `serve` stops with: every answer
    would fail. An unreachable Slack is told in one line through `say`, and `serve` starts anyway: it
    also serves Teams and /healthz, nothing in its acks waits on Slack, and a supervisor that restarts a
    service that will not start would only add a restart loop to a network outage. `identity`, when
    given, is filled with what `auth.test` said: who the bot is, for the app (`build_bolt_app`)."""
    say("Slack: checking SLACK_BOT_TOKEN…")
    try:
        said = await call_slack(settings, *SLACK_TOKENS[0])
    except ConfigError as exc:
        return str(exc)
    except SlackUnreachable as exc:
        say(f"warning: SLACK_BOT_TOKEN not checked: {exc} Serving anyway.")
        return None
    if identity is not None:
        identity.update(said)
    return None
