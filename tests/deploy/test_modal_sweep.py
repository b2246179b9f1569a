"""The Modal Volume is swept like local workspaces: an hourly function mounts it with the store's secret,
and its body (`sweep_volume`) removes forgotten threads' folders — each renaming committed while the
thread's lock is held, so no step in another container writes into a folder a later commit removes.
A temporary directory stands in for the Volume; the store is real (SQLite)."""

from __future__ import annotations

import os

import pytest

from bot.retention import sweep_volume
from core.sessions import LockTimeout, open_store
from tests.fakes.workspaces import aged_workspace


def test_the_hourly_sweep_is_declared_with_the_volume_and_the_store_secret_alone():
    os.environ.pop("DATATHREAD_MODAL_SECRETS", None)
    import deploy.modal_app as modal_app

    info = modal_app.sweep_workspaces.info()
    assert str(info.schedule) == "Period(hours=1)"
    assert {path: mount.name for path, mount in info.volumes.items()} == {
        "/workspace": "datathread-workspaces"
    }
    assert info.secrets == ["modal.Secret.from_name('datathread-redis')"]  # the store alone: no model key
    assert info.restrict_modal_access  # it needs its own Volume, nothing else of the account


async def test_the_volume_sweep_commits_each_renaming_under_the_threads_lock(settings, tmp_path):
    modal = settings.model_copy(update={"sandbox": "modal"})
    volume = tmp_path / "volume"
    forgotten = aged_workspace(
        volume, "sl-forgotten", age_days=40, files={"a.parquet": b"x", "d/b.csv": b"y"}
    )
    talking = aged_workspace(volume, "sl-talking", age_days=40)  # asked again: history kept
    recent = aged_workspace(volume, "sl-recent", age_days=1)
    calls: list[str] = []
    store = await open_store(modal)

    async def reload() -> None:
        calls.append("reload")

    async def commit() -> None:
        seen = sorted(p.name for p in volume.iterdir())
        locked = False
        if "sl-forgotten" not in seen:  # committed after the renaming: the thread still locked?
            try:
                async with store.lock("sl-forgotten", wait_s=0):
                    pass
            except LockTimeout:
                locked = True
        calls.append(f"commit {'locked' if locked else 'free'} {','.join(seen)}")

    try:
        await store.save_history("sl-talking", [{"role": "user", "content": "and now?"}])
        removed = await sweep_volume(modal, root=volume, reload=reload, commit=commit)
    finally:
        await store.close()
    assert removed == ["sl-forgotten"]
    assert not forgotten.exists() and talking.exists() and recent.exists()
    assert calls[0] == "reload"
    assert calls[1].startswith("commit locked .removing-sl-forgotten-")  # renamed, published, then let go
    assert calls[1].endswith(",sl-recent,sl-talking")
    assert calls[2:] == ["commit free sl-recent,sl-talking"]  # and the deletion committed


async def test_without_the_store_the_volume_sweep_removes_nothing(settings, tmp_path):
    from core.sessions import StoreUnavailable

    volume = tmp_path / "volume"
    old = aged_workspace(volume, "sl-old", age_days=40)
    gone = settings.model_copy(update={"sandbox": "modal", "redis_url": "redis://127.0.0.1:9/0"})
    with pytest.raises(StoreUnavailable):
        await sweep_volume(gone, root=volume, reload=lambda: None, commit=lambda: None)
    assert old.exists()


async def test_the_volume_sweep_removes_what_reset_and_forget_queued(settings, tmp_path):
    """On Modal only the function that mounts the Volume can delete from it: `reset` and `datathread
    forget` queue the thread, and the next hourly sweep removes its folder (it never did: a reset or
    forgotten thread's files stayed until they were idle for the history TTL)."""
    from core.thread_files import VOLUME_QUEUE, remove_thread_files

    modal = settings.model_copy(update={"sandbox": "modal"})
    volume = tmp_path / "volume"
    asked = aged_workspace(volume, "sl-reset", age_days=0)  # written a minute ago: not idle
    kept = aged_workspace(volume, "sl-other", age_days=0)
    store = await open_store(modal)
    try:
        counts = await remove_thread_files(modal, store, "sl-reset")
        assert counts["workspaces queued"] == 1 and asked.exists()  # the Volume is not mounted here
        removed = await sweep_volume(modal, root=volume, reload=lambda: None, commit=lambda: None)
        assert removed == ["sl-reset"] and not asked.exists() and kept.exists()
        assert await store.list_records(VOLUME_QUEUE) == []  # done, and not asked again
    finally:
        await store.close()
