"""`LocalSandbox.list_files` (what `attach_file` looks files up in): complete, bounded by the file
quota, and walked off the event loop — a workspace of 100,000 files once froze `/healthz` for seconds
(issue #14)."""

from __future__ import annotations

import asyncio
import gc
import os
import time

from core.sandbox_local import LocalSandbox

FILES = 40_000


def _fill(workspace, count: int) -> None:
    for d in range(count // 1000):
        sub = workspace / f"d{d:02d}"
        sub.mkdir()
        for n in range(1000):
            os.close(os.open(sub / f"f{n:04d}.csv", os.O_CREAT | os.O_WRONLY, 0o600))


async def _worst_slip(work) -> tuple[object, float]:
    """Run `work` while a ticker sleeps 10 ms at a time; the worst lateness of a tick, in seconds."""
    done = asyncio.Event()
    worst = 0.0

    async def tick() -> None:
        nonlocal worst
        while not done.is_set():
            started = time.monotonic()
            await asyncio.sleep(0.01)
            worst = max(worst, time.monotonic() - started - 0.01)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)  # the ticker is running before the work starts
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return result, worst


async def test_listing_a_big_workspace_keeps_the_event_loop_responsive(tmp_path):
    sandbox = LocalSandbox(workspaces=tmp_path / "ws")
    workspace = sandbox.workspace("s-big")
    _fill(workspace, FILES)
    (workspace / "chart.png").write_bytes(b"x" * 7)
    (workspace / ".hidden").write_bytes(b"x")
    (workspace / "link.csv").symlink_to(workspace / "chart.png")

    # This process holds the whole suite's imports: one full garbage collection of that heap stops
    # every thread alike for hundreds of ms on a busy host, whatever the listing does. Frozen here (as
    # a long-running process freezes what it built at start), so what is measured is the listing.
    gc.collect()
    gc.freeze()
    try:
        started = time.monotonic()
        files, worst = await _worst_slip(sandbox.list_files("s-big"))
        took = time.monotonic() - started
    finally:
        gc.unfreeze()

    assert len(files) == FILES + 1  # every file; no dot-file, no link
    assert {"path": "chart.png", "size": 7, "kind": "png"} in files
    assert {"path": "d03/f0999.csv", "size": 0, "kind": "csv"} in files
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    # The walk took a while (or the check below would prove nothing), and the loop kept ticking: a
    # walk on the loop stalls it for the whole walk. On a host loaded many times over (a CI run beside
    # other work: the walk took 3.9 s) a thread waits its turn for a CPU longer than 100 ms, so the
    # bound grows with the walk's time and stays a tenth of it.
    assert took > 0.1, took
    bound = max(0.1, took / 10)
    assert worst < bound, f"the event loop stalled {worst * 1000:.0f} ms while listing ({took:.2f} s)"


async def test_listing_stops_at_the_file_quota(tmp_path):
    sandbox = LocalSandbox(workspaces=tmp_path / "ws", workspace_files=1500)
    _fill(sandbox.workspace("s-many"), 3000)

    files = await sandbox.list_files("s-many")

    assert len(files) == 1500
