"""The Modal deployment without a Modal account: the app's declarations, the worker side of the
sandbox against a temporary directory standing in for the Volume (real fork server, real DuckDB,
real files), the client side through a stand-in for `.remote.aio` that pickles like Modal does, and
the ack → spawn → turn hand-off between the web and turn containers."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from modal._utils.async_utils import synchronizer

from core.config import ConfigError
from core.runner import TurnJob
from core.runner_modal import ModalRunner
from core.sandbox import StepRequest
from core.sandbox_local import LocalSandbox
from core.sandbox_modal import ModalSandbox, VolumeWorkspaces
from tests.fakes.anthropic_api import text, tool

SECRETS = [
    "datathread-anthropic",
    "datathread-slack",
    "datathread-teams",
    "datathread-gcp",
    "datathread-redis",
]


@pytest.fixture(scope="module")
def modal_app():
    os.environ.pop("DATATHREAD_MODAL_SECRETS", None)
    import deploy.modal_app as module

    return module


def service_info(cls):
    return cls._get_class_service_function().info()


def autoscaler(function) -> dict[str, int]:
    """The container bounds a function was declared with. The SDK keeps them only in the settings it
    sends when deploying (a closure of the function's loader); `info()` does not show them."""
    load = synchronizer._translate_in(function)._load
    settings = dict(zip(load.__code__.co_freevars, load.__closure__, strict=True))[
        "autoscaler_settings"
    ].cell_contents
    return {"min": settings.min_containers, "max": settings.max_containers}


def test_app_declares_web_endpoint_turn_function_and_step_worker(modal_app):
    state = modal_app.app._local_state
    assert set(state.classes) == {"StepWorker", "TurnWorker"}
    assert "web" in state.functions and state.web_endpoints == ["web"]

    web = modal_app.web.info()
    assert web.web_info is not None and web.web_info.unauthenticated  # Slack/Teams sign their requests
    assert web.secrets == [f"modal.Secret.from_name({n!r})" for n in SECRETS]
    assert web.concurrency_info.max_inputs == 100 and web.timeout == 60

    turn = service_info(modal_app.TurnWorker)
    assert turn.method_names == ["run"] and turn.volumes == {}
    assert turn.secrets == web.secrets and turn.timeout == modal_app.SETTINGS.modal_turn_timeout

    step = service_info(modal_app.StepWorker)
    assert set(step.method_names) == {"run_step", "read_file", "write_file", "list_files", "protections"}
    assert list(step.volumes) == ["/workspace"]
    assert step.volumes["/workspace"].name == "datathread-workspaces"
    assert step.secrets == []  # no bot secret ever reaches the container running model code
    assert step.block_network and step.restrict_modal_access
    assert step.timeout == int(modal_app.SETTINGS.step_timeout) + 60
    assert step.cpu == (1.0, 2.0) and step.memory_mib == (1024, modal_app.SETTINGS.step_memory_mb + 1024)
    assert modal_app.volume.name == "datathread-workspaces"
    # Every function that scales with load has a ceiling: containers are the Modal bill.
    settings = modal_app.SETTINGS
    assert autoscaler(modal_app.web) == {"min": settings.modal_min_containers, "max": 10}
    assert autoscaler(modal_app.TurnWorker._get_class_service_function()) == autoscaler(modal_app.web)
    step_bounds = autoscaler(modal_app.StepWorker._get_class_service_function())
    assert step_bounds == {"min": settings.modal_step_min_containers, "max": 20}
    image = synchronizer._translate_in(modal_app.image)  # the SDK's inner object holds the build plan
    assert {"core", "bot", "deploy"} <= image._added_python_source_set


class RecordingVolume:
    """Stands in for `modal.Volume`: records reload/commit and which files existed at each call."""

    def __init__(self, root: Path):
        self.root = root
        self.calls: list[tuple[str, set[str]]] = []

    def _files(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()}

    async def reload(self) -> None:
        self.calls.append(("reload", self._files()))

    async def commit(self) -> None:
        self.calls.append(("commit", self._files()))


def stand_in_worker(workspaces: VolumeWorkspaces) -> SimpleNamespace:
    """Stands in for `modal.Cls.from_name(...)()`: `.method.remote.aio(...)`, arguments and results pickled."""

    def method(fn):
        async def aio(*args):
            result = await fn(*pickle.loads(pickle.dumps(args)))
            return pickle.loads(pickle.dumps(result))

        return SimpleNamespace(remote=SimpleNamespace(aio=aio))

    names = ("run_step", "read_file", "write_file", "list_files")
    return SimpleNamespace(**{n: method(getattr(workspaces, n)) for n in names})


@pytest.fixture
async def volume_worker(tmp_path, home):
    volume = RecordingVolume(tmp_path / "volume")
    workspaces = VolumeWorkspaces(
        root=volume.root,
        reload=volume.reload,
        commit=volume.commit,
        warehouse=home / "warehouse" / "nycflights13.duckdb",
        network_blocked=True,
    )
    await workspaces.start()
    yield volume, workspaces
    await workspaces.close()


CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('top.parquet')
df.plot.bar(x='carrier', y='n'); plt.savefig('top.png')
df.to_csv('top.csv', index=False)
print(df.iloc[0]['carrier'], len(df))
"""
TOP = "SELECT carrier, count(*) AS n FROM flights GROUP BY carrier ORDER BY n DESC LIMIT 5"


def steps(session_id: str) -> list[StepRequest]:
    return [
        StepRequest(kind="warehouse", session_id=session_id, code=TOP, save_as="top"),
        StepRequest(kind="python", session_id=session_id, code=CHART),
        StepRequest(
            kind="sql",
            session_id=session_id,
            code="SELECT sum(n) AS total FROM 'top.parquet'",
            save_as="total",
        ),
    ]


def comparable(result) -> dict:
    data = result.to_dict()
    data.pop("duration_s")
    data["files"] = [{k: v for k, v in f.items() if k != "size" or f["kind"] != "png"} for f in data["files"]]
    return data


async def test_remote_steps_reload_run_commit_and_match_the_local_sandbox(volume_worker, tmp_path, home):
    volume, workspaces = volume_worker
    client = ModalSandbox(app_name="datathread", worker=stand_in_worker(workspaces))
    local = LocalSandbox(workspaces=tmp_path / "local", warehouse=home / "warehouse" / "nycflights13.duckdb")
    await local.start()
    try:
        for request in steps("s-modal"):
            remote = await client.run(request)
            same = await local.run(StepRequest(**{**request.to_dict(), "session_id": "s-modal"}))
            assert remote.ok, remote.error
            assert comparable(remote) == comparable(same)
    finally:
        await local.close()

    assert [name for name, _ in volume.calls] == ["reload", "commit"] * 3
    reload_before_chart, commit_after_chart = volume.calls[2][1], volume.calls[3][1]
    assert "s-modal/top.png" not in reload_before_chart and "s-modal/top.png" in commit_after_chart
    python = await client.list_files("s-modal")
    assert {f["path"] for f in python} == {"top.parquet", "top.png", "top.csv", "total.parquet"}
    png = await client.read_file("s-modal", "top.png")
    assert png[:4] == b"\x89PNG"
    assert (await client.read_file("s-modal", "top.csv")).startswith(b"carrier,n\nUA,58665")
    await client.write_file("s-modal", "from_s3.csv", b"a,b\n1,2\n")
    assert [name for name, _ in volume.calls[-2:]] == ["reload", "commit"]
    assert (volume.root / "s-modal" / "from_s3.csv").read_bytes() == b"a,b\n1,2\n"


PEEK = """
import os
for target in ['../s-alice/secret.txt', '/workspace/s-alice/secret.txt']:
    try:
        print('READ', open(target).read())
    except OSError as exc:
        print('DENIED', type(exc).__name__)
print('SEES', sorted(os.listdir('..')))
"""


async def test_sessions_stay_apart_in_the_volume(volume_worker):
    volume, workspaces = volume_worker
    client = ModalSandbox(app_name="datathread", worker=stand_in_worker(workspaces))
    wrote = await client.run(
        StepRequest(kind="python", session_id="s-alice", code="open('secret.txt','w').write('alice-42')")
    )
    assert wrote.ok and wrote.files[0]["path"] == "secret.txt"

    peek = await client.run(StepRequest(kind="python", session_id="s-bob", code=PEEK))
    assert peek.ok, peek.error
    assert "alice-42" not in peek.output and "READ" not in peek.output
    assert "s-alice" not in peek.output.split("SEES", 1)[1]
    sql = await client.run(
        StepRequest(kind="sql", session_id="s-bob", code="SELECT * FROM '../s-alice/x.csv'")
    )
    assert not sql.ok

    with pytest.raises(PermissionError):
        await client.read_file("s-bob", "../s-alice/secret.txt")
    for bad in ("../s-alice", "s-alice/..", "/etc", ""):
        refused = await client.run(StepRequest(kind="python", session_id=bad, code="print(1)"))
        assert not refused.ok and "invalid session id" in refused.error
        with pytest.raises(PermissionError):
            await client.read_file(bad, "secret.txt")
    # the worker side refuses on its own too (a client that skipped the check)
    direct = await workspaces.run_step({"kind": "python", "session_id": "../s-alice", "code": "print(1)"})
    assert not direct["ok"] and "invalid session id" in direct["error"]


async def test_modal_runner_spawns_plain_job_data_and_refuses_unknown_kinds():
    spawned: list[dict] = []

    async def spawn(job: dict) -> None:
        spawned.append(pickle.loads(pickle.dumps(job)))

    runner = ModalRunner(spawn)
    runner.register("slack.turn", lambda job: None)  # type: ignore[arg-type,return-value]
    await runner.submit(TurnJob("slack.turn", {"channel": "C1", "text": "hi"}))
    job_id = spawned[0].pop("id")  # each spawn's own: a job Modal gives again is not run twice
    assert spawned == [{"kind": "slack.turn", "payload": {"channel": "C1", "text": "hi"}, "quick": False}]
    assert len(job_id) == 32 and int(job_id, 16) >= 0
    with pytest.raises(KeyError):
        await runner.submit(TurnJob("slack.typo"))
    await runner.drain(timeout=1)  # a no-op: spawned calls belong to Modal


def test_web_and_turn_containers_refuse_to_start_without_redis(settings):
    from deploy.turn_host import TurnHost, build_web_app

    with pytest.raises(ConfigError, match="REDIS_URL"):
        build_web_app(settings, spawn=lambda job: asyncio.sleep(0))
    with pytest.raises(ConfigError, match="REDIS_URL"):
        asyncio.run(TurnHost(settings).start())
    teams = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0", "microsoft_app_id": "app-1"})
    with pytest.raises(
        ConfigError, match="DATATHREAD_LINK_SECRET"
    ):  # links signed in one container, checked in another
        build_web_app(teams, spawn=lambda job: asyncio.sleep(0))


async def modal_analyst(settings, workspaces: VolumeWorkspaces):
    """An Analyst whose sandbox is the Modal client, talking to the worker side through the stand-in."""
    from core.analyst import Analyst, Parts
    from core.model import build_model
    from core.sessions import open_store
    from core.warehouse import DuckDBWarehouse

    sandbox = ModalSandbox(app_name="datathread", worker=stand_in_worker(workspaces))
    warehouse = DuckDBWarehouse(settings.home / "warehouse" / "nycflights13.duckdb", sandbox)
    store = await open_store(settings)
    return Analyst(Parts(settings, store, sandbox, warehouse, build_model(settings)))


async def test_signed_slack_mention_is_acked_by_spawning_then_answered_by_the_turn_container(
    settings, volume_worker, fake_model
):
    """Web container: signed request → 200 + one spawn. Turn container: the spawned dict → answer + chart."""
    import httpx
    from pydantic import SecretStr

    from bot.server import create_app
    from deploy.turn_host import TurnHost
    from tests.bot.slack_harness import SECRET, event_body, mention, sign
    from tests.fakes.slack_api import FakeSlackAPI

    api = FakeSlackAPI().start()
    volume, workspaces = volume_worker
    slack = settings.model_copy(
        update={
            "slack_bot_token": SecretStr("xoxb-test-token-000000"),
            "slack_signing_secret": SecretStr(SECRET),
            "slack_api_url": api.url,
        }
    )
    spawned: list[dict] = []

    async def spawn(job: dict) -> None:  # stands in for TurnWorker().run.spawn.aio
        spawned.append(pickle.loads(pickle.dumps(job)))

    web = create_app(slack, runner=ModalRunner(spawn), analyst=await modal_analyst(slack, workspaces))
    body = json.dumps(event_body(mention("top carriers? chart it", ts="1700000000.000100")))
    headers = {"content-type": "application/json", **sign(body)}
    try:
        async with web.router.lifespan_context(web):
            transport = httpx.ASGITransport(app=web)
            async with httpx.AsyncClient(transport=transport, base_url="http://web") as http:
                started = time.perf_counter()
                response = await http.post("/slack/events", content=body, headers=headers)
                ack_s = time.perf_counter() - started
                forged = await http.post("/slack/events", content=body, headers={**headers, **sign("x")})
        assert response.status_code == 200 and ack_s < 3.0  # Slack's ack budget
        assert forged.status_code == 401
        assert [job["kind"] for job in spawned] == ["slack.message"]
        assert spawned[0]["payload"]["text"] == "top carriers? chart it"
        assert not api.of("chat.postMessage") and not api.of("chat.startStream")  # nothing ran in web

        fake_model.enqueue(
            tool("query_warehouse", {"sql": TOP, "save_as": "top"}),
            tool("run_python", {"code": CHART}),
            tool("attach_file", {"path": "top.png", "title": "Top carriers"}),
            text("**UA** flew the most flights from NYC in 2013."),
        )
        host = TurnHost(slack, analyst=await modal_analyst(slack, workspaces), require_redis=False)
        await host.start()
        try:
            await host.run(spawned[0])
        finally:
            await host.stop()
    finally:
        api.stop()

    uploads = list(api.uploads.values())
    assert len(uploads) == 1 and uploads[0][:4] == b"\x89PNG"
    said = "\n".join(api.shown())  # the answer arrives in pieces while it is written
    assert "**UA** flew the most" in said
    session_dirs = {p.name for p in volume.root.iterdir()}
    assert len(session_dirs) == 1 and (volume.root / session_dirs.pop() / "top.png").exists()
    assert [name for name, _ in volume.calls][:4] == ["reload", "commit", "reload", "commit"]
