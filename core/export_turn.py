"""The "export this as a notebook" turn: answered by the core itself, on every surface, with no model call.

The notebook is written into the thread's workspace (`thread.ipynb`) and attached like any other file,
so each surface uploads it the way it uploads charts and CSVs.
"""

from __future__ import annotations

from core.config import Settings
from core.events import AnswerReady, ArtifactReady, EventSink
from core.notebook import NothingToExport, session_notebook
from core.sandbox import Sandbox
from core.sessions import SessionStore

NOTEBOOK_NAME = "thread.ipynb"


async def export_notebook_turn(
    *,
    settings: Settings,
    store: SessionStore,
    sandbox: Sandbox,
    session_id: str,
    turn_id: str,
    default_dataset: str | None,
    emit: EventSink,
) -> tuple[str, list]:
    """Build the thread's notebook, attach it, and answer; returns (answer, artifacts)."""
    try:
        data = await session_notebook(
            store=store,
            sandbox=sandbox,
            settings=settings,
            session_id=session_id,
            default_dataset=default_dataset,
        )
    except NothingToExport:
        answer = "There's nothing to export yet — ask me a data question in this thread first."
        await emit(AnswerReady(turn_id=turn_id, text=answer))
        return answer, []
    await sandbox.write_file(session_id, NOTEBOOK_NAME, data)
    artifact = ArtifactReady(
        turn_id=turn_id,
        session_id=session_id,
        path=NOTEBOOK_NAME,
        name=NOTEBOOK_NAME,
        title="This thread as a Jupyter notebook",
        size=len(data),
        mime="application/x-ipynb+json",
    )
    await emit(artifact)
    answer = (
        "Here is this thread as a Jupyter notebook: every query and code step in order, with the answers. "
        "Run it top to bottom with your own warehouse credentials to reproduce the files."
    )
    await emit(AnswerReady(turn_id=turn_id, text=answer))
    return answer, [artifact]
