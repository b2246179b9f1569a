"""The Modal sandbox: the client a turn container uses, and the worker side that runs remotely.

Client (`ModalSandbox`): looks the deployed `StepWorker` class up by name and calls its methods with
`.remote.aio(...)`. Everything that crosses is plain data: `StepRequest.to_dict()` in, a `StepResult`
dict (with the new files' metadata) out, bytes for file reads and writes.

Worker (`VolumeWorkspaces`): inside the Modal container, the very same `LocalSandbox` as on a laptop —
a fork server that imported the data stack once and one isolated child per step running
`core.steps.run_step` — rooted at the Volume's mount point (`/workspace`), so each step's working
directory is `/workspace/<session_id>` and it sees no other session's directory. The Volume is reloaded
before and committed after every step, so turn containers and other workers see the same files.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.sandbox import StepRequest, StepResult, is_valid_session_id
from core.sandbox_local import LocalSandbox

log = logging.getLogger(__name__)

# A Volume (v1) holds at most 500,000 files and directories for every thread together, and its reload
# and commit slow down with each: one thread may hold a tenth of the local quota.
VOLUME_WORKSPACE_FILES = 10_000
STEP_WORKER_CLASS = "StepWorker"  # the class name in deploy/modal_app.py; looked up by name

VolumeHook = Callable[[], Any]  # volume.reload / volume.commit (sync, or `.aio` coroutine functions)


async def call_hook(hook: VolumeHook) -> None:
    """Run a Volume hook, awaiting it when it is a coroutine function (`volume.commit.aio`)."""
    result = hook()
    if inspect.isawaitable(result):
        await result


def to_step_request(data: dict) -> StepRequest:
    """A request dict from the wire, with unknown keys dropped (older/newer clients)."""
    return StepRequest(**{k: v for k, v in data.items() if k in StepRequest.__dataclass_fields__})


def image_env(settings) -> dict[str, str]:
    """Settings every container must read as the deployer had them, for the image's environment: the
    secrets' names (a container that found other secrets than the deploy declared failed to start) and
    the step worker's limits (it holds no secrets, so the image is the only way they reach it)."""
    env = {
        "DATATHREAD_MODAL_SECRETS": settings.modal_secrets,
        "DATATHREAD_MODAL_STORE_SECRET": settings.modal_store_secret,
        "DATATHREAD_STEP_TIMEOUT": str(settings.step_timeout),
        "DATATHREAD_STEP_MEMORY_MB": str(settings.step_memory_mb),
        "DATATHREAD_STEP_FILE_MB": str(settings.step_file_mb),
        "DATATHREAD_WORKSPACE_MB": str(settings.workspace_mb),
    }
    return env | ({"DATATHREAD_ISOLATION": settings.isolation} if settings.isolation else {})


@dataclass(frozen=True)
class StepLimits:
    """The most one step may ask of a worker container: the deployer's settings, baked into its image."""

    timeout_s: float
    memory_mb: int
    file_mb: int


def within(step: StepRequest, limits: StepLimits | None) -> StepRequest:
    """The step with its time, memory and file size no higher than the worker's own: a turn container
    whose secrets raised DATATHREAD_STEP_TIMEOUT past the function's timeout had its step killed by
    Modal mid-write, and a higher memory limit than the container's was an out-of-memory kill."""
    if limits is None:
        return step
    return replace(
        step,
        timeout_s=min(step.timeout_s, limits.timeout_s),
        memory_mb=min(step.memory_mb, limits.memory_mb),
        file_mb=min(step.file_mb, limits.file_mb),
    )


async def run_step_in_volume(
    request: dict,
    *,
    sandbox: LocalSandbox,
    reload: VolumeHook,
    commit: VolumeHook,
    limits: StepLimits | None = None,
) -> dict:
    """Reload → run the step in `<volume root>/<session_id>` → commit. The same step code as locally.

    Commit runs even when the step failed: a failed step may still have written files the model
    will look at next, and the next step may run in another container.
    """
    step = within(to_step_request(request), limits)
    if not is_valid_session_id(step.session_id):
        return StepResult(ok=False, error="Refused: invalid session id.").to_dict()
    await call_hook(reload)
    try:
        result = await sandbox.run(step)
    finally:
        await call_hook(commit)
    return result.to_dict()


class VolumeWorkspaces:
    """The worker side: one per Modal container, built in `@modal.enter`, serving one input at a time."""

    def __init__(
        self,
        *,
        root: Path,
        reload: VolumeHook,
        commit: VolumeHook,
        warehouse: Path | None = None,
        network_blocked: bool = False,
        limits: StepLimits | None = None,
        workspace_mb: int = 2048,
        isolation_policy: str = "best",
    ):
        self.sandbox = LocalSandbox(
            workspaces=root,
            warehouse=warehouse,
            workspace_mb=workspace_mb,
            workspace_files=VOLUME_WORKSPACE_FILES,
            isolation_policy=isolation_policy,
        )
        self._reload, self._commit = reload, commit
        self.network_blocked = network_blocked
        self.limits = limits

    @classmethod
    def from_settings(
        cls, settings, *, root: Path, reload: VolumeHook, commit: VolumeHook, network_blocked: bool
    ) -> VolumeWorkspaces:
        """The worker for a container: with the DuckDB demo warehouse built locally when it is selected."""
        warehouse = None
        if settings.warehouse == "duckdb":
            from core.warehouse import build_demo_database

            warehouse = build_demo_database(settings.demo_warehouse)
        return cls(
            root=root,
            reload=reload,
            commit=commit,
            warehouse=warehouse,
            network_blocked=network_blocked,
            limits=StepLimits(settings.step_timeout, settings.step_memory_mb, settings.step_file_mb),
            workspace_mb=settings.workspace_mb,
            isolation_policy=settings.isolation or "best",
        )

    async def start(self) -> None:
        """Start the fork server (imports pandas, matplotlib, duckdb, pyarrow once per container)."""
        await self.sandbox.start()

    async def run_step(self, request: dict) -> dict:
        """One step, between a Volume reload and commit."""
        return await run_step_in_volume(
            request, sandbox=self.sandbox, reload=self._reload, commit=self._commit, limits=self.limits
        )

    async def read_file(self, session_id: str, path: str) -> bytes:
        """Bytes of a workspace file as last committed (an attachment to upload)."""
        await call_hook(self._reload)
        return await self.sandbox.read_file(session_id, path)

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        """Place a file the bot fetched (BigQuery result, S3 object) into the session's directory."""
        await call_hook(self._reload)
        await self.sandbox.write_file(session_id, path, data)
        await call_hook(self._commit)

    async def list_files(self, session_id: str) -> list[dict]:
        """The session's files, as committed."""
        await call_hook(self._reload)
        return await self.sandbox.list_files(session_id)

    def protections(self) -> dict[str, str]:
        """The local sandbox's per-step protections plus the container's network state."""
        network = (
            "on — the worker container has no network (Modal block_network)"
            if self.network_blocked
            else "off — the worker container has network access"
        )
        return {**self.sandbox.protections(), "container network": network}

    async def close(self) -> None:
        await self.sandbox.close()


class ModalUnreachable(ConnectionError):
    """Modal could not be reached (no network, a firewall, an outage) or the step worker is not
    deployed there. The message is one sentence for the model and people."""


# Modal's client retries a connection it cannot make for ~60 s per call (seen with no network and
# with a refused port alike), so a turn of three steps was silent for three minutes. The lookup that
# binds the worker is a small metadata call (well under a second when Modal is there): it gets
# REACH_S, and a failure to reach Modal is remembered for DOWN_S, so the turn's later steps and file
# reads fail at once with the same sentence instead of waiting out another minute each.
REACH_S = 20.0
DOWN_S = 60.0


class ModalSandbox:
    """Sandbox protocol on Modal: every call goes to the deployed `StepWorker` of `app_name`."""

    def __init__(
        self, *, app_name: str, worker: Any | None = None, reach_s: float = REACH_S, down_s: float = DOWN_S
    ):
        self.app_name = app_name
        self._worker = worker  # a `StepWorker()` instance handle; injected in tests
        self.reach_s, self.down_s = reach_s, down_s
        self._down: tuple[float, str] | None = None  # (monotonic time, reason) of the last failed reach

    @classmethod
    def from_settings(cls, settings) -> ModalSandbox:
        """The client for the deployment the settings name (DATATHREAD_MODAL_APP)."""
        return cls(app_name=settings.modal_app)

    async def start(self) -> None:
        """Nothing to warm: the worker is bound on the first call, and no container starts until the
        first step."""

    async def _bound(self) -> Any:
        """The worker handle, bound on first use by a metadata lookup within `reach_s`; raises
        ModalUnreachable at once while Modal failed to answer less than `down_s` ago. After that, it is
        looked up again (within `reach_s`) before a call to it waits out Modal's own minute."""
        if self._down is not None:
            if time.monotonic() - self._down[0] < self.down_s:
                raise ModalUnreachable(self._down[1])
            self._worker = None
        if self._worker is None:
            import modal

            cls = modal.Cls.from_name(self.app_name, STEP_WORKER_CLASS)
            try:
                await asyncio.wait_for(cls.hydrate.aio(), timeout=self.reach_s)
            except Exception as exc:
                raise self._unreachable(exc) from None
            self._down, self._worker = None, cls()
        return self._worker

    def _unreachable(self, exc: BaseException) -> ModalUnreachable:
        """Remember that Modal failed to answer, and say why in one sentence."""
        import modal.exception

        if isinstance(exc, modal.exception.NotFoundError):
            why = f"Modal has no deployed {self.app_name!r} app with a {STEP_WORKER_CLASS} (deploy it)"
        elif isinstance(exc, modal.exception.AuthError):
            why = "Modal refused the bot's token"
        elif isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
            why = f"Modal did not answer within {self.reach_s:g} s"
        else:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            why = f"Modal could not be reached ({first.rstrip('.')})"
        sentence = (
            f"The sandbox is unavailable: {why}. No step can run until it is back; "
            "this is not a problem with the question."
        )
        self._down = (time.monotonic(), sentence)
        log.warning("modal step worker unavailable: %s", why)
        return ModalUnreachable(sentence)

    async def run(self, request: StepRequest) -> StepResult:
        """Run a step remotely; a Modal failure becomes an error result the model can report."""
        if not is_valid_session_id(request.session_id):
            return StepResult(ok=False, error=f"invalid session id {request.session_id!r}")
        try:
            worker = await self._bound()
            data = await worker.run_step.remote.aio(request.to_dict())
        except ModalUnreachable as exc:
            return StepResult(ok=False, error=str(exc))
        except Exception as exc:
            if _is_connection_error(exc):  # reached once, gone since: the next calls need not wait
                return StepResult(ok=False, error=str(self._unreachable(exc)))
            error_id = uuid.uuid4().hex[:8]
            log.exception("modal step failed [%s]", error_id)
            return StepResult(
                ok=False,
                error=f"The sandbox could not run this step ({type(exc).__name__}, error id {error_id}). "
                "Try again in a moment.",
            )
        return StepResult.untrusted(data, request)  # it came from a container running model code

    async def read_file(self, session_id: str, path: str) -> bytes:
        return await self._call("read_file", session_id, path)

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        await self._call("write_file", session_id, path, data)

    async def list_files(self, session_id: str) -> list[dict]:
        return await self._call("list_files", session_id)

    async def _call(self, method: str, session_id: str, *args: Any) -> Any:
        """A worker method for one session's files; raises ModalUnreachable when Modal is not there."""
        self._check(session_id)
        worker = await self._bound()
        try:
            return await getattr(worker, method).remote.aio(session_id, *args)
        except Exception as exc:
            if _is_connection_error(exc):
                raise self._unreachable(exc) from None
            raise

    def protections(self) -> dict[str, str]:
        """Static: asking the worker would start a container (`datathread doctor` checks the deployment)."""
        return {
            "modal worker": f"on — steps run in Modal app {self.app_name!r}, class {STEP_WORKER_CLASS}, "
            "no network, no bot secrets, the same per-step isolation as the local sandbox",
        }

    async def close(self) -> None:
        return None

    @staticmethod
    def _check(session_id: str) -> None:
        if not is_valid_session_id(session_id):
            raise PermissionError(f"invalid session id {session_id!r}")


def _is_connection_error(exc: BaseException) -> bool:
    """Modal's client gave up reaching its server (not a failure of the call itself)."""
    import modal.exception

    return isinstance(exc, modal.exception.ConnectionError)


async def check_deployment(settings, *, timeout_s: float = 15.0) -> tuple[bool, str]:
    """Is the step worker of DATATHREAD_MODAL_APP deployed? A metadata lookup: starts no container."""
    try:
        import modal

        worker = modal.Cls.from_name(settings.modal_app, STEP_WORKER_CLASS)
        await asyncio.wait_for(worker.hydrate.aio(), timeout=timeout_s)
    except Exception as exc:  # not deployed, no token, no network: say which, in one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (
            False,
            f"app {settings.modal_app!r} not reachable ({reason}); run `modal deploy deploy/modal_app.py`",
        )
    return True, f"app {settings.modal_app!r} deployed; volume {settings.modal_volume!r}"
