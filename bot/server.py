"""One ASGI app for every HTTP surface: Slack (`/slack/events`), Teams (`/api/messages`), signed file
links (`/files/...`) and `/healthz`. `datathread serve` runs it with uvicorn; Modal serves the same app.

The app owns the lifecycle of the core (built once at startup) and of the runner that executes turns
after the platform's ack.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.analyst import Analyst
from core.config import Settings
from core.runner import LocalRunner, Runner

log = logging.getLogger("datathread.server")


@dataclass
class AppState:
    """What request handlers share: the settings, the core and the runner (no globals)."""

    settings: Settings
    runner: Runner
    analyst: Analyst | None = None
    ready: bool = False
    extras: dict = field(default_factory=dict)


def create_app(
    settings: Settings, *, runner: Runner | None = None, analyst: Analyst | None = None
) -> Starlette:
    """Build the ASGI app. Pass `runner` (e.g. Modal's spawn runner) and `analyst` to override the defaults."""
    state = AppState(
        settings=settings,
        runner=runner or LocalRunner(max_concurrent=4 * settings.max_concurrent_turns),
        analyst=analyst,
    )
    routes = [Route("/healthz", _healthz, methods=["GET"])]
    # Imported unconditionally: a broken surface module must fail start-up loudly, not lose its route.
    surfaces = [
        importlib.import_module(m)
        for m in ("bot.slack_app", "bot.teams_app", "bot.files", "bot.schedule_jobs")
    ]
    for mod in surfaces:
        routes += mod.routes(state)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if state.analyst is None:
            state.analyst = await Analyst.create(settings)
        for mod in surfaces:
            if hasattr(mod, "on_startup"):
                await mod.on_startup(state)
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            await state.runner.drain(timeout=30)
            for mod in surfaces:
                if hasattr(mod, "on_shutdown"):
                    await mod.on_shutdown(state)
            await state.analyst.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.datathread = state
    return app


async def _healthz(request: Request) -> JSONResponse:
    state: AppState = request.app.state.datathread
    sandbox = state.analyst.parts.sandbox.protections() if state.analyst is not None else {}
    return JSONResponse({"ok": state.ready, "sandbox": sandbox}, status_code=200 if state.ready else 503)
