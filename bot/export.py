"""`datathread export SESSION_ID [-o file.ipynb|-]`: a thread as a runnable Jupyter notebook.

Needs only the session store and read access to the workspace (for the charts), never a model key:
an analyst who inherits a thread can export it from any machine that shares the bot's state.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from bot.cli_common import check_output_file, names_a_folder, writing
from core.config import Settings
from core.config_types import check_writable_dir
from core.sessions import StoreUnavailable, open_store, resolve_session_id, store_exists, store_place
from core.turn_records import NothingToExport

STDOUT = Path("-")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}")  # a key that is a plain file name as it is


def where_to(raw: str | None) -> tuple[Path | None, Path]:
    """The (file, folder) `-o` names, checked before any work (one sentence, exit 2): no `-o` is the
    default name in the working directory; a folder (one that exists, or a path ending in /, as `cp`
    reads them) the default name inside it — `-o out/` wrote a file named `out`; else the file named."""
    if raw is None:
        return None, Path()
    if raw == str(STDOUT):
        return STDOUT, Path()
    if not raw.strip():
        _fail("-o is empty: name a notebook file, a folder to put it in, or - for stdout.", 2)
    path = Path(raw)
    if names_a_folder(raw):
        try:
            check_writable_dir(path)
        except ValueError as exc:
            _fail(f"{raw} {exc}.", 2)
        return None, path
    check_output_file(path)
    return path, path.parent


async def export_session(
    settings: Settings, session_id: str, output: Path | None, folder: Path = Path()
) -> Path | None:
    """Write the session's notebook to `output` and return the path, or to stdout for `-o -` (None);
    `session_id` may also be a terminal `--session` key. By default `<key>.ipynb` in `folder` (the cwd)
    for the key `chat` printed (`sales.ipynb`, not the 27-character id it stands for), else `<session
    id>.ipynb`. A missing session or store ends the command with one sentence and exit code 1."""
    if session_id.startswith("schedule:"):  # audit's records of a schedule: its notebook was Q&A of events
        _fail(
            f"{session_id} is a schedule's record of changes, not a thread: each run is a thread of its "
            "own (`datathread audit --channel CHANNEL` lists their sessions).",
            2,
        )
    try:
        resolved = await recorded_session(settings, session_id)
        from core.sandbox_factory import open_threads  # the notebook and core stacks: seconds of imports

        async with open_threads(settings) as threads:
            data = await threads.export_notebook(resolved)
    except NothingToExport as exc:
        _fail(str(exc).strip("'\""))
    except StoreUnavailable as exc:  # a setting to fix (a Redis down, a password): 2, as every command
        _fail(str(exc).strip("'\""), 2)
    if output == STDOUT:  # for a pipe (`| jq`, `> x.ipynb`): the notebook alone
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return None
    target = output or folder / f"{session_id if _FILE_NAME.fullmatch(session_id) else resolved}.ipynb"
    if output is None and not _ours_to_replace(target, resolved):
        here = "" if folder != Path() else " here"
        _fail(f"{target} already exists{here} and is not an export of this thread: name the file with -o.", 2)
    with writing(target):  # a full disk, a folder gone since the check: one sentence
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return target


async def recorded_session(settings: Settings, given: str) -> str:
    """The session id `given` names, once the store shows turns recorded under it (else NothingToExport):
    asked of the store alone, so a mistyped id is said before seconds of imports, not after them.

    The sentence names where it looked: run in another folder than the one chatted in (its own
    ./.datathread), "Session s1 has no recorded questions" suggested a session that exists, and the
    look made an empty state home there. A home that does not exist is not made: nothing is in it."""
    if not store_exists(settings):
        raise NothingToExport(given, where=store_place(settings))
    store = await open_store(settings)
    try:
        resolved = await resolve_session_id(store, given)
        if not await store.list_turns(session_id=resolved, limit=1):
            raise NothingToExport(given, where=store_place(settings))
    finally:
        await store.close()
    return resolved


def _ours_to_replace(target: Path, session_id: str) -> bool:
    """Whether the default name may be written: nothing is there, or an earlier export of this same
    thread (exporting again updates it). A short key like `sales` is a name people use for their own
    notebooks too, and one of theirs must never be overwritten by a command they gave no file name."""
    if not target.exists():
        return True
    try:
        with target.open("rb") as existing:
            head = existing.read(4096)
    except OSError:
        return False
    return f"datathread thread `{session_id}`".encode() in head


def _fail(message: str, code: int = 1) -> None:
    Console(stderr=True, soft_wrap=True).print("[red]error:[/] " + escape(message))
    raise typer.Exit(code)
