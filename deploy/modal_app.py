"""The Modal app: web endpoint, turn function, step worker, volume, secrets. Wiring only.

Deploy with `modal deploy deploy/modal_app.py` (see docs/MODAL.md). Settings are read once, here:
on the deployer's machine they size the functions (warm containers, timeouts); in a container they
come from the image's env and the Modal secrets.

- `web`: the same ASGI app as `datathread serve`; its runner spawns `TurnWorker.run` after the ack.
- `TurnWorker`: runs one turn per call with the handler the surface registered; holds the secrets.
- `schedules_tick`: once a minute, claims due scheduled answers and spawns `TurnWorker.run` for each.
- `sweep_workspaces`: every hour, removes the Volume folders of threads idle past their history.
- `StepWorker`: runs SQL and Python steps in `/workspace/<session_id>` of the Volume; no network,
  no secrets, the local sandbox's fork server inside (data stack imported once per container).

Every container imports this module; the bot's surfaces (Bolt, botbuilder, the Claude SDK) are imported
inside the functions that serve them, so a step worker's cold start does not pay for them.
"""

from __future__ import annotations

from pathlib import Path

import modal

from core.config import load_settings, split_list
from core.release import release_id
from core.runner_modal import ModalRunner  # noqa: F401  (re-exported: the runner of this deployment)
from core.sandbox_modal import STEP_WORKER_CLASS, VolumeWorkspaces, image_env

PROJECT = Path(__file__).resolve().parent.parent
WORKSPACE = "/workspace"
CONTAINER_HOME = "/tmp/datathread"  # per-container state (demo warehouse copy); never the volume

SETTINGS = load_settings()

image = (
    modal.Image.debian_slim(python_version="3.11")
    .apt_install("fonts-noto-cjk")  # charts with Chinese, Japanese or Korean text (core/chart_fonts.py)
    # The versions uv.lock pins, without the dev group; the project itself comes as source below.
    .uv_sync(str(PROJECT), extra_options="--no-dev")
    .env(
        {
            "DATATHREAD_SANDBOX": "modal",
            "DATATHREAD_HOME": CONTAINER_HOME,
            "DATATHREAD_MODAL_APP": SETTINGS.modal_app,
            "DATATHREAD_MODAL_VOLUME": SETTINGS.modal_volume,
            "DATATHREAD_SCHEDULER_LOOP": "0",  # schedules_tick below is the one scheduler on Modal
            # The image holds the sources, not the checkout's .git: the release is read here, on the
            # deployer's machine (a DATATHREAD_RELEASE set there wins), for --version, doctor and /healthz.
            "DATATHREAD_RELEASE": release_id(SETTINGS.release, PROJECT),
            "PYTHONUNBUFFERED": "1",
        }
        | image_env(SETTINGS)  # the secrets' names and the step limits, as they are where you deploy
    )
    .add_local_python_source("core", "bot", "deploy")
)

app = modal.App(SETTINGS.modal_app, image=image)
volume = modal.Volume.from_name(SETTINGS.modal_volume, create_if_missing=True)
secrets = [modal.Secret.from_name(name) for name in split_list(SETTINGS.modal_secrets)]
store_secret = [modal.Secret.from_name(SETTINGS.modal_store_secret)]  # Redis alone: for the Volume's sweep
warm = {
    "min_containers": SETTINGS.modal_min_containers,
    "max_containers": SETTINGS.modal_max_containers,  # a bound on the bill, however many events arrive
    "scaledown_window": SETTINGS.modal_scaledown_window,
}


@app.cls(
    volumes={WORKSPACE: volume},
    block_network=True,  # model-written code never reaches the network (BigQuery runs in TurnWorker)
    restrict_modal_access=True,  # and cannot use the container's Modal identity for other resources
    timeout=int(SETTINGS.step_timeout) + 60,  # the fork server kills a step at step_timeout first
    memory=(1024, SETTINGS.step_memory_mb + 1024),  # (billed request, hard limit) in MiB
    cpu=(1.0, 2.0),  # (billed request, limit) in cores
    min_containers=SETTINGS.modal_step_min_containers,
    max_containers=SETTINGS.modal_step_max_containers,  # steps past it queue for a free container
    scaledown_window=SETTINGS.modal_scaledown_window,
)
class StepWorker:
    """One step per call (no input concurrency: the Volume is reloaded and committed around each step)."""

    @modal.enter()
    async def start(self) -> None:
        self.workspaces = VolumeWorkspaces.from_settings(
            SETTINGS,
            root=Path(WORKSPACE),
            reload=volume.reload.aio,
            commit=volume.commit.aio,
            network_blocked=True,
        )
        await self.workspaces.start()

    @modal.method()
    async def run_step(self, request: dict) -> dict:
        return await self.workspaces.run_step(request)

    @modal.method()
    async def read_file(self, session_id: str, path: str) -> bytes:
        return await self.workspaces.read_file(session_id, path)

    @modal.method()
    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        await self.workspaces.write_file(session_id, path, data)

    @modal.method()
    async def list_files(self, session_id: str) -> list[dict]:
        return await self.workspaces.list_files(session_id)

    @modal.method()
    def protections(self) -> dict[str, str]:
        return self.workspaces.protections()

    @modal.exit()
    async def stop(self) -> None:
        await self.workspaces.close()


assert StepWorker.__name__ == STEP_WORKER_CLASS  # ModalSandbox looks the class up by this name


@app.cls(secrets=secrets, timeout=SETTINGS.modal_turn_timeout, **warm)
@modal.concurrent(max_inputs=8)  # a turn mostly waits on the model and on steps
class TurnWorker:
    """Runs spawned turns with the same app and handlers as the web endpoint (session lock in Redis)."""

    @modal.enter()
    async def start(self) -> None:
        from deploy.turn_host import TurnHost

        self.host = TurnHost(SETTINGS, freeze_heap=True)  # a container serves until it is stopped
        await self.host.start()

    @modal.method()
    async def run(self, job: dict) -> None:
        await self.host.run(job)

    @modal.exit()
    async def stop(self) -> None:
        await self.host.stop()


@app.function(secrets=secrets, timeout=60, **warm)
@modal.concurrent(max_inputs=100)  # acks are short and I/O-bound
@modal.asgi_app(label=SETTINGS.modal_app)
def web():
    """POST /slack/events, POST /api/messages, GET /healthz — acks, then spawns TurnWorker.run."""
    from deploy.turn_host import build_web_app

    return build_web_app(SETTINGS, spawn=TurnWorker().run.spawn.aio, freeze_heap=True)


@app.function(secrets=secrets, schedule=modal.Period(minutes=1), timeout=120)
async def schedules_tick() -> None:
    """Scheduled answers: claim due occurrences (once across containers, in Redis) and spawn their turns."""
    from bot.schedule_jobs import tick_once
    from deploy.turn_host import require_shared_store

    require_shared_store(SETTINGS)
    await tick_once(SETTINGS, TurnWorker().run.spawn.aio)


@app.function(
    secrets=store_secret,
    volumes={WORKSPACE: volume},
    schedule=modal.Period(hours=1),
    timeout=1800,
    restrict_modal_access=True,  # its own Volume, nothing else of the account
)
async def sweep_workspaces() -> None:
    """The Volume's folders of threads idle past DATATHREAD_HISTORY_TTL_DAYS whose history Redis let go:
    removed by the local sweep's rules. It only lists, renames and deletes; it never opens a step's file."""
    from bot.retention import sweep_volume
    from deploy.turn_host import require_shared_store

    require_shared_store(SETTINGS)
    await sweep_volume(SETTINGS, root=Path(WORKSPACE), reload=volume.reload.aio, commit=volume.commit.aio)


@app.local_entrypoint()
def smoke() -> None:
    """`modal run deploy/modal_app.py`: one Python step on the deployed worker, printed (post-deploy check)."""
    code = (
        "import socket, pathlib\n"
        "pathlib.Path('smoke.txt').write_text('ok')\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('network: OPEN')\n"
        "except OSError:\n    print('network: blocked')\n"
    )
    worker = modal.Cls.from_name(SETTINGS.modal_app, STEP_WORKER_CLASS)()
    result = worker.run_step.remote({"kind": "python", "session_id": "smoke-test", "code": code})
    print(result)
    print(worker.protections.remote())
    if not result.get("ok") or "network: blocked" not in result.get("output", ""):
        raise SystemExit("smoke check FAILED: the step did not run, or it reached the network")
    print("smoke check passed: the step ran, wrote smoke.txt, and had no network")
