"""`datathread export SESSION_ID [-o file.ipynb]`: a thread as a runnable Jupyter notebook.

Needs only the session store and read access to the workspace (for the charts), never a model key:
an analyst who inherits a thread can export it from any machine that shares the bot's state.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from bot.cli_common import writing
from core.config import Settings
from core.notebook import NothingToExport
from core.sandbox_factory import open_threads
from core.sessions import StoreUnavailable


async def export_session(settings: Settings, session_id: str, output: Path | None) -> Path:
    """Write the session's notebook to `output` (default `<session_id>.ipynb` in the cwd) and return
    the path; `session_id` may also be a terminal `--session` key. A missing session or store ends the
    command with one sentence and exit code 1."""
    try:
        async with open_threads(settings) as threads:
            session_id = await threads.resolve_session_id(session_id)
            target = output or Path(f"{session_id}.ipynb")
            data = await threads.export_notebook(session_id)
    except (NothingToExport, StoreUnavailable) as exc:
        _fail(str(exc).strip("'\""))
    with writing(target):  # a full disk, a folder gone since the check: one sentence
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return target


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/] {message}")
    raise typer.Exit(1)
