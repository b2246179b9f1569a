"""The log file (bot/log_setup.py): this user's alone. It holds people's questions at INFO and DEBUG,
and sat at 0644 in a state home that is 0711 (steps pass through it to their workspaces), so every user
of the host could read it (found by a newcomer trial: `su nobody -c "grep -c 'how many flights' …"`)."""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest

from bot.log_setup import LogFile, log_file, setup_logging

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restored_logging():
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("earlier", [False, True], ids=["new-home", "logs-made-by-an-earlier-version"])
def test_the_log_and_its_rotations_are_readable_by_this_user_only(settings, restored_logging, earlier):
    path = log_file(settings)
    if earlier:  # an existing 0755 folder and 0644 file, as the last version left them
        path.parent.mkdir(parents=True, mode=0o755)
        path.parent.chmod(0o755)
        path.write_text("an older line\n")
        path.chmod(0o644)
    assert setup_logging(settings, "INFO") == path
    logging.getLogger("datathread.test").info("a person's question: how many flights left JFK?")
    assert mode(path.parent) == 0o700 and mode(path) == 0o600
    assert "how many flights" in path.read_text()
    rotating = next(h for h in logging.getLogger().handlers if getattr(h, "baseFilename", "") == str(path))
    rotating.doRollover()  # the next file is made by the handler itself, with the process's umask
    assert sorted(p.name for p in path.parent.iterdir()) == ["datathread.log", "datathread.log.1"]
    assert mode(path.parent) == 0o700  # what keeps every rotation private, whatever its own mode


def test_a_proxy_login_in_the_claude_url_never_reaches_the_terminal_or_the_log(tmp_path, fake_model):
    """A gateway that takes its login in ANTHROPIC_BASE_URL (user:password@): the answer comes through
    it, and httpx's request line and the SDK's debug records, which printed the password on stderr and
    into the log (at `serve`'s default INFO too), show "[redacted]@" instead."""
    from tests.fakes.anthropic_api import text
    from tests.fakes.cli import run

    fake_model.enqueue(text("Through the proxy."))
    home = tmp_path / "home"
    url = fake_model.url.replace("http://", "http://proxyuser:PROXYPASS99@")
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-000000", "ANTHROPIC_BASE_URL": url}
    result = run(["ask", "a question", "--log-level", "debug"], home, env=env)
    assert result.returncode == 0 and "Through the proxy." in result.stdout, result.stderr
    logged = (home / "logs" / "datathread.log").read_text()
    assert "[redacted]@127.0.0.1" in result.stderr and "[redacted]@127.0.0.1" in logged, result.stderr
    assert "PROXYPASS99" not in result.stderr + result.stdout + logged


def test_a_log_file_that_cannot_be_written_says_so_once_not_a_traceback_per_record(tmp_path):
    """A full disk under DATATHREAD_HOME: every record became a ~90-line "--- Logging error ---"
    traceback on stderr (four per question). Now one line says it, and one line when it works again."""
    from tests.fakes.full_disk import run_python

    code = (
        "import logging, sys\n"
        "from bot.log_setup import LogFile\n"
        f"handler = LogFile({str(tmp_path / 'datathread.log')!r}, maxBytes=10_000_000, backupCount=1)\n"
        "log = logging.getLogger('x'); log.addHandler(handler); log.propagate = False\n"
        "for n in range(40):\n"
        "    log.warning('record %d %s', n, 'x' * 200)\n"
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
        "log.warning('room again')\n"
        "handler.close()\n"
    )
    done = run_python(code, size=2_000, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("datathread: could not write the log file"), lines
    assert "file too large" in lines[0]  # the system's reason (a full disk says "no space left on device")
    assert lines[1].endswith("is written again") and "room again" in (tmp_path / "datathread.log").read_text()


def test_a_record_with_a_lone_surrogate_is_written_as_its_escape(settings, restored_logging, capsys):
    """A path or payload Python could not decode holds "\\udcfc": strict UTF-8 lost the record and said
    on stderr that the log file could not be written. Now the record is there, the escape in it."""
    path = setup_logging(settings, None)
    # Straight to the handlers setup_logging installed: pytest's own capture keeps every record in the
    # test's report, which xdist sends to the controller as UTF-8 and a lone surrogate crashes the worker.
    record = logging.getLogger("datathread.test").makeRecord(
        "datathread.test", logging.WARNING, __file__, 0, "asked about M\udcfcnchen", None, None
    )
    ours = [h for h in logging.getLogger().handlers if type(h).__module__.startswith("bot.")]
    assert ours, "setup_logging installed no handler of its own"
    for handler in ours:
        handler.handle(record)
        handler.flush()
    assert "asked about M\\udcfcnchen" in path.read_text()
    assert "could not write the log file" not in capsys.readouterr().err


def test_a_pre_authenticated_links_query_never_reaches_the_log(settings, restored_logging, capsys):
    """A Teams file's downloadUrl (and OneDrive's upload URL) carries its own credential, `tempauth=`,
    in its query: httpx logs every request's whole URL at INFO, `serve`'s level, so the link reached
    stderr and the log file, readable by whoever reads the logs for as long as the link lives."""
    import http.server
    import threading

    import httpx

    class Files(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):  # not ours to print
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = setup_logging(settings, "INFO")
        link = f"http://127.0.0.1:{server.server_port}/personal/x/download.aspx?UniqueId=7&tempauth=eyJTEMPAUTH42"
        assert httpx.get(link).content == b"ok"
    finally:
        server.shutdown()
        server.server_close()
    logged, shown = path.read_text(), capsys.readouterr().err
    assert "download.aspx?[redacted]" in shown  # the request is still logged, its host and path with it
    assert "TEMPAUTH42" not in logged + shown and "UniqueId" not in logged + shown


def _stamp(days_ago: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - days_ago * 86_400))


def _aged(path: Path, text: str, days_ago: float) -> None:
    path.write_text(text)
    then = time.time() - days_ago * 86_400
    os.utime(path, (then, then))


def test_the_log_keeps_records_for_log_days_and_no_longer(settings, restored_logging):
    """A quiet log kept people's questions for months: four files of 5 MB, rotated by size alone, and no
    document said how long. With DATATHREAD_LOG_DAYS=2 a file older than that is gone at start, the
    current file is closed once its first record is a day old, and what is newer stays."""
    path = log_file(settings.model_copy(update={"log_days": 2}))
    path.parent.mkdir(parents=True)
    _aged(path, f"{_stamp(3)},000 INFO datathread.turn: asked: old salaries?\n", days_ago=3)
    _aged(path.with_name("datathread.log.1"), f"{_stamp(6)},000 INFO x: asked: older ones?\n", 5)
    _aged(path.with_name("datathread.log.2"), f"{_stamp(1.5)},000 WARNING x: yesterday's warning\n", 1)
    setup_logging(settings.model_copy(update={"log_days": 2}), "INFO")
    logging.getLogger("datathread.test").info("asked: today's question")
    kept = "".join(p.read_text() for p in path.parent.iterdir())
    assert "old salaries" not in kept and "older ones" not in kept
    assert "yesterday's warning" in kept and "today's question" in path.read_text()

    handler = next(h for h in logging.getLogger().handlers if getattr(h, "baseFilename", "") == str(path))
    handler.roll_at = time.time() - 1  # a day on: the next record begins a new file
    _aged(path, f"{_stamp(1.1)},000 INFO datathread.turn: asked: a day ago\n", days_ago=1.1)
    logging.getLogger("datathread.test").info("asked: the next day")
    assert "a day ago" not in path.read_text() and "the next day" in path.read_text()
    assert "a day ago" in path.with_name("datathread.log.1").read_text()  # kept: younger than 2 days


def test_log_days_0_keeps_the_size_bound_alone(settings, restored_logging):
    path = log_file(settings)
    path.parent.mkdir(parents=True)
    _aged(path, f"{_stamp(40)},000 INFO x: asked: last month\n", days_ago=40)
    setup_logging(settings.model_copy(update={"log_days": 0}), "INFO")
    logging.getLogger("datathread.test").info("asked: now")
    assert "last month" in path.read_text() and "now" in path.read_text()


def test_processes_sharing_the_log_cut_it_once_and_write_on_into_the_new_file(tmp_path):
    """serve's web process and turn workers write one log. When one cut it at the size bound, each of
    the others cut again by its own stream's size: the full file was pushed down by one of a few lines
    (backups of a few lines each, and the oldest lines lost early). Now the others write on into the
    new file. Two handlers on one path are two processes: each has its own stream."""
    path = tmp_path / "datathread.log"
    line = "x" * 90
    first, second = (LogFile(path, maxBytes=1000, backupCount=3, encoding="utf-8") for _ in range(2))
    for handler in (first, second):
        handler.setFormatter(logging.Formatter("%(message)s"))

    def write(handler: LogFile, n: int) -> None:
        for _ in range(n):
            handler.emit(logging.LogRecord("t", logging.WARNING, __file__, 1, line, None, None))

    write(second, 1)  # both have the file open
    write(first, 12)  # the first cuts it once
    write(second, 3)  # the second finds it cut: writes on, cuts nothing
    first.close()
    second.close()
    assert sorted(p.name for p in tmp_path.glob("datathread.log.[0-9]")) == ["datathread.log.1"]
    assert (tmp_path / "datathread.log.1").stat().st_size > 900  # the full file, not a stub
    assert path.read_text().count(line) == 13 + 3 - (tmp_path / "datathread.log.1").read_text().count(line)
