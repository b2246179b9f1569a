"""Files shared from the terminal: `datathread ask --file PATH` and `/file PATH` in `datathread chat`.

The terminal's "fetch" is reading a local file, held to the same kinds, size and count as a file
shared in Slack or Teams (`refusal_before_fetch`), and with the other files of the same question to
the same total (`FilesBudget`: `ask --file`'s files, or those waiting after `/file` for the next
question), so the terminal refuses what they refuse, in their words. Only bytes are read here: what
they hold is parsed in the sandbox (core/file_intake.py).

A path is taken as the person typed it: `~` is their home, spaces are part of the name, and a byte
that is not UTF-8 (argv and stdin keep it as a surrogate escape) names the file that holds it. Only a
regular file is read (a FIFO would block the prompt for ever, `/dev/zero` never end), and never more
than its claim allows and one byte.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from bot.cli_common import die
from bot.terminal_controls import printable
from core.config import Settings
from core.events import SharedFile
from core.shared_files import MAX_FILES, FilesBudget, refusal_before_fetch
from core.text_repair import readable

FILE_CONTROL = "/file"
FILE_USAGE = (
    "Type /file PATH to share a CSV, TSV, Parquet, JSON or Excel file with your next question "
    "(a path with spaces as it is, or in quotes)."
)


def read_shared(typed: str, budget: FilesBudget, *, index: int = 0) -> SharedFile | str:
    """The file at the path `typed`, read (and held on `budget`); or the sentence saying why not."""
    path = Path(os.path.expanduser(typed))
    shown, name = _shown(str(path)), _shown(path.name)
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"There is no file {shown}."
    except OSError as exc:
        return f"I can't read {shown}: {exc.strerror or exc}."
    if stat.S_ISDIR(st.st_mode):
        return f"{shown} is a folder: share the files in it one by one."
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file."
    claim = budget.claim(path.name)
    refused = refusal_before_fetch(path.name, st.st_size, limit_mb=budget.file_mb, index=index)
    if refused := refused or claim.refusal(st.st_size):
        return f"{name}: {refused.refusal}"
    try:
        with path.open("rb") as f:
            data = f.read(claim.most() + 1)  # the size it had may not be the size it has now
    except OSError as exc:
        claim.release()
        return f"I can't read {shown}: {exc.strerror or exc}."
    if refused := claim.refusal(len(data)):
        return f"{name}: {refused.refusal}"
    return claim.settle(SharedFile(path.name, data))


def shared_or_exit(paths: list[Path], settings: Settings) -> tuple[SharedFile, ...]:
    """`ask --file`'s files, read; a path that is no file to share (or one past the files' total) ends
    the command in its sentence, exit 2 (a bad argument), before the core starts or the model is asked."""
    budget = FilesBudget(file_mb=settings.shared_file_mb, total_mb=settings.shared_files_mb)
    files = []
    for index, path in enumerate(paths):
        read = read_shared(str(path), budget, index=index)
        if isinstance(read, str):
            die(read)
        files.append(read)
    return tuple(files)


def file_control(line: str, pending: list[SharedFile], settings: Settings) -> str | None:
    """What chat says to `/file PATH` (the file then waits in `pending` for the next question); None
    when `line` is not that control. A path typed bare, quoted, or with its spaces escaped (as a
    terminal pastes a dropped file) all name the file."""
    command, _, rest = line.strip().partition(" ")
    if command != FILE_CONTROL:
        return None
    rest = rest.strip()
    if not rest:
        waiting = ", ".join(f.name for f in pending)
        return FILE_USAGE + (f" Waiting for your next question: {_shown(waiting)}." if pending else "")
    if len(pending) >= MAX_FILES:
        return f"I read at most {MAX_FILES} files shared with one question; ask it, then share more."
    held = sum(len(f.data or b"") for f in pending)  # the files already waiting count towards the total
    budget = FilesBudget(file_mb=settings.shared_file_mb, total_mb=settings.shared_files_mb, held=held)
    read = read_shared(_path_typed(rest), budget, index=len(pending))
    if isinstance(read, str):
        return read
    pending.append(read)
    return f"{printable(read.name)} ({len(read.data or b''):,} bytes) goes with your next question."


def _shown(text: str) -> str:
    """A path as a sentence shows it: its undecodable bytes read (core/text_repair.py), no controls."""
    return printable(readable(text))


def _path_typed(rest: str) -> str:
    """The path in what followed `/file`: as typed when that names a file; else the one word a shell
    would read it as (`"my sales.csv"`, `my\\ sales.csv`)."""
    if os.path.lexists(os.path.expanduser(rest)):
        return rest
    try:
        words = shlex.split(rest)
    except ValueError:  # an unclosed quote: as typed
        return rest
    return words[0] if len(words) == 1 else rest
