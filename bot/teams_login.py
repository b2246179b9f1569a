"""Signing in to send to Teams: one set of app credentials per login endpoint and scope for the whole
process, and its token fetched off the event loop within a deadline.

Why: botframework-connector makes new `MicrosoftAppCredentials` — a new msal app with an empty token
cache — for every connector client, that is for every turn, proactive message and scheduled run, and
gets the token inside msrest's `signed_session`, synchronously on the event loop, with msal's default of
no timeout. So each turn made two HTTPS round trips to login.microsoftonline.com (tenant discovery,
token) while the whole web process stood still (Slack acks, /healthz, every other turn), and a login
endpoint that took the connection and never answered (an egress firewall dropping packets) froze it
for good, SIGTERM included.

Here (`SignedIn`, the credential factory the SDK is given): the credentials are made once per (app id,
scope, login endpoint), their msal app with a timeout on each request; before a connector client is
handed out, the token is fetched within `LOGIN_TIMEOUT_S`, so the SDK's own call in `signed_session`
finds it in msal's cache. A turn can outlive that token (msal counts it expired five minutes early): so
every send or edit of a turn signs in the same way first (`TeamsOut._signed_in` in
bot/teams_out.py), and msal never reaches the network from inside the SDK's call on the loop.

`sign_in` runs before every message of every turn, so it must cost nothing while the token is good: it
reads msal's cache on the loop (`has_fresh_token`) and only past that goes to a thread. When the token
runs out, all the turns of the moment ask at once: one of them signs in for the credentials (a lock kept
on the credentials object), the others wait for it and find its token. The blocking msal call runs in a
daemon thread (core/daemon_thread.py), not the default thread pool: a silent login endpoint keeps it
10–20 s after its caller gave up, and in the default pool (6 threads on 2 cores) such threads made the
session store's calls (core/sqlite_calls.py) queue behind them.
"""

from __future__ import annotations

import asyncio
import time

import requests
from botframework.connector.auth import MicrosoftAppCredentials, ServiceClientCredentialsFactory
from msal import ConfidentialClientApplication, TokenCache
from msrest.authentication import Authentication

from bot.teams_connector import ConnectorFailed
from core.daemon_thread import in_daemon_thread
from core.wording import os_reason

# Read at each use: tests shorten it. Microsoft's login answers in well under a second; this only
# decides how soon a silent one is given up on (each of msal's requests, and a whole sign-in).
LOGIN_TIMEOUT_S = 10.0
# msal takes a cached token only while it has five more minutes, and so does this check, with a few
# seconds more for the moment between it and the SDK's own look (each try of a send checks first:
# bot/teams_out.py). It must not be longer: msal hands back the cached token while it has five
# minutes, so a longer bound would find every sign-in in that span "not fresh" again, each on a thread.
FRESH_FOR_S = 5 * 60 + 5
SIGN_IN_LOCK = "datathread_sign_in_lock"  # the attribute of the credentials that holds their lock


class SignedIn(ServiceClientCredentialsFactory):
    """The SDK's credential factory (`inner`), its credentials cached and signed in before use."""

    def __init__(self, inner: ServiceClientCredentialsFactory):
        self.inner = inner
        self._made: dict[tuple, Authentication] = {}

    async def is_valid_app_id(self, app_id: str) -> bool:
        return await self.inner.is_valid_app_id(app_id)

    async def is_authentication_disabled(self) -> bool:
        return await self.inner.is_authentication_disabled()

    async def create_credentials(
        self, app_id: str, oauth_scope: str, login_endpoint: str, validate_authority: bool
    ) -> Authentication:
        key = (app_id, oauth_scope, login_endpoint, validate_authority)
        credentials = self._made.get(key)
        if credentials is None:
            credentials = await self.inner.create_credentials(
                app_id, oauth_scope, login_endpoint, validate_authority
            )
            self._made[key] = credentials
        if getattr(credentials, "microsoft_app_id", None):  # no app id: the loopback-only mode, no token
            await sign_in(credentials, validate_authority)
        return credentials


async def sign_in(credentials: Authentication, validate_authority: bool = True) -> None:
    """Have a token for `credentials` in its cache, good for FRESH_FOR_S; raise `ConnectorFailed` past
    `LOGIN_TIMEOUT_S` (waiting for another caller's sign-in included) or when the sign-in is refused
    (wrong password, unknown app). A good token in the cache costs a look at it, no thread. The thread of
    a timed-out sign-in ends by itself: each of its requests has the same timeout."""
    if has_fresh_token(credentials):
        return
    deadline = LOGIN_TIMEOUT_S
    try:
        await asyncio.wait_for(_sign_in_once(credentials, validate_authority), deadline)
    except (TimeoutError, requests.exceptions.Timeout):
        raise ConnectorFailed(f"Microsoft sign-in did not answer within {deadline:g} s") from None
    except requests.exceptions.ConnectionError as exc:
        raise ConnectorFailed(
            f"Microsoft sign-in could not be reached ({os_reason(exc) or 'no connection'})"
        ) from None
    except PermissionError as exc:  # the SDK's "Failed to get access token with error: <code>, ..."
        raise ConnectorFailed(
            f"Microsoft sign-in refused the app's credentials ({_error_code(exc)})"
        ) from None
    except Exception as exc:  # msal's ValueError for a login endpoint that does not speak its protocol, ...
        raise ConnectorFailed(f"Microsoft sign-in failed ({type(exc).__name__})") from None


async def _sign_in_once(credentials: Authentication, validate_authority: bool) -> None:
    """One sign-in at a time per credentials: whoever waited for it finds its token cached."""
    async with _lock(credentials):
        if has_fresh_token(credentials):
            return
        await in_daemon_thread(lambda: _token(credentials, validate_authority), name="datathread-sign-in")


def _lock(credentials: Authentication) -> asyncio.Lock:
    """The credentials' sign-in lock, kept on them: `SignedIn` and every `TeamsOut` of their turns share
    the one object, and the lock lives exactly as long as it."""
    lock = getattr(credentials, SIGN_IN_LOCK, None)
    if lock is None:
        lock = asyncio.Lock()
        setattr(credentials, SIGN_IN_LOCK, lock)
    return lock


def has_fresh_token(credentials: Authentication, now: float | None = None) -> bool:
    """Whether msal would hand the SDK a cached token for `credentials` for FRESH_FOR_S more — the look
    msal's own `acquire_token_for_client` takes first, made on the loop without touching the network.
    Not for credentials of another kind (a managed identity's, or before their first sign-in): those
    sign in on a thread, where a cached token costs msal nothing either."""
    try:
        return _cached_for(credentials, time.time() if now is None else now)
    except Exception:  # msal's internals moved (an upgrade): sign in on a thread, as before the cache look
        return False


def _cached_for(credentials: Authentication, now: float) -> bool:
    app = getattr(credentials, "app", None)
    if not isinstance(credentials, MicrosoftAppCredentials) or not isinstance(
        app, ConfidentialClientApplication
    ):
        return False
    scope = credentials.oauth_scope
    scope = scope if scope.endswith("/.default") else f"{scope}/.default"  # as the SDK asks for it
    query = {
        "client_id": app.client_id,
        "environment": app.authority.instance,
        "realm": app.authority.tenant,
        "home_account_id": None,
    }
    for entry in app.token_cache.search(TokenCache.CredentialType.ACCESS_TOKEN, target=[scope], query=query):
        if int(entry["expires_on"]) - now < FRESH_FOR_S:
            continue
        # past its refresh time msal would renew it (on the network) inside the SDK's call
        return not ("refresh_on" in entry and int(entry["refresh_on"]) < now)
    return False


def _token(credentials: Authentication, validate_authority: bool) -> None:
    if isinstance(credentials, MicrosoftAppCredentials) and credentials.app is None:
        # as the SDK builds it (MicrosoftAppCredentials.__get_msal_app), plus a timeout per request and the
        # authority check the SDK was asked for (a private cloud's login host is not one msal knows)
        credentials.app = ConfidentialClientApplication(
            client_id=credentials.microsoft_app_id,
            client_credential=credentials.microsoft_app_password,
            authority=credentials.oauth_endpoint,
            validate_authority=getattr(credentials, "validate_authority", validate_authority),
            timeout=LOGIN_TIMEOUT_S,
        )
    credentials.get_access_token()  # type: ignore[attr-defined]


def _error_code(exc: PermissionError) -> str:
    """The OAuth error code from the SDK's message, not its description (trace and correlation ids)."""
    text = str(exc)
    marker = "with error: "
    if marker in text:
        return text.split(marker, 1)[1].split(",", 1)[0].strip() or "no reason given"
    return "no reason given"
