"""The disk quota holds while a step runs, not only after it: a 20 MB quota, a step writing 200 MB, four
ways (many files, one growing file, nested directories, empty files), through the tool and raw. On
`root` and `userns` it is a hard limit (the step writes into a limited layer; only what fits lands):
not one byte or entry past it. On `landlock` and `none` it is a watchdog: at most a couple of ticks'
worth of writes past it."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.sandbox import StepRequest
from core.tools import call_tool
from tests.core.hostile.corpus import ATTACKER, Env, check_nothing_changed_outside_the_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUOTA_MB, QUOTA_FILES = 20, 2_000
DISK_FLOODS = {  # each file's name carries the time it was made: the step's own write speed
    "many-1mb-files": "import os, time\nos.makedirs('flood', exist_ok=True)\nfor i in range(200):\n"
    "    with open(f'flood/f{i}_{time.monotonic_ns()}', 'wb') as f:\n        f.write(os.urandom(2 ** 20))",
    "one-growing-file": "import os\nos.makedirs('flood', exist_ok=True)\nwith open('flood/big', 'wb') as f:\n"
    "    for i in range(200):\n        f.write(os.urandom(2 ** 20))\n        f.flush()",
    "nested-dirs": "import os, time\nfor i in range(200):\n    os.makedirs(f'flood/{i}/a/b', exist_ok=True)\n"
    "    with open(f'flood/{i}/a/b/x_{time.monotonic_ns()}', 'wb') as f:\n        f.write(os.urandom(2 ** 20))",
    "empty-files": "import os, time\nos.makedirs('flood', exist_ok=True)\nfor i in range(100_000):\n"
    "    open(f'flood/e{i}_{time.monotonic_ns()}', 'w').close()",
}


def _step_speed(root: Path) -> tuple[float, float]:
    """Bytes and files per second the step wrote, from the times in its files' names (0 if unknown)."""
    made = [(int(p.name.rsplit("_", 1)[1]), p.lstat().st_size) for p in root.rglob("*_*") if p.is_file()]
    if len(made) < 3:
        return 0.0, 0.0
    span = (max(t for t, _ in made) - min(t for t, _ in made)) / 1e9 or 1e-3
    return sum(size for _, size in made) / span, len(made) / span


def _file_bytes(root: Path) -> int:
    """Bytes in regular files (what the quota counts; directories' own sizes are not data)."""
    return sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _quota_usage(root: Path) -> tuple[int, int]:
    """What the quota counts, from the host: bytes of everything but directories, and entries."""
    paths = list(root.rglob("*"))
    return sum(p.lstat().st_size for p in paths if p.is_symlink() or not p.is_dir()), len(paths)


def _tree(root: Path) -> tuple[int, int]:
    sizes = [p.lstat().st_size for p in root.rglob("*")] if root.exists() else []
    return sum(sizes), len(sizes)


def _write_rate(folder: Path) -> tuple[float, float]:
    """How many bytes and empty files this host writes in one watchdog tick (0.1 s), from Python."""
    folder.mkdir(exist_ok=True)
    started = time.perf_counter()
    for i in range(20):
        (folder / f"r{i}").write_bytes(os.urandom(2**20))
    per_byte = (time.perf_counter() - started) / (20 * 2**20)
    started = time.perf_counter()
    for i in range(2000):
        (folder / f"e{i}").touch()
    per_file = (time.perf_counter() - started) / 2000
    shutil.rmtree(folder)
    return 0.1 / per_byte, 0.1 / per_file


@pytest.mark.parametrize("path", ["tool", "raw"])
@pytest.mark.parametrize("flood", DISK_FLOODS, ids=list(DISK_FLOODS))
async def test_the_workspace_quota_holds_while_a_step_runs(env: Env, flood: str, path: str):
    sandbox = env.ctx.sandbox
    shutil.rmtree(env.ws / "flood", ignore_errors=True)
    before_bytes, before_files = _tree(env.ws)
    tick_bytes, tick_files = _write_rate(env.ws.parent / f"rate-{uuid.uuid4().hex[:6]}")
    saved = sandbox.workspace_bytes, sandbox.workspace_files
    sandbox.workspace_bytes = before_bytes + QUOTA_MB * 2**20
    sandbox.workspace_files = before_files + QUOTA_FILES
    quota_bytes, quota_files = sandbox.workspace_bytes, sandbox.workspace_files
    try:
        code = DISK_FLOODS[flood]
        if path == "tool":
            outcome = await call_tool("run_python", {"code": code}, replace(env.ctx, step_timeout_s=20))
            text, failed = outcome.content, outcome.is_error
        else:
            step = StepRequest(kind="python", session_id=ATTACKER, code=code, timeout_s=20, memory_mb=1024)
            result = await sandbox.run(step)
            text, failed = result.error, not result.ok
        used_bytes, used_files = _tree(env.ws)
        landed_bytes, landed_files = _quota_usage(env.ws)
        used_data = _file_bytes(env.ws)
        speed_bytes, speed_files = _step_speed(env.ws / "flood")
    finally:
        sandbox.workspace_bytes, sandbox.workspace_files = saved
        shutil.rmtree(env.ws / "flood", ignore_errors=True)
    log = sandbox._folder.path / "zygote.log"
    assert failed and "filled the thread's workspace past its limit" in text, (text, log.read_text()[-2000:])
    if env.backend in ("root", "userns"):  # a hard limit: exactly the quota, whatever the step did
        assert landed_bytes <= quota_bytes and landed_files <= quota_files, (landed_bytes, landed_files)
        assert "delete files you no longer need" in text.lower(), text
        return
    # a watchdog: at most the quota plus what the step writes in a couple of ticks (a tick, and one measurement):
    # its own speed where its names tell it, else this host's; at least a quarter of the quota
    tick_bytes, tick_files = max(tick_bytes, 0.1 * speed_bytes), max(tick_files, 0.1 * speed_files)
    extra_bytes = max(2.5 * tick_bytes, QUOTA_MB * 2**18)
    extra_files = max(2.5 * tick_files, QUOTA_FILES / 4)
    assert used_bytes - before_bytes <= QUOTA_MB * 2**20 + extra_bytes, (used_bytes, tick_bytes)
    assert used_files - before_files <= QUOTA_FILES + extra_files, (used_files, tick_files)
    assert used_bytes - before_bytes < 200 * 2**20
    if flood == "one-growing-file":  # the kernel stops one file at what is left of the quota: no overshoot
        assert used_data <= before_bytes + QUOTA_MB * 2**20, used_data  # exactly the configured limit


async def test_zz_nothing_changed_outside_the_workspace(env: Env):
    """Runs last (file order): this module's cases left the home, canary, victim and warehouse intact."""
    check_nothing_changed_outside_the_workspace(env)
