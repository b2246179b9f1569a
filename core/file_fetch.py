"""When the files shared with a Slack or Teams message are fetched: by the core, once the turn's turn
has come, through the surface's own `FileFetcher`.

Only the surface can fetch them (it holds the token and knows its platform's links), but a download
may take minutes (Slack's bound is 120 s, Teams' 180 s). Fetched before the turn joined its thread's
queue for the session lock (core/lock_queue.py), a follow-up sent meanwhile ("now by region") reached
the queue first and was answered first, without the file; and a person refused by their hourly limit
or daily budget still had the bot download 200 MB. So a surface hands `Analyst.handle` the fetch, not
the bytes, and the core calls it when the turn holds its lock and a turn slot, after the access rules,
the limits and the budget said yes. The turn keeps its place in the queue from the moment it arrives;
a message's bytes are held only by a running turn (so at most DATATHREAD_MAX_CONCURRENT_TURNS messages'
worth at once), and only until the core has written them into the workspace.

A callable beside the message, as `Confirmer` is, not a field of `IncomingMessage`: the message is
plain data (logged, compared, recorded with the turn), and the fetch is the surface's live client.

A surface passes a fetch only when some file might be one the bot reads; files it refuses by name (a
screenshot) come on the message, without bytes. Only a file that may be read makes a message a
question about its files (`may_read`): `help` with a screenshot is the help, not a model call, and the
screenshot's refusal is said with it (`say_unread`).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from core.agent import TurnAborted
from core.events import (
    EventSink,
    FileFetcher,
    IncomingMessage,
    NobodyListening,
    SharedFile,
    Thinking,
    TurnNote,
)
from core.file_intake import FILES_ONLY, not_read

log = logging.getLogger("datathread.intake")

FETCH_FAILED_NAME = "the shared files"
FETCH_FAILED = "Something went wrong on my side while fetching them."


def may_read(message: IncomingMessage, fetch: FileFetcher | None) -> bool:
    """Whether a file shared with the message may be read: one still to fetch, or one in hand with
    its bytes. Files all refused already are no question of their own."""
    return fetch is not None or any(f.data is not None for f in message.files)


def question_of(message: IncomingMessage, *, readable: bool) -> IncomingMessage:
    """The message as its turn asks it: files without words are a question too, whether they are in
    hand or still to be fetched, when one may be read (`readable`: `may_read`)."""
    if readable and not message.text.strip():
        return replace(message, text=FILES_ONLY)
    return message


async def say_unread(message: IncomingMessage, turn_id: str, emit: EventSink) -> None:
    """Each refused file of a message no turn reads files for (`help`, an export), said as the intake
    says it (core/file_intake.py): the person is not left to guess why their file went unmentioned."""
    for shared in message.files:
        if shared.data is None:
            why = shared.refusal or "It could not be fetched."
            await emit(TurnNote(turn_id=turn_id, text=not_read(shared.name, why)))


async def fetch_now(fetch: FileFetcher, turn_id: str, emit: EventSink) -> tuple[SharedFile, ...]:
    """The files, fetched now. `Thinking` goes first: the surfaces show the turn at work (a turn that
    waited for the thread's previous one waits no more) while the surface's fetch says what it fetches
    its own way (Slack's status "is fetching sales.csv…", Teams' typing). A sink that nobody reads any
    more stops the turn before the download, as it does before a model call. A fetch that raises (a
    bug: a fetch says why for each file) is one refused entry and a log line, not the turn's end."""
    try:
        await emit(Thinking(turn_id=turn_id))
    except NobodyListening as exc:
        raise TurnAborted(str(exc)) from None
    try:
        return tuple(await fetch())
    except Exception:
        log.exception("turn %s: the surface could not fetch the shared files", turn_id)
        return (SharedFile(FETCH_FAILED_NAME, refusal=FETCH_FAILED),)
