"""Where the command line's logs go: a file under DATATHREAD_HOME always, the terminal only when asked.

In `chat` and `ask` the terminal shows the conversation and one sentence per failure, never a
timestamped WARNING beside it; the file keeps warnings and errors (with error ids) for later.
`--log-level` adds the terminal at that level. Secrets are redacted on every handler.

The file is bounded by size (each cut at FILE_BYTES) and by age (DATATHREAD_LOG_DAYS): at INFO and
DEBUG it holds people's questions and code, and four files of 5 MB kept a quiet log's records for
months, which no document said. So a file is also closed once its first record is a day old, and a
closed file whose newest record is older than the setting is deleted — at the first record after
that, and at each start. 0 keeps the size bound alone (the four files of before).

Several processes write one file (`serve`'s web process and turn workers): the size is the file's,
a cut is made under a lock on the logs folder, and a process whose file was cut
by another opens the new one instead of cutting again (each cut again by its own stream's size:
files of a few lines took the backups' places, and lines were lost).
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import typer

from core.config import Settings
from core.redact import install_log_redaction
from core.wording import os_reason

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FILE_BYTES = 5_000_000  # one file, at most
SIZE_BACKUPS = 3  # closed files kept without an age bound (DATATHREAD_LOG_DAYS=0)
DAY_S = 86_400
STAMP = re.compile(rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")  # FORMAT's asctime, at a record's start
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_LEVEL_HELP = (
    "Also print log records of this level and above on stderr (DEBUG, INFO, WARNING, ERROR). "
    "Warnings always go to DATATHREAD_HOME/logs/datathread.log."
)


# Marks a start-up notice about the HTTP endpoints: `log.warning(..., extra=ENDPOINT_NOTICE)`. The web
# process says it; a turn worker builds the same app (bot/turn_worker.py) but serves no endpoint, and
# its copy printed the notice once more per worker at every `serve` start.
ENDPOINT_NOTICE = {"endpoint_notice": True}


class _NoEndpointNotices(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "endpoint_notice", False)


def drop_endpoint_notices() -> None:
    """In a process that serves no endpoint: its handlers leave out the endpoint notices."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, "datathread", False):
            handler.addFilter(_NoEndpointNotices())


def parse_level(value: str | None) -> str | None:
    """typer callback: a known level name (any case), or a usage error naming the choices."""
    if value is None:
        return None
    if value.upper() not in LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LEVELS)}.")
    return value.upper()


def log_file(settings: Settings) -> Path:
    return settings.home / "logs" / "datathread.log"


class LogFile(logging.handlers.RotatingFileHandler):
    """The log file, which says once when it cannot be written (a full disk, a removed folder) and
    once when it can again: logging's default printed a ~90-line "--- Logging error ---" traceback on
    stderr for every record, four per question on a full disk. With `days`, kept that long (see above):
    a new file each day as well as at FILE_BYTES, and a day's worth of closed files for each day kept
    (the most disk it takes: days + 1 files of FILE_BYTES)."""

    def __init__(self, path: Path | str, *, days: int = 0, **kwargs) -> None:
        kwargs.setdefault("maxBytes", FILE_BYTES)
        kwargs.setdefault("backupCount", max(days, SIZE_BACKUPS) if days else SIZE_BACKUPS)
        super().__init__(path, **kwargs)
        self.failing = False
        self._failed_now = False
        self.days = days
        self.roll_at = first_record_at(path) + DAY_S if days else float("inf")
        if days:
            self.expire()
            if time.time() >= self.roll_at:  # a file begun over a day ago: closed now
                self.doRollover()

    def shouldRollover(self, record: logging.LogRecord) -> int:
        if self._cut_elsewhere():  # another process closed the file: this one writes on into the new one
            self._reopen()
        if time.time() >= self.roll_at and not self._begun_elsewhere():
            return 1
        if self.maxBytes <= 0:
            return 0
        try:  # the file's size, which every process writing it shares, not this stream's position
            size = os.stat(self.baseFilename).st_size
        except OSError:
            return 0
        return int(size + len(f"{self.format(record)}\n".encode(errors="replace")) >= self.maxBytes)

    def _cut_elsewhere(self) -> bool:
        """Whether the file this process writes is no longer the log (another process renamed it to
        `.1` when it cut it). Each process then cut again, by the size its own stream had reached:
        files of a few lines took the backups' places, and older lines were lost early."""
        if self.stream is None:
            return False
        try:
            return os.fstat(self.stream.fileno()).st_ino != os.stat(self.baseFilename).st_ino
        except OSError:  # not there at all (between another process's rename and its new file)
            return True

    def _reopen(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.stream = self._open()

    def _begun_elsewhere(self) -> bool:
        """Whether another process writing this log (`serve`'s turn workers) has begun today's file:
        then this one writes on into that file instead of closing it after a record or two."""
        begun = first_record_at(Path(self.baseFilename))
        if time.time() >= begun + DAY_S:
            return False
        if self.stream is not None:
            self.stream.close()
            self.stream = self._open()
        self.roll_at = begun + DAY_S
        return True

    def doRollover(self) -> None:
        """Cut the file, one process at a time (a lock beside it): a process that finds it cut by
        another meanwhile opens the new file instead of cutting that one too."""
        with _exclusive(os.path.dirname(self.baseFilename)):
            if self._cut_elsewhere():
                self._reopen()
                if self.days:
                    self.roll_at = first_record_at(Path(self.baseFilename)) + DAY_S
                return
            super().doRollover()
        if self.days:
            self.roll_at = time.time() + DAY_S
            self.expire()

    def expire(self, now: float | None = None) -> None:
        """Delete the closed files whose newest record (their last write) is older than `days`."""
        cutoff = (now or time.time()) - self.days * DAY_S
        for n in range(1, self.backupCount + 1):
            with contextlib.suppress(OSError):  # not there, or not ours to delete: the next pass
                old = Path(f"{self.baseFilename}.{n}")
                if old.stat().st_mtime < cutoff:
                    old.unlink()

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)
        if self.failing and not self._failed_now:
            self.failing = False
            sys.stderr.write(f"datathread: the log file {self.baseFilename} is written again\n")

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed_now = True
        if not self.failing:
            self.failing = True
            why = os_reason(sys.exc_info()[1]) or "it failed"
            sys.stderr.write(
                f"datathread: could not write the log file {self.baseFilename} ({why}); "
                "its records are lost until it can be written again\n"
            )


@contextlib.contextmanager
def _exclusive(folder: str):
    """An advisory lock on the log's folder across processes (no file of its own beside the logs; none
    where fcntl is missing or the folder cannot be opened: cutting unguarded, as before)."""
    try:
        import fcntl

        fd = os.open(folder or ".", os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def first_record_at(path: Path) -> float:
    """When the log file's first record was written (its asctime, local time as logging writes it);
    now for an empty or new file, its last write for one that begins otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(32)
        found = STAMP.match(head)
        if found:
            return datetime.strptime(found[1].decode(), "%Y-%m-%d %H:%M:%S").timestamp()
        return path.stat().st_mtime if head else time.time()
    except (OSError, ValueError):
        return time.time()


def setup_logging(settings: Settings, console_level: str | None) -> Path:
    """File handler at WARNING (or lower if asked); a stderr handler only for `console_level`.

    The logs are this user's alone (folder 0700, file 0600): at INFO and DEBUG they hold people's
    questions and the SDKs' request options, and the state home around them is 0711 (sandboxed steps
    pass through it to their workspaces) — the log was 0644, readable by every user of the host."""
    path = log_file(settings)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # made by an earlier version (0755), or not ours: as it is
        os.chmod(path.parent, 0o700)
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(path, 0o600)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "datathread", False)]:
        root.removeHandler(handler)  # set up twice in one process (tests): replace, don't stack
        handler.close()
    file_level = min(logging.WARNING, getattr(logging, console_level or "WARNING"))
    # A lone surrogate (a path or payload text Python could not decode) is written as its escape: strict
    # UTF-8 lost the record and said the log file "could not be written" (core/text_repair.py).
    to_file = LogFile(path, days=settings.log_days, encoding="utf-8", errors="backslashreplace")
    to_file.setLevel(file_level)
    to_file.setFormatter(logging.Formatter(FORMAT))
    handlers: list[logging.Handler] = [to_file]
    if console_level:
        to_stderr = logging.StreamHandler(sys.stderr)
        to_stderr.setLevel(console_level)
        to_stderr.setFormatter(logging.Formatter(FORMAT))
        handlers.append(to_stderr)
    for handler in handlers:
        handler.datathread = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(min(file_level, getattr(logging, console_level or "WARNING")))
    install_log_redaction(settings.secret_values())
    return path
