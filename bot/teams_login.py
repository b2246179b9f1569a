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
handed out, the token is fetched on a worker thread within `LOGIN_TIMEOUT_S`, so the SDK's own call in
`signed_session` finds it in msal's cache. A turn can outlive that token (msal counts it expired five
minutes early): so every send or edit of a turn signs in the same way first (`TeamsOut._signed_in` in
bot/teams_progress.py), a thread hop while the token is good, and msal never reaches the network from
inside the SDK's call on the loop.
"""

from __future__ import annotations

import asyncio

import requests
from botframework.connector.auth import MicrosoftAppCredentials, ServiceClientCredentialsFactory
from msal import ConfidentialClientApplication
from msrest.authentication import Authentication

from bot.teams_connector import ConnectorFailed
from core.wording import os_reason

# Read at each use: tests shorten it. Microsoft's login answers in well under a second; this only
# decides how soon a silent one is given up on (each of msal's requests, and a whole sign-in).
LOGIN_TIMEOUT_S = 10.0


class SignedIn(ServiceClientCredentialsFactory):
    """The SDK's credential factory (`inner`), its credentials cached and signed in before use."""

    def __init__(self, inner: ServiceClientCredentialsFactory):
        self.inner = inner
        self._made: dict[tuple, Authentication] = {}
        self._signing_in: dict[tuple, asyncio.Lock] = {}

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
            # one sign-in at a time per credentials: turns queued behind a slow one find its token cached
            async with self._signing_in.setdefault(key, asyncio.Lock()):
                await sign_in(credentials, validate_authority)
        return credentials


async def sign_in(credentials: Authentication, validate_authority: bool = True) -> None:
    """Have a token for `credentials` in its cache; raise `ConnectorFailed` past `LOGIN_TIMEOUT_S` or
    when the sign-in is refused (wrong password, unknown app). The worker thread of a timed-out
    sign-in ends by itself: each of its requests has the same timeout."""
    deadline = LOGIN_TIMEOUT_S
    try:
        await asyncio.wait_for(asyncio.to_thread(_token, credentials, validate_authority), deadline)
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
