"""A file deleted in Slack leaves the threads that took a copy of it (core/file_deletions.py).

When a turn has fetched the files shared with it, each fetched file's id is noted with its thread
(`note_fetched`); Slack's `file_deleted` event (https://docs.slack.dev/reference/events/file_deleted:
the file's id alone, scope `files:read`, which reading shared files needs already) becomes a job that
removes the copies from every such thread (`drop_deleted`), after the ack, where turns run.

Not subscribed: `file_unshared` (the file is taken out of one conversation but still exists, and the
people who shared it can still see it: a thread's copy is no more than they gave) and `file_change`
(an edited file: the copy is the one asked about). Slack sends no event for a file its workspace's
retention policy deletes; nor does a deletion while the bot is unreachable arrive once its retries are
over — those copies go with the thread's workspace (DATATHREAD_HISTORY_TTL_DAYS idle). Asking
`files.info` before every turn would catch them, at a Web API call per shared file per follow-up
(a second or so before each answer on a slow Slack, and a share of the workspace's rate limit):
docs/SLACK.md says why that is not done.
"""

from __future__ import annotations

import logging

from bot.slack_shared_files import display_name
from bot.surface import AppState
from core.events import SharedFile
from core.runner import TurnJob
from core.sessions import StoreUnavailable

log = logging.getLogger("datathread.slack")

JOB_FILE_DELETED = "slack.file_deleted"
TRIES = 3  # a job's runs in all, for one deletion


def file_key(file_id: str) -> str:
    """A Slack file's name in the core's index (file ids are unique across workspaces: F…)."""
    return f"slack:{file_id}"


async def note_fetched(
    state: AppState, session_id: str, refs: list[dict], files: tuple[SharedFile, ...]
) -> None:
    """Each file fetched for a turn of `session_id`, noted with it (`refs` and `files` in the same
    order, as `fetch_shared_files` returns them). A store that fails here costs the note, not the turn:
    that copy then goes only when the thread's workspace does."""
    for ref, shared in zip(refs, files, strict=False):
        if shared.data is None or not ref.get("id"):
            continue
        size = ref.get("size") if isinstance(ref.get("size"), int) else None
        try:
            await state.analyst.file_deletions.fetched(
                file_key(str(ref["id"])), session_id, name=shared.name or display_name(ref), size=size
            )
        except StoreUnavailable as exc:
            log.warning("slack: file %s not noted for %s: %s", ref["id"], session_id, exc)


async def drop_deleted(state: AppState, p: dict) -> None:
    """The job of a `file_deleted` event: the file's copies leave every thread that took one. When one
    could not go (a turn held its thread past the wait, the store or the sandbox failed), the job is
    queued again, up to TRIES in all: it runs after the ack, so Slack never sends the event again (the
    record alone stayed, and nothing came back to it)."""
    file_id = str(p.get("file_id") or "")
    if not file_id:
        return
    try:
        left = await state.analyst.file_deletions.deleted(file_key(file_id)) is None
    except StoreUnavailable as exc:  # the index itself could not be read
        log.warning("slack: deleted file %s: %s", file_id, exc)
        left = True
    tries = int(p.get("tries") or 1)
    if not left:
        return
    if tries >= TRIES:
        log.warning(
            "slack: deleted file %s: copies are left after %d tries; they go with their threads' workspaces",
            file_id,
            tries,
        )
        return
    await state.runner.submit(
        TurnJob(kind=JOB_FILE_DELETED, payload={"file_id": file_id, "tries": tries + 1})
    )
