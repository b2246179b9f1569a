"""Microsoft Teams over the Bot Framework: `POST /api/messages` authenticates the activity, hands it
to the runner and answers at once; the turn continues proactively in `bot/teams_jobs.py`.

Everything Bot-Framework-specific lives here and in `bot/teams_*.py` (authentication in
`bot/teams_auth.py`), so a move to the Microsoft 365 Agents SDK touches only this corner.
"""

from __future__ import annotations

import json
import logging

from botbuilder.schema import Activity, ActivityTypes
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.http_body import BodyTooLarge, read_body, too_large
from bot.log_setup import ENDPOINT_NOTICE
from bot.surface import AppState
from bot.teams_auth import TeamsBot, authenticate, build_bot
from bot.teams_jobs import run_job, run_lost, run_rest, run_rest_lost
from bot.teams_later import REST_KIND
from bot.teams_who import channel_id, tenant_of
from core.runner import TurnJob
from core.runner_worker import lost_kind
from core.sessions import StoreUnavailable

log = logging.getLogger("datathread.teams")

JOB_KIND = "teams.turn"


def bot_was_added(activity: Activity) -> bool:
    """A conversationUpdate that adds the bot itself (to a team, a group chat or a personal chat)."""
    me = activity.recipient.id if activity.recipient else None
    return activity.type == ActivityTypes.conversation_update and any(
        m.id == me for m in activity.members_added or []
    )


def said_removed(activity: Activity) -> None:
    """The bot removed from a team, chat or the tenant (conversationUpdate without it, installationUpdate
    `remove`): one line naming `datathread forget`, which deletes what is kept. Nothing is deleted by
    itself: a mistaken removal must not lose everything."""
    me = activity.recipient.id if activity.recipient else None
    removed = any(m.id == me for m in activity.members_removed or []) or (
        activity.type == "installationUpdate" and (activity.action or "").startswith("remove")
    )
    if removed:
        conversation, tenant = channel_id(activity) or "?", tenant_of(activity) or "?"  # as turns record them
        log.warning(
            "teams: the bot was removed from conversation %s (tenant %s); `datathread forget --channel %s` "
            "removes its data, `datathread forget --team %s` all of the tenant's",
            conversation,
            tenant,
            conversation,
            tenant,
        )


class TeamsSurface:
    """The Teams surface: its route, its Bot Framework adapter, and the `teams.turn` job."""

    def __init__(self, state: AppState, bot: TeamsBot | None = None):
        self.state = state
        self.bot = bot or build_bot(state.settings)
        self._other_channels: set[str] = set()  # channels other than Teams', said in the log once

    def _from_teams(self, activity: Activity) -> bool:
        """Whether to act on `activity`: with MICROSOFT_APP_ID, only Teams' (`channelId` "msteams").
        The same Azure Bot takes Direct Line and Web Chat too, whose clients choose `from.aadObjectId`
        and `channelData.tenant.id` themselves: answered, anyone could pass as a colleague of an allowed
        tenant. Said once per other channel in the log; the Bot Connector gets its 200 all the same.
        Without an app id (loopback only) the Bot Framework Emulator's "emulator" is taken too."""
        channel = activity.channel_id or ""
        if not self.bot.app_id or channel == "msteams":
            return True
        if channel not in self._other_channels:
            self._other_channels.add(channel)
            log.warning(
                "teams: ignoring activities from the %r channel: datathread answers Microsoft Teams only "
                "(turn that channel off in the Azure Bot's Channels)",
                channel,
            )
        return False

    def routes(self) -> list[Route]:
        """`POST /api/messages`: authenticate, de-duplicate, submit a `teams.turn` job, answer at once."""
        return [Route("/api/messages", self._messages, methods=["POST"])]

    async def _messages(self, request: Request) -> Response:
        state = self.state
        try:
            raw = await read_body(request)  # capped: read before the token is checked
        except BodyTooLarge:
            log.warning("POST /api/messages: body over the size cap, refused (413)")
            return too_large()
        try:
            body = json.loads(raw)
            activity = Activity().deserialize(body)
        except Exception:
            return JSONResponse({"error": "not a Bot Framework activity"}, status_code=400)
        client_host = request.client.host if request.client else None
        if not await authenticate(self.bot, activity, request.headers.get("authorization"), client_host):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if not self._from_teams(activity):
            return Response(status_code=200)
        if activity.type not in (ActivityTypes.message, ActivityTypes.invoke) and not bot_was_added(activity):
            said_removed(activity)
            return Response(status_code=200)
        dedup = f"teams:{activity.conversation.id if activity.conversation else ''}:{activity.id}"
        if activity.id and state.analyst is not None and not await _first_time(state, dedup):
            return Response(status_code=200)  # a retry of an activity we already took
        # Card clicks (Run/Cancel, Show SQL, feedback) carry `value` and no text: they skip the turn queue.
        quick = bool(activity.value) and not (activity.text or "").strip()
        await state.runner.submit(TurnJob(kind=JOB_KIND, payload={"activity": body}, quick=quick))
        if activity.type == ActivityTypes.invoke:
            return JSONResponse({}, status_code=200)  # invoke needs a 200 body within 15 s
        return Response(status_code=202)

    async def start(self) -> None:
        """Register the turn handler; say loudly when incoming requests are not authenticated."""

        async def handler(job: TurnJob) -> None:
            await run_job(self.bot, self.state, job)

        self.state.runner.register(JOB_KIND, handler)

        async def lost(job: TurnJob) -> None:  # the worker running it died (core/runner_workers.py)
            await run_lost(self.bot, self.state, job)

        self.state.runner.register(lost_kind(JOB_KIND), lost)

        async def rest(job: TurnJob) -> None:  # the rest of an answer Teams throttled part-way
            await run_rest(self.bot, self.state, job)

        async def rest_lost(job: TurnJob) -> None:
            await run_rest_lost(self.bot, self.state, job)

        self.state.runner.register(REST_KIND, rest)
        self.state.runner.register(lost_kind(REST_KIND), rest_lost)
        if not self.bot.app_id:
            log.warning(
                "MICROSOFT_APP_ID is not set: POST /api/messages accepts UNAUTHENTICATED requests, "
                "from loopback clients with a loopback serviceUrl only. Use this only locally "
                "(Bot Framework Emulator); set MICROSOFT_APP_ID/PASSWORD for Teams.",
                extra=ENDPOINT_NOTICE,
            )
        else:
            settings = self.state.settings  # said by the web process only, as the notice above
            log.info(
                "Teams: app %s (%s)", self.bot.app_id, settings.microsoft_app_type, extra=ENDPOINT_NOTICE
            )

    async def stop(self) -> None:
        return None


async def _first_time(state: AppState, key: str) -> bool:
    """The de-dup claim inside the ack. An unreachable store can't say: the activity goes on (never a
    500 that makes the Bot Connector retry), and its job tells the conversation why it can't answer."""
    try:
        return await state.threads.claim(key)
    except StoreUnavailable as exc:
        log.warning("could not de-duplicate Teams activity: %s", exc)
        return True
