"""Microsoft Teams over the Bot Framework: `POST /api/messages` authenticates the activity, hands it
to the runner and answers at once; the turn continues proactively in `bot/teams_turn.py`.

Everything Bot-Framework-specific lives here and in `bot/teams_*.py`, so a move to the Microsoft 365
Agents SDK touches only this corner. Authentication is botframework-connector's own
(`BotFrameworkAuthentication`), configured like botbuilder's `ConfigurationBotFrameworkAuthentication`
from MICROSOFT_APP_ID / _PASSWORD / _TENANT_ID / _TYPE.
https://learn.microsoft.com/azure/bot-service/rest-api/bot-framework-rest-connector-authentication
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from botbuilder.core import BotAdapter
from botbuilder.core.cloud_adapter_base import CloudAdapterBase
from botbuilder.schema import Activity, ActivityTypes, CallerIdConstants
from botframework.connector.auth import (
    AuthenticationConstants,
    BotFrameworkAuthentication,
    BotFrameworkAuthenticationFactory,
    PasswordServiceClientCredentialFactory,
    ServiceClientCredentialsFactory,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.config import ConfigError, Settings
from core.runner import TurnJob

if TYPE_CHECKING:
    from bot.server import AppState

log = logging.getLogger("datathread.teams")

JOB_KIND = "teams.turn"
_STATE_KEY = "teams.bot"


class TeamsAdapter(CloudAdapterBase):
    """botbuilder's cloud adapter as is: proactive turns, send/update through the connector client."""


@dataclass
class TeamsBot:
    """What Teams turns share in this process: settings, auth and the adapter."""

    settings: Settings
    auth: BotFrameworkAuthentication
    adapter: TeamsAdapter

    @property
    def app_id(self) -> str:
        return self.settings.microsoft_app_id or ""

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


def build_auth(settings: Settings) -> BotFrameworkAuthentication:
    """Public-cloud Bot Framework authentication; DATATHREAD_BOT_OPENID_METADATA_URL overrides where the
    channel's signing keys are fetched (botbuilder's BotOpenIdMetadata setting)."""
    factory = credentials_factory(settings)
    if not settings.bot_openid_metadata_url:
        return BotFrameworkAuthenticationFactory.create(credential_factory=factory)
    return BotFrameworkAuthenticationFactory.create(
        to_channel_from_bot_login_url=AuthenticationConstants.TO_CHANNEL_FROM_BOT_LOGIN_URL_PREFIX,
        to_channel_from_bot_oauth_scope=AuthenticationConstants.TO_CHANNEL_FROM_BOT_OAUTH_SCOPE,
        to_bot_from_channel_token_issuer=AuthenticationConstants.TO_BOT_FROM_CHANNEL_TOKEN_ISSUER,
        oauth_url=AuthenticationConstants.OAUTH_URL,
        to_bot_from_channel_open_id_metadata_url=settings.bot_openid_metadata_url,
        to_bot_from_emulator_open_id_metadata_url=AuthenticationConstants.TO_BOT_FROM_EMULATOR_OPENID_METADATA_URL,
        caller_id=CallerIdConstants.public_azure_channel,
        credential_factory=factory,
    )


def bot_for(state: AppState) -> TeamsBot:
    """The app's TeamsBot, built once from the settings and kept in the app state."""
    bot = state.extras.get(_STATE_KEY)
    if bot is None:
        auth = build_auth(state.settings)
        bot = state.extras[_STATE_KEY] = TeamsBot(state.settings, auth, TeamsAdapter(auth))
    return bot


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
        return False
    try:
        await bot.auth.authenticate_request(activity, header)
    except Exception as exc:  # PermissionError, jwt errors, unknown keys: all mean "not from Teams"
        log.warning("refused a Bot Framework request: %s", type(exc).__name__)
        return False
    return True


def bot_was_added(activity: Activity) -> bool:
    """A conversationUpdate that adds the bot itself (to a team, a group chat or a personal chat)."""
    me = activity.recipient.id if activity.recipient else None
    return activity.type == ActivityTypes.conversation_update and any(
        m.id == me for m in activity.members_added or []
    )


def routes(state: AppState) -> list[Route]:
    """`POST /api/messages`: authenticate, de-duplicate, submit a `teams.turn` job, answer at once."""
    bot = bot_for(state)

    async def messages(request: Request) -> Response:
        try:
            body = await request.json()
            activity = Activity().deserialize(body)
        except Exception:
            return JSONResponse({"error": "not a Bot Framework activity"}, status_code=400)
        client_host = request.client.host if request.client else None
        if not await authenticate(bot, activity, request.headers.get("authorization"), client_host):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if activity.type not in (ActivityTypes.message, ActivityTypes.invoke) and not bot_was_added(activity):
            return Response(status_code=200)
        store = state.analyst.store if state.analyst else None
        dedup = f"teams:{activity.conversation.id if activity.conversation else ''}:{activity.id}"
        if activity.id and store is not None and not await store.first_seen(dedup):
            return Response(status_code=200)  # a retry of an activity we already took
        # Card clicks (Run/Cancel, Show SQL, feedback) carry `value` and no text: they skip the turn queue.
        quick = bool(activity.value) and not (activity.text or "").strip()
        await state.runner.submit(TurnJob(kind=JOB_KIND, payload={"activity": body}, quick=quick))
        if activity.type == ActivityTypes.invoke:
            return JSONResponse({}, status_code=200)  # invoke needs a 200 body within 15 s
        return Response(status_code=202)

    return [Route("/api/messages", messages, methods=["POST"])]


async def on_startup(state: AppState) -> None:
    """Register the turn handler; say loudly when incoming requests are not authenticated."""
    from bot.teams_turn import run_job

    bot = bot_for(state)

    async def handler(job: TurnJob) -> None:
        await run_job(bot, state, job)

    state.runner.register(JOB_KIND, handler)
    if not bot.app_id:
        log.warning(
            "MICROSOFT_APP_ID is not set: POST /api/messages accepts UNAUTHENTICATED requests, "
            "from loopback clients with a loopback serviceUrl only. Use this only locally "
            "(Bot Framework Emulator); set MICROSOFT_APP_ID/PASSWORD for Teams."
        )
    else:
        log.info("Teams: app %s (%s)", bot.app_id, state.settings.microsoft_app_type)
