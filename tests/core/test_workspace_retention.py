"""Idle workspaces are forgotten: files of a thread nobody wrote to for DATATHREAD_HISTORY_TTL_DAYS and
whose history the store let go are removed; everything else stays. A real SQLite store and real files."""

from __future__ import annotations

import os
import time

import pytest

from core.sandbox_factory import open_threads
from core.sandbox_local import LocalSandbox
from tests.fakes.workspaces import DAY, aged_workspace


async def test_only_idle_and_forgotten_workspaces_are_removed(settings, tmp_path):
    root = settings.workspaces_dir
    victim = tmp_path / "outside.txt"
    victim.write_text("not the sandbox's")
    forgotten = aged_workspace(
        root, "sl-forgotten", age_days=31, files={"a.parquet": b"x", "deep/b.csv": b"y"}
    )
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o750)
    (forgotten / "deep" / "escape").symlink_to(outside)  # a link to a folder: never made writable
    os.utime(forgotten / "deep", (time.time() - 31 * DAY,) * 2)
    (forgotten / "deep").chmod(0o500)  # a step left a folder it cannot write to any more (an ordinary
    # user's rmtree cannot empty it: its folders are made writable first, through descriptors)
    (forgotten / "link").symlink_to(victim)  # removed as a link, never followed
    os.utime(forgotten, (time.time() - 31 * DAY,) * 2, follow_symlinks=False)
    os.utime(forgotten / "link", (time.time() - 31 * DAY,) * 2, follow_symlinks=False)
    talking = aged_workspace(root, "sl-talking", age_days=31)  # no step wrote lately, but asked again today
    recent = aged_workspace(root, "sl-recent", age_days=2)
    stray = aged_workspace(root, "not a session", age_days=90)  # not a session's name: not ours to judge
    # a folder of someone else's under a shared DATATHREAD_HOME (`~/workspaces/project`): no `.tmp`
    theirs = aged_workspace(root, "project", age_days=90, ours=False)
    in_use = aged_workspace(root, "sl-in-use", age_days=31)  # its first turn runs (no history yet)
    async with open_threads(settings) as threads:
        await threads._store.save_history("sl-talking", [{"role": "user", "content": "and now?"}])
        async with threads._store.lock("sl-in-use"):
            assert await threads.forget_idle_workspaces() == ["sl-forgotten"]
        assert await threads.forget_idle_workspaces() == ["sl-in-use"]  # its turn is over
        assert await threads.forget_idle_workspaces() == []  # a third sweep finds nothing more
    assert not forgotten.exists() and not in_use.exists() and victim.read_text() == "not the sandbox's"
    assert outside.is_dir() and outside.stat().st_mode & 0o777 == 0o750
    assert talking.exists() and recent.exists() and stray.exists() and theirs.exists()
    assert sorted(p.name for p in root.iterdir()) == ["not a session", "project", "sl-recent", "sl-talking"]


def test_a_workspace_another_replica_removed_meanwhile_is_not_idle(tmp_path):
    """Two sweepers at once: the one that found a workspace gone crashed on it and swept no further."""
    from core.workspace_retention import idle_workspaces, is_idle

    assert not is_idle(tmp_path, "sl-gone", idle_s=1, now=time.time())
    aged_workspace(tmp_path, "sl-old", age_days=3)
    assert idle_workspaces(tmp_path, idle_s=DAY, now=time.time()) == ["sl-old"]


async def test_a_new_file_at_the_top_keeps_an_old_workspace(settings):
    ws = aged_workspace(settings.workspaces_dir, "sl-old", age_days=40)
    (ws / "new_chart.png").write_bytes(b"\x89PNG")  # written now
    async with open_threads(settings) as threads:
        assert await threads.forget_idle_workspaces() == []
    assert ws.exists()


async def test_modal_workspaces_are_not_this_processs_to_sweep(settings):
    aged_workspace(settings.workspaces_dir, "sl-old", age_days=40)
    modal = settings.model_copy(update={"sandbox": "modal"})
    async with open_threads(modal) as threads:
        assert await threads.forget_idle_workspaces() == []
    assert (settings.workspaces_dir / "sl-old").exists()


async def test_a_file_dated_in_the_future_does_not_keep_a_workspace_for_good(settings):
    """Model code may `os.utime` its files to the year 2100 (landing keeps the date): the newest time
    was then always ahead, and the workspace — up to its whole quota — was never swept."""
    ws = aged_workspace(settings.workspaces_dir, "sl-dated", age_days=40, files={"keep.csv": b"a\n1\n"})
    os.utime(ws / "keep.csv", (4_102_444_800, 4_102_444_800))  # 2100-01-01
    async with open_threads(settings) as threads:
        assert await threads.forget_idle_workspaces() == ["sl-dated"]
    assert not ws.exists()


async def test_reading_a_removed_threads_files_does_not_make_its_folder_again(settings):
    """A file link or a click on a thread the sweep had removed made its folder again (empty, newly
    written: kept for another DATATHREAD_HISTORY_TTL_DAYS); on Modal a read then committed it."""
    sandbox = LocalSandbox(workspaces=settings.workspaces_dir)
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("sl-removed", "top.csv")
    assert await sandbox.list_files("sl-removed") == []
    assert not (settings.workspaces_dir / "sl-removed").exists()
    await sandbox.write_file("sl-removed", "new.csv", b"a\n1\n")  # a write makes it, as a step does
    assert await sandbox.read_file("sl-removed", "new.csv") == b"a\n1\n"
