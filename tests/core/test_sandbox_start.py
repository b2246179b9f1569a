"""A fork server that ends before it is ready: the error says how it ended, and the end of its log —
kept in its private directory, which goes with the sandbox — reaches the bot's log. (Once, a test
worker's fork server died at start and all that was left was "failed to start".) The fork server here is
a stand-in executable: what is under test is the bot's side of a child that dies."""

from __future__ import annotations

import logging
import sys

import pytest

from core import sandbox_protections
from core.sandbox_local import LocalSandbox


@pytest.mark.parametrize(
    "ending,how", [("exit 3", "exit status 3"), ("kill -9 $$", "killed by signal 9")], ids=["exits", "killed"]
)
async def test_a_fork_server_dying_at_start_says_how_and_logs_its_last_words(
    tmp_path, monkeypatch, caplog, ending, how
):
    fake = tmp_path / "python"
    fake.write_text(
        f"#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho 'MemoryError: boom' >&2\n{ending}\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    sandbox = LocalSandbox(workspaces=tmp_path / "ws")
    try:
        with caplog.at_level(logging.ERROR), pytest.raises(RuntimeError) as failed:
            await sandbox.start()
    finally:
        await sandbox.close()
    assert str(failed.value) == f"The sandbox fork server failed to start ({how})."
    said = [r.getMessage() for r in caplog.records if "fork server ended at start" in r.getMessage()]
    assert len(said) == 1 and how in said[0] and said[0].endswith("MemoryError: boom"), said


@pytest.mark.parametrize(
    "policy,advice",
    [
        ("best", "set DATATHREAD_ISOLATION=strict to refuse steps without network and filesystem isolation"),
        ("strict", "DATATHREAD_ISOLATION=strict needs only network and filesystem isolation, which is on"),
    ],
)
def test_the_protections_off_warning_advises_what_fits_the_policy(tmp_path, caplog, policy, advice):
    """`serve` runs strict, and its start logged "set DATATHREAD_ISOLATION=strict" under a uid and a
    cgroup row that strict does not cover."""
    sandbox = LocalSandbox(workspaces=tmp_path / "ws", isolation_policy=policy)
    off = {"uid": "OFF — steps run as the bot's own uid", "cgroups": "OFF — no writable cgroup"}
    assert sandbox_protections.off_advice(sandbox.isolation_policy).startswith(advice)
    report = {"network": "on — own namespace", "filesystem": "on — own mount namespace", **off}
    with caplog.at_level(logging.WARNING, logger="core.sandbox_local"):
        sandbox_protections.log_report("userns", report, sandbox.isolation_policy)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "core.sandbox_local"]
    assert "uid: steps run as the bot's own uid" in warning and f"({advice}" in warning, warning


async def test_steps_run_in_utc_whatever_the_hosts_time_zone(tmp_path, monkeypatch):
    """A bot started in New York cast `TIMESTAMPTZ` to New York dates: the daily totals of one question
    differed from a bot in UTC, and from the exported notebook run anywhere else."""
    from core.sandbox import StepRequest

    monkeypatch.setenv("TZ", "America/New_York")
    sandbox = LocalSandbox(workspaces=tmp_path / "ws")
    await sandbox.start()
    try:
        sql = "SELECT (TIMESTAMPTZ '2013-01-01 03:00:00+00')::DATE AS day, current_setting('TimeZone') AS tz"
        result = await sandbox.run(StepRequest(kind="sql", session_id="tz", code=sql, timeout_s=30))
        assert result.ok, result.error
        assert result.preview.splitlines()[1].split() == ["2013-01-01", "UTC"]
        code = "import time, datetime\nprint(time.strftime('%Z'), datetime.datetime.fromtimestamp(0).hour)"
        python = await sandbox.run(StepRequest(kind="python", session_id="tz", code=code, timeout_s=30))
        assert python.ok and python.output.split() == ["UTC", "0"], python
    finally:
        await sandbox.close()
