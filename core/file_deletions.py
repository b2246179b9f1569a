"""A file deleted where it was shared is deleted from every thread that took a copy of it.

A person who deletes a file in Slack expects it gone; the bot's copy in a thread's workspace lived on
until the thread was idle for DATATHREAD_HISTORY_TTL_DAYS, and a follow-up still read it. A surface
fetches a shared file outside the core and the intake names its copy (core/file_intake.py), so
neither alone knows which thread holds which platform file. Hence one small index in the session
store, written when the surface has fetched a file (`fetched`): a record per platform file (KIND,
id `slack:F…`) naming each thread that took it, with the person's name for it and its size. When the
platform says the file is gone (`deleted`), each such thread, under its session lock (never under a
running turn), loses the copies: the intake's steps in its turn records say which workspace file came
from that name (`people.csv`, or `people-2.csv` beside another file of that name; its size tells them
apart) and what was made of it (a CSV's UTF-8 copy, a workbook's Parquet file). They are deleted by a
step in the session's own workspace, the same locally and on Modal; the thread's meta drops them from
its shared names and keeps them as untold (UNTOLD_KEY), and its saved history forgets what came
from them (`scrubbed`: the intake's description of the file, with its first rows, as its one line of
names and row counts; the results of steps that named a copy). That thread's next turn tells the model, in
its question, that the file was deleted and is gone (`tell`), so a follow-up that names it hears so
instead of an answer from a copy; said once, it stays in that turn's history.

The index records have no expiry of their own (a file deleted a year on is still found): each is a
few ids and a name, dropped when its file is deleted; a thread leaves them when it is forgotten or
reset (`forget_shared_files`), and threads older than KEEP_S are dropped by `fetched` and by the
hourly sweep (`expire_index`), which deletes a record left with none. Each record is changed under
its file's lock (`index_lock`), never read and written back unguarded.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping

from core.history import shared_files_line
from core.sandbox import Sandbox, StepRequest
from core.sessions import LockTimeout, SessionStore, StoreUnavailable
from core.shared_files import is_intake_block
from core.shared_names import INTAKE_TOOL, META_KEY, named_in, shared_in

log = logging.getLogger("datathread.intake")

KIND = "shared_file"  # store records: a platform file id → the threads holding a copy
UNTOLD_KEY = "deleted_files"  # in a session's meta: names of its files deleted since its last turn
KEEP_S = 400 * 86_400  # a thread not seen in the index's record for this long is dropped from it
INDEX_WAIT_S = 30.0  # another process's update of one file's record takes milliseconds
LOCK_WAIT_S = 900.0  # a running turn finishes first (its lock), however long
MAX_NAMES = 50
STEP_TIMEOUT_S = 30.0
REMOVE = """
import json, os
gone = []
for name in json.loads({names!r}):
    try:
        os.remove(name)
        gone.append(name)
    except FileNotFoundError:
        pass
print(json.dumps(gone))
"""
GONE_RESULT = "(Removed: this step read a shared file that has since been deleted.)"
TOLD = (
    "(Deleted by the people who shared them, after they were shared here, and removed from this "
    "thread's workspace: {names}. Their contents are gone; if asked about them, say they were deleted "
    "and can be shared again. Nothing earlier in this thread about them can be used.)"
)


@dataclasses.dataclass
class FileDeletions:
    """The index of shared files and what a deletion does to the threads that hold them."""

    store: SessionStore
    sandbox: Sandbox

    async def fetched(self, file_key: str, session_id: str, *, name: str, size: int | None) -> None:
        """`file_key` (`slack:F…`) was fetched for a turn of `session_id`, shared as `name`. Under the
        file's own lock: two threads fetching one file at once each read the record, and the second
        write dropped the first one's thread, whose copy then outlived the file's deletion."""
        async with self.store.lock(index_lock(file_key), ttl_s=30, wait_s=INDEX_WAIT_S):
            record = await self.store.get_record(KIND, file_key) or {"id": file_key, "threads": {}}
            now = time.time()
            threads = current(record, now)
            names = [n for n in (threads.get(session_id) or {}).get("names", []) if n != name]
            sizes = [s for s in (threads.get(session_id) or {}).get("sizes", []) if s != size]
            threads[session_id] = {"names": [*names, name], "sizes": [*sizes, size], "at": now}
            await self.store.put_record(KIND, file_key, {"id": file_key, "threads": threads})

    async def deleted(self, file_key: str) -> list[str] | None:
        """The file is gone where it was shared: its copies go from every thread that holds one.
        Returns the sessions whose workspace lost a copy; None when a thread's copy could not go (a
        turn held it past LOCK_WAIT_S, the store or the sandbox failed): the record keeps what is
        left, for the caller to try again (bot/slack_file_deleted.py re-queues the job)."""
        record = await self.store.get_record(KIND, file_key)
        if not record:  # never fetched here — or fetched before this index existed (an upgrade): say so
            log.info(
                "deleted file %s: no thread is known to hold a copy (copies taken before the index, by "
                "releases before it, stay until their workspace expires; `datathread forget --thread` "
                "removes one now)",
                file_key,
            )
            return []
        cleaned, done = [], []
        for session_id, held in (record.get("threads") or {}).items():
            if not isinstance(held, dict):
                continue
            try:
                if await self._drop(session_id, held.get("names") or [], held.get("sizes") or []):
                    cleaned.append(session_id)
                done.append(session_id)
            except (LockTimeout, StoreUnavailable, OSError) as exc:
                log.warning("deleted file %s: its copy in %s is still there: %s", file_key, session_id, exc)
                await drop_threads(self.store, file_key, set(done))
                return None
        await drop_threads(self.store, file_key, set(done))
        log.info("deleted file %s: removed from %d thread(s)", file_key, len(cleaned))
        return cleaned

    async def _drop(self, session_id: str, names: list[str], sizes: list) -> bool:
        async with self.store.lock(session_id, ttl_s=60, wait_s=LOCK_WAIT_S):
            meta = await self.store.get_meta(session_id) or {}
            turns = await self.store.list_turns(session_id=session_id)
            listed = {f["path"]: f.get("size") for f in await self.sandbox.list_files(session_id)}
            copies = copies_of(turns, names, sizes, listed, shared_in(meta))
            if not copies:
                return False
            step = StepRequest(
                kind="python",
                session_id=session_id,
                code=REMOVE.format(names=json.dumps(sorted(copies))),
                timeout_s=STEP_TIMEOUT_S,
            )
            result = await self.sandbox.run(step)
            if not result.ok:
                raise OSError(result.error[:200] or "the step failed")
            history = await self.store.load_history(session_id)
            if (kept := scrubbed(history, copies)) != history:
                await self.store.save_history(session_id, kept)
            shared = [n for n in shared_in(meta) if n not in copies]
            untold = [*(meta.get(UNTOLD_KEY) or []), *names][-MAX_NAMES:]
            await self.store.update_meta(session_id, **{META_KEY: shared, UNTOLD_KEY: untold})
            return True

    async def tell(self, session_id: str, meta: Mapping | None) -> list[dict]:
        """For a turn holding the session's lock: the question's note of files deleted since the last
        turn ([] when none), then cleared in the meta (the note stays in this turn's history)."""
        names = [n for n in (meta or {}).get(UNTOLD_KEY) or [] if isinstance(n, str)]
        if not names:
            return []
        await self.store.update_meta(session_id, **{UNTOLD_KEY: []})
        quoted = ", ".join(json.dumps(n) for n in dict.fromkeys(names))
        return [{"type": "text", "text": TOLD.format(names=quoted)}]


def copies_of(
    turns: list[dict],
    names: list[str],
    sizes: list,
    listed: Mapping[str, object],
    shared: tuple[str, ...],
) -> set[str]:
    """The workspace files made from a shared file known by `names` (and `sizes`, as the platform
    stated them): each intake step that took in one of those names, whose copy is still there with
    that size (or with any size, when the platform stated none), and the files made of it. Without a
    turn record (expired), a shared name equal to the person's name."""
    wanted = {n for n in names}
    known = {s for s in sizes if isinstance(s, int)}
    copies: set[str] = set()
    for turn in turns:
        for step in turn.get("steps") or []:
            if not isinstance(step, Mapping) or step.get("tool") != INTAKE_TOOL:
                continue
            given = step.get("input") or {}
            path = given.get("path")
            if given.get("shared_as") not in wanted or path not in listed:
                continue
            if known and listed[path] not in known:  # another file of the same name
                continue
            copies |= {f for f in step.get("files") or [path] if isinstance(f, str)}
    if not copies:
        copies = {n for n in shared if n in wanted and n in listed}
    return copies


def scrubbed(messages: list[dict], copies: set[str]) -> list[dict]:
    """A saved history without the values that came from `copies`: each shared-files block naming one
    as its one line (names and row counts: core/history.py), each result of a step whose input names
    one as GONE_RESULT. What the answers themselves said stays: they are the thread's, as posted."""
    used: set[str] = set()
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        blocks = []
        for block in content:
            kind, text = block.get("type"), str(block.get("text") or "")
            if kind == "text" and is_intake_block(text) and named_in([text], copies):
                block = {**block, "text": shared_files_line(text)}
            elif kind == "tool_use" and named_in([json.dumps(block.get("input"))], copies):
                used.add(str(block.get("id")))
            elif kind == "tool_result" and str(block.get("tool_use_id")) in used:
                block = {**block, "content": GONE_RESULT}
            blocks.append(block)
        out.append({**message, "content": blocks})
    return out


def index_lock(file_key: str) -> str:
    """The lock name of one file's index record (session ids never start so)."""
    return f"file:{file_key}"


def current(record: Mapping, now: float) -> dict:
    """The record's threads seen within KEEP_S."""
    return {
        sid: held
        for sid, held in (record.get("threads") or {}).items()
        if isinstance(held, dict) and now - float(held.get("at") or 0) < KEEP_S
    }


async def drop_threads(store: SessionStore, file_key: str, session_ids: set[str] | None = None) -> None:
    """Take these threads (None: only those older than KEEP_S) out of one file's record, under its
    lock; the record goes when none is left."""
    async with store.lock(index_lock(file_key), ttl_s=30, wait_s=INDEX_WAIT_S):
        record = await store.get_record(KIND, file_key)
        if record is None:
            return
        threads = {s: h for s, h in current(record, time.time()).items() if s not in (session_ids or ())}
        if not threads:
            await store.delete_record(KIND, file_key)
        elif threads != record.get("threads"):
            await store.put_record(KIND, file_key, {"id": file_key, "threads": threads})


async def forget_shared_files(store: SessionStore, session_ids: Iterable[str]) -> None:
    """Forgotten or reset threads leave the index: they hold no copy any more, and their ids (with the
    people's names for the files) are not kept past them."""
    gone = set(session_ids)
    for record in await store.list_records(KIND) if gone else []:
        if gone & set(record.get("threads") or {}):
            await drop_threads(store, str(record.get("id")), gone)


async def expire_index(store: SessionStore) -> int:
    """The hourly sweep: threads older than KEEP_S leave every record, and empty records go; how many
    records were looked at."""
    records = await store.list_records(KIND)
    for record in records:
        if current(record, time.time()) != (record.get("threads") or {}):
            await drop_threads(store, str(record.get("id")))
    return len(records)
