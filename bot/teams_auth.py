"""Bot Framework authentication for the Teams surface: botframework-connector's own
(`BotFrameworkAuthentication`), configured like botbuilder's `ConfigurationBotFrameworkAuthentication`
from MICROSOFT_APP_ID / _PASSWORD / _TENANT_ID / _TYPE, and the loopback-only mode without an app id.
https://learn.microsoft.com/azure/bot-service/rest-api/bot-framework-rest-connector-authentication
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from botbuilder.core import BotAdapter
from botbuilder.core.cloud_adapter_base import CloudAdapterBase
from botbuilder.schema import Activity, CallerIdConstants
from botframework.connector.auth import (
    AuthenticationConstants,
    BotFrameworkAuthentication,
    BotFrameworkAuthenticationFactory,
    JwtTokenExtractor,
    PasswordServiceClientCredentialFactory,
    ServiceClientCredentialsFactory,
)

from bot.teams_connector import BoundedAuthentication
from bot.teams_keys import KeysState, SigningKeys, channel_metadata_url
from bot.teams_login import SignedIn
from bot.transcript import brief
from core.config import ConfigError, Settings

log = logging.getLogger("datathread.teams")


class TeamsAdapter(CloudAdapterBase):
    """botbuilder's cloud adapter as is: proactive turns, send/update through the connector client
    (each client bounded in time: `bot/teams_connector.py`)."""


# How long a request's token check may take, key fetch included, before the request is refused.
AUTH_DEADLINE_S = 10.0


class AuthLoop:
    """The SDK's token check, on an event loop of its own in one daemon thread, within a deadline.

    Why: botframework-connector's token check is async in name but does blocking work inside (its own
    key fetch was a `requests.get` without a timeout). On the web process's loop one request — any
    caller can send a token with a made-up key id — froze every route (Slack acks and /healthz too)
    for as long as the key endpoint kept the connection open. The keys are now fetched by
    `bot/teams_keys.py`, bounded and without blocking; the check still runs on this thread's loop, so
    whatever else in it blocks holds only this thread: later Teams requests are refused after
    `AUTH_DEADLINE_S`, and the rest of the process goes on. Daemon: nothing on it holds the exit."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._started:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="teams-auth", daemon=True).start()
            return self._loop

    async def check(self, auth: BotFrameworkAuthentication, activity: Activity, header: str) -> None:
        """Raises what the SDK raises for a refused token, TimeoutError past the deadline."""
        future = asyncio.run_coroutine_threadsafe(auth.authenticate_request(activity, header), self._ensure())
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), AUTH_DEADLINE_S)
        finally:
            future.cancel()  # a check still queued behind a stuck one never runs


@dataclass
class TeamsBot:
    """What Teams turns share in this process: settings, auth and the adapter."""

    settings: Settings
    auth: BotFrameworkAuthentication
    adapter: TeamsAdapter
    auth_loop: AuthLoop = field(default_factory=AuthLoop)
    channel_keys: SigningKeys | None = None  # the keys Teams' tokens are signed with

    @property
    def app_id(self) -> str:
        return self.settings.microsoft_app_id or ""

    def signing_keys_state(self) -> KeysState | None:
        """Whether Teams' tokens can be checked (`/healthz`); None without an app id (none are)."""
        if not self.app_id or self.channel_keys is None:
            return None
        return self.channel_keys.state()

    def connector_key(self) -> str:
        return BotAdapter.BOT_CONNECTOR_CLIENT_KEY


def credentials_factory(settings: Settings) -> ServiceClientCredentialsFactory:
    """App credentials by MICROSOFT_APP_TYPE, as botbuilder's ConfigurationServiceClientCredentialFactory does:
    SingleTenant needs the tenant id; MultiTenant signs in through botframework.com; UserAssignedMSI
    uses a managed identity (no password)."""
    app_type = (settings.microsoft_app_type or "MultiTenant").strip().lower()
    app_id = settings.microsoft_app_id or ""
    password = settings.microsoft_app_password.get_secret_value() if settings.microsoft_app_password else ""
    if app_type == "userassignedmsi":
        from botframework.connector.auth import ManagedIdentityServiceClientCredentialsFactory

        return ManagedIdentityServiceClientCredentialsFactory(app_id)
    if app_type == "singletenant":
        if app_id and not settings.microsoft_app_tenant_id:
            raise ConfigError("MICROSOFT_APP_TYPE=SingleTenant needs MICROSOFT_APP_TENANT_ID.")
        return PasswordServiceClientCredentialFactory(app_id, password, settings.microsoft_app_tenant_id)
    return PasswordServiceClientCredentialFactory(app_id, password, "")


def build_auth(settings: Settings, *, login_url: str = "") -> BotFrameworkAuthentication:
    """Public-cloud Bot Framework authentication; DATATHREAD_BOT_OPENID_METADATA_URL overrides where the
    channel's signing keys are fetched (botbuilder's BotOpenIdMetadata setting), `login_url` where the
    bot signs in to send (botbuilder's ToChannelFromBotLoginUrl: a private cloud, a test's fake).
    Credentials are signed in off the event loop and kept for the process (`bot/teams_login.py`)."""
    factory = SignedIn(credentials_factory(settings))
    if not settings.bot_openid_metadata_url and not login_url:
        return BotFrameworkAuthenticationFactory.create(credential_factory=factory)
    return BotFrameworkAuthenticationFactory.create(
        to_channel_from_bot_login_url=login_url
        or AuthenticationConstants.TO_CHANNEL_FROM_BOT_LOGIN_URL_PREFIX,
        to_channel_from_bot_oauth_scope=AuthenticationConstants.TO_CHANNEL_FROM_BOT_OAUTH_SCOPE,
        to_bot_from_channel_token_issuer=AuthenticationConstants.TO_BOT_FROM_CHANNEL_TOKEN_ISSUER,
        oauth_url=AuthenticationConstants.OAUTH_URL,
        to_bot_from_channel_open_id_metadata_url=channel_metadata_url(settings),
        to_bot_from_emulator_open_id_metadata_url=AuthenticationConstants.TO_BOT_FROM_EMULATOR_OPENID_METADATA_URL,
        caller_id=CallerIdConstants.public_azure_channel,
        credential_factory=factory,
    )


def is_loopback(host: str | None) -> bool:
    """True for localhost and loopback addresses: without an app id only these may talk to the bot."""
    host = (host or "").strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_only_refusal(activity: Activity, client_host: str | None) -> str | None:
    """Why an unauthenticated (no app id) request is refused, or None: both the caller and the
    serviceUrl the answer would go to must be loopback, so no one else can run turns or receive them."""
    if not is_loopback(client_host):
        return f"client {client_host!r} is not loopback"
    service_host = urlsplit(activity.service_url or "").hostname
    if not is_loopback(service_host):
        return f"serviceUrl host {service_host!r} is not loopback"
    return None


async def authenticate(
    bot: TeamsBot, activity: Activity, header: str | None, client_host: str | None = None
) -> bool:
    """True when the request may proceed: a valid channel token, or, with no app id configured,
    a loopback caller whose serviceUrl is loopback too (local/emulator use only)."""
    if not bot.app_id:
        reason = local_only_refusal(activity, client_host)
        if reason:
            log.warning("refused an unauthenticated Bot Framework request (no MICROSOFT_APP_ID): %s", reason)
        return reason is None
    if not header:
        log.warning("refused a Bot Framework request: no Authorization header (not from Teams)")
        return False
    try:
        await bot.auth_loop.check(bot.auth, activity, header)
    except TimeoutError:
        log.warning(
            "refused a Bot Framework request: its token could not be checked within %g s (are the "
            "channel's signing keys reachable from here? DATATHREAD_BOT_OPENID_METADATA_URL)",
            AUTH_DEADLINE_S,
        )
        return False
    except Exception as exc:  # PermissionError, jwt errors, unknown keys: all mean "not from Teams"
        log.warning("refused a Bot Framework request: %s", refusal_words(exc))
        return False
    return True


def build_bot(settings: Settings, *, login_url: str = "") -> TeamsBot:
    """Settings, authentication and adapter for this process's Teams turns. The SDK's key cache gets
    bounded fetches (`bot/teams_keys.py`) for both URLs it checks tokens against: the channel's, and
    the one tokens with an Emulator or skill issuer are checked against (anyone may send such a token)."""
    auth = build_auth(settings, login_url=login_url)
    channel = SigningKeys(channel_metadata_url(settings))
    emulator = SigningKeys(AuthenticationConstants.TO_BOT_FROM_EMULATOR_OPENID_METADATA_URL)
    # replacing the SDK's own (or an earlier bot's in this process: a test's)
    JwtTokenExtractor.metadataCache.update({keys.url: keys for keys in (channel, emulator)})
    return TeamsBot(settings, auth, TeamsAdapter(BoundedAuthentication(auth)), channel_keys=channel)


def refusal_words(exc: Exception) -> str:
    """Why a token was refused, for the operator: the SDK's reason on one line ("Invalid AppId passed
    on token: …", "Invalid audience."), and, when the token was made for another app, the setting to
    check. It logged only "PermissionError", and an admin with the wrong MICROSOFT_APP_ID (every
    message from Teams refused) had nothing to go on. The reason quotes the token's claims at most,
    never the token."""
    said = brief(str(exc), 200)
    words = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
    if "appid" in said.lower() or "audience" in said.lower():
        words += " (the token was made for another app: is MICROSOFT_APP_ID the Azure Bot's app id?)"
    return words
