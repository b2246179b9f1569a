"""What the Modal web and turn containers run: the same ASGI app as `datathread serve`, split in two.

The web container serves `bot.server.create_app` with a `ModalRunner`: it verifies, acks and spawns.
The turn container builds the very same app (same surfaces, so the same job handlers get registered)
with a `LocalRunner`, runs its startup once per container, and runs each spawned job with
`LocalRunner.run_now`. Both refuse to start without REDIS_URL: turns of one thread may land in two
containers, and only a shared store gives them one session lock, one history and one de-dup set.
"""

from __future__ import annotations

import contextlib
from typing import Any

from starlette.applications import Starlette

from bot.server import create_app
from core.config import ConfigError, Settings
from core.runner import LocalRunner, TurnJob, tell_lost, tell_store_down
from core.runner_modal import JOB_ID, JOB_MEMORY_S, ModalRunner, Spawn
from core.sessions import StoreUnavailable

REDIS_REQUIRED = (
    "The Modal deployment needs REDIS_URL (put it in the Modal secret 'datathread-redis'): turns run in "
    "separate containers and share the session lock, history and event de-dup only through Redis."
)


LINK_SECRET_REQUIRED = (
    "The Modal deployment with Teams (MICROSOFT_APP_ID) needs DATATHREAD_LINK_SECRET (put it in the Modal "
    "secret 'datathread-teams'): file links are signed in the turn container and checked in the web one."
)


def require_shared_store(settings: Settings) -> None:
    """Refuse to serve on Modal with per-container state: a per-container store (two turns of a thread
    could run at once) or, with Teams, a per-container link key (links would fail in the web container)."""
    if not settings.redis_url:
        raise ConfigError(REDIS_REQUIRED)
    secret = settings.link_secret.get_secret_value() if settings.link_secret else ""
    if settings.microsoft_app_id and not secret:
        raise ConfigError(LINK_SECRET_REQUIRED)


def build_web_app(settings: Settings, *, spawn: Spawn, freeze_heap: bool = False) -> Starlette:
    """The web endpoint's app: the serve app whose runner spawns the turn function after the ack."""
    require_shared_store(settings)
    return create_app(settings, runner=ModalRunner(spawn), freeze_heap=freeze_heap)


class TurnHost:
    """A turn container's copy of the app: started once (`@modal.enter`), then runs one job per call."""

    def __init__(
        self,
        settings: Settings,
        *,
        analyst: Any | None = None,
        require_redis: bool = True,
        freeze_heap: bool = False,
    ):
        self.settings = settings
        self.require_redis = require_redis  # False only for tests and single-host experiments
        self.runner = LocalRunner()
        self.app = create_app(settings, runner=self.runner, analyst=analyst, freeze_heap=freeze_heap)
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        """Check the shared store, then run the app's startup (builds the Analyst, surfaces' startup)."""
        if self.require_redis:
            require_shared_store(self.settings)
        await self._stack.enter_async_context(self.app.router.lifespan_context(self.app))

    async def run(self, job: dict) -> None:
        """Run one spawned job with the handler its surface registered; failures are logged there.

        Modal gives an input again when its container stopped under it (a pre-emption, a redeploy's
        drain): the job is then not run a second time — it may have posted part of an answer, an
        `/ask` would post its question twice, and a mention's events are claimed already so its
        stream would stay open. Its thread hears that the answer stopped, unless the first run ended
        (answered, or stopped and said so itself as it was cancelled)."""
        turn = TurnJob(kind=job["kind"], payload=dict(job.get("payload") or {}), quick=bool(job.get("quick")))
        job_id = job.get(JOB_ID)
        threads = self.app.state.datathread.threads
        try:
            again = bool(job_id) and not await threads.claim(f"modal-job:{job_id}", ttl_s=JOB_MEMORY_S)
            if again and await threads.claim(f"modal-job-told:{job_id}", ttl_s=JOB_MEMORY_S):
                await tell_lost(self.runner.handlers, turn)  # nobody said it yet: once, whoever is first
        except StoreUnavailable as exc:  # its thread hears so, as from a local runner
            return await tell_store_down(self.runner.handlers, turn, exc)
        if again:
            return
        await self.runner.run_now(turn)  # it answered, or stopped and said so: a second delivery is silent
        if job_id:
            with contextlib.suppress(StoreUnavailable):
                await threads.claim(f"modal-job-told:{job_id}", ttl_s=JOB_MEMORY_S)

    async def stop(self) -> None:
        """Run the app's shutdown (closes the Analyst: sandbox client, store, model client)."""
        await self._stack.aclose()
