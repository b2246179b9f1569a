"""The landing of a step's layer (`core/workspace_overlay.py`) run directly, in a child process with
its own mount namespace (and user namespace when not host root), on real files: what happens when it
runs out of time, and how deep trees are handled."""

from __future__ import annotations

import ctypes
import os
import sys
import time
import traceback

import pytest

from core import isolation, workspace_overlay

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux mount namespaces")


def in_child(workspace, step, *, deadline: float, budget=(2**30, 10_000)) -> str:
    """Mount the layer (1 GB) over `workspace` in a child, run `step()` there (as a step would write),
    land within `budget` (bytes, entries) and `deadline` (seconds from now); returns what `land` returned, or the error, as text."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again (a sandbox started in this process)
            if not isolation.host_root() and not isolation.enter_user_namespace():
                os.write(write_end, b"skip: no user namespaces")
                os._exit(0)
            existing = workspace_overlay.measure(workspace).files
            layer = workspace_overlay.mount_over(
                workspace, add_bytes=2**30, add_files=10_000, existing=existing
            )
            step()
            try:
                out = workspace_overlay.land(
                    layer, workspace_overlay.Budget(*budget), deadline=time.monotonic() + deadline
                )
            except (OSError, RecursionError) as exc:
                out = f"error: {type(exc).__name__}"
            os.write(write_end, str(out).encode())
            code = 0
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    if out.startswith("skip"):
        pytest.skip(out)
    return out


def test_a_landing_out_of_time_applies_no_deletion_and_leaves_nothing_partial(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    content = os.urandom(4 * 2**20)
    (ws / "data.csv").write_bytes(content)
    (ws / "old.txt").write_text("old")

    def step():
        os.rename(ws / "data.csv", ws / "renamed.csv")
        os.remove(ws / "old.txt")
        (ws / "new.bin").write_bytes(os.urandom(2**20))

    assert in_child(ws, step, deadline=-1) == "False"
    assert sorted(p.name for p in ws.iterdir()) == ["data.csv", "old.txt"]
    assert (ws / "data.csv").read_bytes() == content


def test_a_landing_in_time_applies_the_rename(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    content = os.urandom(4 * 2**20)
    (ws / "data.csv").write_bytes(content)

    def step():
        os.rename(ws / "data.csv", ws / "renamed.csv")

    # the quota has room for one copy only: the deleted old name pays for the new one
    assert in_child(ws, step, deadline=60, budget=(2**20, 10)) == "True"
    assert sorted(p.name for p in ws.iterdir()) == ["renamed.csv"]
    assert (ws / "renamed.csv").read_bytes() == content
