"""One ASGI app for every HTTP surface: Slack (`/slack/events`), Teams (`/api/messages`), signed file
links (`/files/...`) and `/healthz`. `datathread serve` runs it with uvicorn; Modal serves the same app.

The app owns the lifecycle of the core (built once at startup) and of the runner that executes turns
after the platform's ack. The surfaces are listed here, explicitly: each owns its client and helpers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.schedule_jobs import Schedules
from bot.slack_app import SlackSurface
from bot.surface import AppState, Surface
from bot.teams_app import TeamsSurface
from core.analyst import Analyst
from core.config import Settings
from core.runner import LocalRunner, Runner

log = logging.getLogger("datathread.server")


def build_surfaces(state: AppState) -> list[Surface]:
    """Every surface of the app, in start order (schedules post through Slack's and Teams' clients)."""
    slack = SlackSurface(state)
    teams = TeamsSurface(state)
    schedules = Schedules(state, slack=slack.client, teams=teams.bot)
    return [slack, teams, state.links, schedules]


def create_app(
    settings: Settings, *, runner: Runner | None = None, analyst: Analyst | None = None
) -> Starlette:
    """Build the ASGI app. Pass `runner` (e.g. Modal's spawn runner) and `analyst` to override the defaults."""
    state = AppState(
        settings=settings,
        runner=runner or LocalRunner(max_concurrent=4 * settings.max_concurrent_turns),
        analyst=analyst,
    )
    surfaces = build_surfaces(state)
    routes = [Route("/healthz", _healthz, methods=["GET"])]
    for surface in surfaces:
        routes += surface.routes()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if state.analyst is None:
            state.analyst = await Analyst.create(settings)
        for surface in surfaces:
            await surface.start()
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            await state.runner.drain(timeout=30)
            for surface in reversed(surfaces):
                await surface.stop()
            await state.analyst.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.datathread = state
    return app


async def _healthz(request: Request) -> JSONResponse:
    state: AppState = request.app.state.datathread
    sandbox = state.analyst.protections() if state.analyst is not None else {}
    return JSONResponse({"ok": state.ready, "sandbox": sandbox}, status_code=200 if state.ready else 503)
