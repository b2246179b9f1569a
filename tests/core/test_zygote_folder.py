"""The fork server's folder a killed bot left behind is removed by the next sandbox, and nothing else
is: a live bot's folder, a folder too young to judge, an older version's, a link, another user's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import zygote_folder
from core.zygote_folder import LOCK, PREFIX, ZygoteFolder, sweep_left_behind

HOLDER = """
import sys, time
from pathlib import Path
from core.zygote_folder import ZygoteFolder
folder = ZygoteFolder.make(Path(sys.argv[1]))
print(folder.path, flush=True)
time.sleep(60)
"""


def holder(base: Path) -> tuple[subprocess.Popen, Path]:
    """A process that made its folder and holds it, as a bot does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(base)], stdout=subprocess.PIPE, text=True)
    return proc, Path(proc.stdout.readline().strip())


@pytest.fixture
def no_grace(monkeypatch):
    monkeypatch.setattr(zygote_folder, "GRACE_S", 0.0)


@pytest.fixture
def short(tmp_path):
    """A temp folder short enough for a socket's path (pytest's own may not be: the folder then goes
    in /tmp, see the last test)."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="dtz-", dir="/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_killed_bots_folder_goes_and_a_live_ones_stays(short, no_grace):
    live, live_folder = holder(short)
    killed, killed_folder = holder(short)
    try:
        killed.send_signal(signal.SIGKILL)  # no cleanup code runs
        killed.wait()
        assert killed_folder.is_dir() and live_folder.is_dir()
        mine = ZygoteFolder.make(short)  # the next sandbox to start
        assert not killed_folder.exists()
        assert live_folder.is_dir() and (live_folder / LOCK).exists()
        mine.remove()
        assert not mine.path.exists()
    finally:
        live.kill()
        live.wait()
    assert sweep_left_behind(short) == 1 and not list(short.iterdir())  # once its bot died too


def test_a_young_folder_an_older_versions_and_a_link_are_left_alone(tmp_path):
    young = tmp_path / f"{PREFIX}young"
    young.mkdir()
    (young / LOCK).touch()  # unlocked, but its bot may be about to lock it
    old_version = tmp_path / f"{PREFIX}oldversion"
    old_version.mkdir()
    (old_version / "zygote.sock").touch()  # no lock file: alive or not, nothing says
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / LOCK).touch()
    os.utime(target / LOCK, (time.time() - 3600, time.time() - 3600))
    (tmp_path / f"{PREFIX}link").symlink_to(target)
    assert sweep_left_behind(tmp_path) == 0
    assert young.is_dir() and old_version.is_dir() and (target / LOCK).exists()
    os.utime(young / LOCK, (time.time() - 3600, time.time() - 3600))
    assert sweep_left_behind(tmp_path) == 1 and not young.exists()  # old enough to judge, and unlocked


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a folder that is another user's")
def test_another_users_folder_is_left_alone(tmp_path, no_grace):
    theirs = tmp_path / f"{PREFIX}theirs"
    theirs.mkdir()
    (theirs / LOCK).touch()
    os.chown(theirs, 65534, 65534)
    assert sweep_left_behind(tmp_path) == 0 and (theirs / LOCK).exists()


def test_under_a_temp_folder_too_long_for_a_socket_the_folder_goes_in_tmp(tmp_path):
    """The fork server failed to start under a long TMPDIR: "AF_UNIX path too long"."""
    long = tmp_path / ("x" * 90)
    long.mkdir()
    folder = ZygoteFolder.make(long)
    try:
        assert folder.path.parent == Path("/tmp") and len(folder.socket.encode()) < 108
    finally:
        folder.remove()
