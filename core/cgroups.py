"""Per-session cgroups: one memory and process-count budget for *all* processes of a step.

rlimits cap each process on its own; a step that forks could multiply them. A cgroup caps the session
as a whole. The forked step child joins its session's group before dropping privileges (it is still
root then); the bot removes empty groups after the step. cgroup v1 (memory, pids controllers) and v2
(unified, with those controllers enabled for our subtree) are both detected; without either, the step
runs with rlimits only and `datathread doctor` says so.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
GROUP = "datathread"


@dataclass(frozen=True)
class CgroupLayout:
    """Where each controller's datathread group lives, and the file names of this cgroup version."""

    version: int
    memory: Path
    pids: Path

    def session_dirs(self, session_id: str) -> list[Path]:
        return sorted({self.memory / session_id, self.pids / session_id})


def _own_path(controller: str) -> str:
    """This process's cgroup path for a v1 controller ('' for v2's unified line)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path.lstrip("/")
    return ""


def parent_groups() -> list[Path]:
    """Where our parent groups are (or would be) for this process; nothing is created."""
    if (ROOT / "cgroup.controllers").exists():
        return [ROOT / _own_path("") / GROUP]
    return [ROOT / "memory" / _own_path("memory") / GROUP, ROOT / "pids" / _own_path("pids") / GROUP]


def detect() -> CgroupLayout | None:
    """The usable layout, creating our parent groups; None when this host gives us no cgroup we can
    really write (a group another user made, e.g. root on a shared machine, is never reused)."""
    try:
        if (ROOT / "cgroup.controllers").exists():  # v2, unified hierarchy
            parent = ROOT / _own_path("") / GROUP
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+memory +pids")
            layout = CgroupLayout(2, parent, parent)
        else:
            memory = ROOT / "memory" / _own_path("memory") / GROUP
            pids = ROOT / "pids" / _own_path("pids") / GROUP
            memory.mkdir(parents=True, exist_ok=True)
            pids.mkdir(parents=True, exist_ok=True)
            layout = CgroupLayout(1, memory, pids)
    except OSError:
        return None
    return layout if all(_writable(p) for p in {layout.memory, layout.pids}) else None


def _writable(group: Path) -> bool:
    """Can this process create session groups under `group` and move processes into them?"""
    return os.access(group, os.W_OK | os.X_OK) and os.access(group / "cgroup.procs", os.W_OK)


def join(layout: CgroupLayout, session_id: str, *, memory_mb: int, max_procs: int) -> None:
    """Move the calling process into its session's groups with the step's limits. Raises OSError."""
    limits = {
        1: {
            layout.memory / session_id: {"memory.limit_in_bytes": memory_mb * 2**20},
            layout.pids / session_id: {"pids.max": max_procs},
        },
        2: {
            layout.memory / session_id: {
                "memory.max": memory_mb * 2**20,
                "memory.swap.max": 0,
                "pids.max": max_procs,
            }
        },
    }[layout.version]
    for directory, files in limits.items():
        directory.mkdir(exist_ok=True)
        for name, value in files.items():
            with contextlib.suppress(FileNotFoundError):  # e.g. no swap accounting
                (directory / name).write_text(str(value))
        _move_self(directory, layout.version)


def _move_self(directory: Path, version: int) -> None:
    """Move the calling process into `directory`. cgroup v1, one thread (a step's runner: the fork
    server is thread-free): `0`, the calling thread, written to `tasks` moves the whole process and
    skips the kernel's global lock for moving a thread group, whose writer waits for an RCU grace
    period (5-15 ms per step on a 2-core host, measured). Otherwise the process, by `cgroup.procs`."""
    try:
        alone = version == 1 and len(os.listdir("/proc/self/task")) == 1
    except OSError:
        alone = False
    if alone:
        (directory / "tasks").write_text("0")
    else:
        (directory / "cgroup.procs").write_text(str(os.getpid()))


def remove(layout: CgroupLayout, session_id: str) -> None:
    """Remove a session's groups once empty (a group with live processes stays)."""
    for directory in layout.session_dirs(session_id):
        with contextlib.suppress(OSError):
            directory.rmdir()


def describe(layout: CgroupLayout | None, *, max_procs: int) -> str:
    """One line for the protections report."""
    if layout is None:
        return ""
    return (
        f"cgroup v{layout.version}: all processes of a step share one memory budget (the step's "
        f"memory limit) and at most {max_procs} processes"
    )
