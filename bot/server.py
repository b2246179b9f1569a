"""One ASGI app for every HTTP surface: Slack (`/slack/events`), Teams (`/api/messages`), signed file
links (`/files/...`) and `/healthz`. `datathread serve` runs it with uvicorn; Modal serves the same app.

The app owns the lifecycle of the core (built once at startup) and of the runner that executes turns
after the platform's ack. The surfaces are listed here, explicitly: each owns its client and helpers.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bot.retention import WorkspaceSweeper
from bot.schedule_jobs import Schedules
from bot.slack_app import SlackSurface
from bot.surface import AppState, Surface
from bot.teams_app import TeamsSurface
from core.analyst import Analyst
from core.analyst_front import front_analyst
from core.config import Settings
from core.release import release_id
from core.runner import LocalRunner, Runner
from core.runner_worker import FINISH_S
from core.runner_workers import WorkerRunner

log = logging.getLogger("datathread.server")
HEALTH_STORE_TIMEOUT_S = 1.0  # /healthz waits this long for the session store, then says unreachable


def build_surfaces(state: AppState, slack_identity: dict | None = None) -> list[Surface]:
    """Every surface of the app, in start order (schedules post through Slack's and Teams' clients)."""
    slack = SlackSurface(state, slack_identity)
    teams = TeamsSurface(state)
    schedules = Schedules(state, slack=slack.client, teams=teams.bot)
    return [slack, teams, state.links, schedules, WorkspaceSweeper(state)]


def create_app(
    settings: Settings,
    *,
    runner: Runner | None = None,
    analyst: Analyst | None = None,
    finish_s: float = FINISH_S,
    freeze_heap: bool = False,
    slack_identity: dict | None = None,
) -> Starlette:
    """Build the ASGI app. Pass `runner` (e.g. Modal's spawn runner) and `analyst` to override the defaults.

    Without a runner, DATATHREAD_TURN_WORKERS > 0 runs turns in that many worker processes
    (`bot/turn_worker.py`) and this process only acks; 0 runs them as tasks in this process. At
    shutdown, running turns get `finish_s` seconds to end; the threads of the rest are told they stopped.

    `freeze_heap`, for a process that serves until it exits: once started, everything built so far
    (imports, the core: about 250,000 objects) is moved out of the cyclic garbage collector's reach
    (`gc.freeze`). They live as long as the process anyway, and a full collection walking them takes
    about 150 ms on the event loop — run whenever the long-lived objects have grown by a quarter.

    `slack_identity`: what `auth.test` said of SLACK_BOT_TOKEN at start, when `serve` asked
    (bot/slack_identity.py): whose installation the bot is, for the access rules and the log."""
    workers = None
    if runner is None and settings.turn_workers > 0:
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        runner = workers = WorkerRunner(
            settings, "bot.turn_worker", workers=settings.turn_workers, log_level=level, finish_s=finish_s
        )
    state = AppState(
        settings=settings,
        runner=runner or LocalRunner(max_concurrent=4 * settings.max_concurrent_turns),
        analyst=analyst,
    )
    surfaces = build_surfaces(state, slack_identity)
    routes = [Route("/healthz", _healthz, methods=["GET"])]
    for surface in surfaces:
        routes += surface.routes()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if state.analyst is None:  # with workers, this process never runs a step: no fork server here
            state.analyst = await (front_analyst(settings) if workers else Analyst.create(settings))
        for surface in surfaces:
            await surface.start()
        if workers is not None:
            await workers.start()
        if freeze_heap:
            gc.collect()  # start-up's garbage first: what is frozen is never collected
            gc.freeze()
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            if workers is not None:
                await workers.stop()
            elif isinstance(state.runner, LocalRunner):
                await state.runner.stop(timeout=finish_s)
            else:  # a remote runner's jobs run on without this process
                await state.runner.drain(timeout=finish_s)
            for surface in reversed(surfaces):
                await surface.stop()
            await state.analyst.close()
            if freeze_heap:  # collectable again at exit: DuckDB's bindings (nanobind) report every one of
                gc.unfreeze()  # their objects left uncollected as "leaked", ~50 lines on stderr

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.datathread = state
    app.state.workers = workers
    app.state.teams = next(s for s in surfaces if isinstance(s, TeamsSurface)).bot
    app.state.release = release_id(settings.release)
    return app


def stopping(app: Starlette) -> None:
    """The process was told to stop (called from the signal handler, before the shutdown reaches the
    lifespan): a turn worker ending from now on is part of stopping, not a crash to restart. SIGTERM to
    the process group ends the workers' fork template, and so the workers, before the lifespan stops them."""
    workers: WorkerRunner | None = app.state.workers
    if workers is not None:
        workers.stopping()


def hurry(app: Starlette) -> None:
    """A second Ctrl-C while stopping: answers still running are stopped now (their threads told), not
    given the rest of their 30 s. From the signal handler: flags and signals only."""
    workers: WorkerRunner | None = app.state.workers
    runner = app.state.datathread.runner
    if workers is not None:
        workers.hurry()
    elif isinstance(runner, LocalRunner):
        runner.hurry()


async def _healthz(request: Request) -> JSONResponse:
    state: AppState = request.app.state.datathread
    workers: WorkerRunner | None = request.app.state.workers
    if workers is not None:  # the steps run in the workers' sandboxes
        sandbox = workers.protections()
    else:
        sandbox = state.analyst.protections() if state.analyst is not None else {}
    store = "unknown"  # not started yet, or stopping (the store may be closed): nothing to ask
    if state.analyst is not None and state.ready:
        reachable = await state.threads.store_reachable(timeout_s=HEALTH_STORE_TIMEOUT_S)
        store = "ok" if reachable else "unreachable"
    ok = state.ready and store == "ok"
    # Only the word: the store's sentence names hosts and paths (the log and `doctor` have it).
    # The release, so a fleet upgraded one replica at a time shows which runs what.
    body = {
        "ok": ok,
        "sandbox": public_protections(sandbox),
        "store": store,
        "release": request.app.state.release,
    }
    # With an app id: whether Teams' tokens can be checked (fetched at the first request; "not
    # loaded": every Teams message is refused until the key endpoint answers). Not in `ok`: a
    # replica restarted for it would find the same endpoint.
    if keys := request.app.state.teams.signing_keys_state():
        body["teams_signing_keys"] = keys
    return JSONResponse(body, status_code=200 if ok else 503)


def public_protections(protections: dict[str, str]) -> dict[str, str]:
    """Each protection's state, `on` or `OFF`, without its description: `/healthz` answers anyone who
    can reach the server, and the descriptions name host internals (the masked secret files' paths,
    the cgroup version, the kernel's Landlock ABI). The details are for operators: `datathread doctor`
    and the start log."""
    return {name: "on" if detail.startswith("on") else "OFF" for name, detail in protections.items()}
