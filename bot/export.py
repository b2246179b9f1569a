"""`datathread export SESSION_ID [-o file.ipynb]`: a thread as a runnable Jupyter notebook.

Needs only the session store and read access to the workspace (for the charts), never a model key:
an analyst who inherits a thread can export it from any machine that shares the bot's state.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer
from rich.console import Console

from core.config import Settings
from core.notebook import NothingToExport, session_notebook
from core.sandbox import is_valid_session_id
from core.sessions import SessionStore, StoreUnavailable, open_store, session_id_for


async def resolve_session_id(store: SessionStore, given: str) -> str:
    """The session id `given` names: a full session id that has turns, else the terminal session of that
    `--session` key (`datathread chat`/`ask` print the key), so either works wherever an id is asked."""
    valid = is_valid_session_id(given)
    if valid and await store.list_turns(session_id=given, limit=1):
        return given
    terminal = session_id_for("terminal", (given,))
    if not valid or await store.list_turns(session_id=terminal, limit=1):
        return terminal
    return given


async def export_session(settings: Settings, session_id: str, output: Path | None) -> Path:
    """Write the session's notebook to `output` (default `<session_id>.ipynb` in the cwd) and return
    the path; `session_id` may also be a terminal `--session` key. A missing session or store ends the
    command with one sentence and exit code 1."""
    sandbox = _file_reader(settings)
    try:
        store = await open_store(settings)
        try:
            session_id = await resolve_session_id(store, session_id)
            target = output or Path(f"{session_id}.ipynb")
            data = await session_notebook(
                store=store,
                sandbox=sandbox,
                settings=settings,
                session_id=session_id,
                default_dataset=_default_dataset(settings),
            )
        finally:
            await store.close()
    except (NothingToExport, StoreUnavailable) as exc:
        _fail(str(exc).strip("'\""))
    finally:
        with contextlib.suppress(Exception):
            await sandbox.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


def _file_reader(settings: Settings):
    """A sandbox client used only to read files: the local one is never started (no fork server)."""
    if settings.sandbox == "modal":
        from core.sandbox_modal import ModalSandbox

        return ModalSandbox.from_settings(settings)
    from core.sandbox_local import LocalSandbox

    return LocalSandbox(workspaces=settings.workspaces_dir)


def _default_dataset(settings: Settings) -> str | None:
    """The BigQuery dataset bare table names resolve in, qualified as the warehouse qualifies it."""
    dataset = (getattr(settings, "bigquery_default_dataset", None) or "").strip().strip("`")
    if settings.warehouse != "bigquery" or not dataset:
        return None
    return dataset if "." in dataset or not settings.gcp_project else f"{settings.gcp_project}.{dataset}"


def _fail(message: str) -> None:
    Console(stderr=True).print(f"[red]error:[/] {message}")
    raise typer.Exit(1)
