"""Settings reach every Modal container as they were where `modal deploy` ran: a container imports
deploy/modal_app.py again with only the image's environment and its secrets, so a setting the deployer
had and the image did not carry came out differently there. The secrets' names decided how many
objects a function depends on (a container that found another number refused to start), and the step
worker — which holds no secrets — ran every step with the default limits and isolation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from core.sandbox_modal import StepLimits, VolumeWorkspaces

REPO = Path(__file__).resolve().parents[2]

IMAGE_ENV = """
import json, sys
from modal._utils.async_utils import synchronizer
import deploy.modal_app as app
heavy = [m for m in ("anthropic", "slack_bolt", "botbuilder.core", "bot.server") if m in sys.modules]

def env_layers(image):
    load = synchronizer._translate_in(image)._load if not hasattr(image, "_load") else image._load
    cells = dict(zip(load.__code__.co_freevars, load.__closure__ or ()))
    for name, cell in cells.items():
        value = cell.cell_contents
        if name == "dockerfile_function" and value is not None and "vars" in value.__code__.co_freevars:
            found = dict(zip(value.__code__.co_freevars, value.__closure__))["vars"].cell_contents
            yield dict(found)
        elif type(value).__name__ == "_Image":
            yield from env_layers(value)
        elif name == "base_images":
            for base in value.values():
                yield from env_layers(base)

env = {}
for layer in env_layers(app.image):
    env.update(layer)
print(json.dumps({"env": env, "secrets": app.web.info().secrets, "heavy": heavy}))
"""


def deployed(env: dict[str, str]) -> dict:
    """Import the app as `modal deploy` would with `env`; the image's environment and web's secrets."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATATHREAD_")}
    out = subprocess.run(
        [sys.executable, "-c", IMAGE_ENV],
        env={**clean, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_containers_see_the_secret_names_and_step_limits_the_deployer_had():
    deployer = {
        "DATATHREAD_MODAL_SECRETS": "team-anthropic,team-redis",
        "DATATHREAD_STEP_TIMEOUT": "45",
        "DATATHREAD_WORKSPACE_MB": "512",
        "DATATHREAD_ISOLATION": "strict",
    }
    deploy = deployed(deployer)
    assert deploy["secrets"] == [f"modal.Secret.from_name({n!r})" for n in ("team-anthropic", "team-redis")]
    image = deploy["env"]
    assert {k: image.get(k) for k in deployer} == {**deployer, "DATATHREAD_STEP_TIMEOUT": "45.0"}
    container = deployed(image)  # a container: the image's environment, nothing of the deployer's
    assert container["secrets"] == deploy["secrets"]
    # every container imports the app module: a step worker's cold start paid ~2 s for the bot's surfaces
    assert container["heavy"] == []


async def test_the_step_worker_holds_a_step_to_its_own_limits(tmp_path):
    """A turn container whose secrets raised the step limit asked for more than the function allows:
    Modal then killed the step mid-write. The worker holds a step to the limits it was deployed with."""
    workspaces = VolumeWorkspaces(
        root=tmp_path / "volume",
        reload=lambda: None,
        commit=lambda: None,
        limits=StepLimits(timeout_s=1.5, memory_mb=4096, file_mb=1024),
    )
    await workspaces.start()
    try:
        request = {"kind": "python", "session_id": "sl-limits", "code": "print('began', flush=True)"}
        assert (await workspaces.run_step(request))["ok"]  # the fork server is warm: time the next
        started = time.monotonic()
        slow = {**request, "code": "import time\ntime.sleep(30)", "timeout_s": 600.0}
        result = await workspaces.run_step(slow)
        assert not result["ok"] and "stopped after 1.5 s" in result["error"]
        assert time.monotonic() - started < 15
    finally:
        await workspaces.close()
