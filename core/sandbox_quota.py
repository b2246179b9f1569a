"""A session workspace's disk quota where the bot itself enforces it: before it writes a result into
the workspace (`room_for`), and after each step where the quota is only a watchdog (`after_step`).

Kept apart from core/sandbox_local.py, which runs the steps: on the `root` and `userns` back ends the
kernel holds the quota (core/workspace_overlay.py); elsewhere these checks, and the words that tell
the model what to delete, are the quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from pathlib import Path

from core import isolation_supervisor
from core.sandbox import StepResult, WorkspaceFull


async def after_step(
    result: StepResult, workspace: Path, quota_bytes: int, protections: dict[str, str]
) -> StepResult:
    """The per-session disk quota, checked again after every step where it is a watchdog
    (`landlock`, `none`): its supervisor kills a step once the workspace grows past the quota, and
    a step quicker than one of its checks (0.1 s) is caught here — reported as failed with a
    message the model can act on (the files stay until it deletes some). On `root` and `userns`
    the step's writes land only as far as they fit (`core/workspace_overlay.py`): no walk needed."""
    if protections.get("workspace quota", "").startswith("on — hard"):
        return result  # not where the fork server found the kernel lacking: then it is a watchdog
    with contextlib.suppress(ValueError, OSError):  # measuring takes a descriptor per level
        resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    usage = await asyncio.to_thread(isolation_supervisor.measure, workspace)
    used = usage.bytes
    if usage.unwalkable:  # never counted as empty: a folder the bot cannot read is over the quota
        result.ok = False
        result.error = ((result.error + "\n") if result.error else "") + (
            "The thread's workspace holds a folder that cannot be read or is nested too deeply to "
            "measure, so it counts as over its limit. Delete it (shutil.rmtree in run_python)."
        )
    elif used > quota_bytes:
        result.ok = False
        result.error = ((result.error + "\n") if result.error else "") + (
            f"The thread's workspace now holds {used / 2**20:,.0f} MB, over its "
            f"{quota_bytes / 2**20:,.0f} MB limit. Delete files you no longer need "
            "(os.remove in run_python) and keep intermediate results small."
        )
    return result


async def room_for(workspace: Path, full: Path, size: int, quota_bytes: int) -> None:
    """Raise WorkspaceFull unless `size` more bytes (less the file they replace) fit the quota."""
    usage = await asyncio.to_thread(isolation_supervisor.measure, workspace)
    grows = size
    with contextlib.suppress(OSError):
        grows -= full.lstat().st_size  # a result saved again under its name replaces the old one
    if usage.unwalkable or usage.bytes + grows > quota_bytes:
        raise WorkspaceFull(
            f"The result ({size / 2**20:,.1f} MB) would take the thread's workspace past its "
            f"{quota_bytes / 2**20:,.0f} MB limit ({usage.bytes / 2**20:,.1f} MB used): delete "
            "files you no longer need (os.remove in run_python), or fetch less."
        )
