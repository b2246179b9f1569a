"""The thread seam: everything a surface may do to a conversation besides `Analyst.handle`.

Slack, Teams, the terminal and the CLI translate platform payloads and draw events; whatever touches
the session store, the workspaces, the verified-query library or the access policy goes through here,
so a surface never reaches into the core's parts (tests/test_architecture.py holds that line). Every
method works across replicas: state lives in the shared store and the workspaces, not in this object.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from core import history as hist
from core.access import AccessPolicy
from core.config import Settings
from core.confirm import CONFIRM_TIMEOUT_S, ask, give_answer, wait_for_answer
from core.csv_cells import for_people
from core.events import AnswerReady, ArtifactReady, EventSink, IncomingMessage
from core.forget import forget_for_reset
from core.help import fresh_start
from core.history_gap import gap_note
from core.notebook import session_notebook
from core.sandbox import WorkspaceFull, is_valid_session_id
from core.schedules import Clock, utc_now
from core.schedules_store import ScheduleBook
from core.sessions import LockTimeout, SessionStore, StoreUnavailable, resolve_session_id, session_id_for
from core.thread_files import after_sweep
from core.turn_records import NothingToExport
from core.verified import VerifiedLibrary
from core.warehouse import Warehouse
from core.workspace_retention import delete, idle_workspaces, is_idle, set_aside

# what the platform says of a person (time zone, team, guest) is asked at most once a day
PERSON_TTL_S = 86400.0
NOTE_TTL_S = 86400.0  # how long a job's note (where its answer goes) is kept for its lost handler
IDLE_RESET_S = 8 * 3600  # a chat idle this long starts a fresh conversation (next generation)
NOTEBOOK_NAME = "thread.ipynb"  # what an exported notebook is called, from a button or a question
NOTEBOOK_TITLE = "This thread as a Jupyter notebook"
CONFIRM_NOT_YOURS = "Only the person who asked (or an admin) can answer this."
CONFIRM_EXPIRED = "That question has already been answered or has expired."
NOTHING_TO_EXPORT = "There's nothing to export yet — ask me a data question in this thread first."
EXPORTED = (
    "Here is this thread as a Jupyter notebook: every query and code step in order, with the answers. "
    "Run it top to bottom with your own warehouse credentials to reproduce the files."
)


class ConfirmAnswer(enum.Enum):
    """What the person clicked on a Run/Cancel question."""

    RUN = "run"
    CANCEL = "cancel"


class ConfirmResult(enum.Enum):
    """What became of a click: taken, too late (someone else answered or it expired), or refused."""

    TAKEN = "ok"
    ALREADY_ANSWERED = "answered"
    NOT_YOURS = "not yours"


class WorkspaceFiles(Protocol):
    """The part of a sandbox the seam needs: a session's files (no code runs through here)."""

    async def read_file(self, session_id: str, path: str) -> bytes: ...

    async def write_file(self, session_id: str, path: str, data: bytes) -> None: ...

    async def list_files(self, session_id: str) -> list[dict]: ...


KEPT_SECRET_TTL_S = 10 * 365 * 86_400  # a kept secret lives as long as the store does, in practice


@dataclass
class Threads:
    """Conversation operations for surfaces, over one store and one set of workspaces."""

    settings: Settings
    _store: SessionStore
    _files: WorkspaceFiles
    _access: AccessPolicy
    _verified: VerifiedLibrary | None = None
    _warehouse: Warehouse | None = None
    _default_dataset: str | None = None  # where an exported notebook's bare BigQuery names resolve
    _ping: asyncio.Task | None = None  # the store check in flight, shared by /healthz calls meanwhile

    def __post_init__(self) -> None:
        if (
            self._default_dataset is None
            and self._warehouse is not None
            and self.settings.warehouse == "bigquery"
        ):
            self._default_dataset = self._warehouse.default_dataset

    # --- health ------------------------------------------------------------------------------------
    async def store_reachable(self, *, timeout_s: float) -> bool:
        """Whether the session store answers one cheap call (PING, SELECT 1) within `timeout_s`: for
        `/healthz`, which a load balancer may call every few seconds and must never hang."""
        if self._ping is None or self._ping.done():
            self._ping = asyncio.ensure_future(self._store.ping())
            self._ping.add_done_callback(lambda t: t.cancelled() or t.exception())  # seen, if no one waits
        try:  # callers that give up leave the one check running: a burst of probes holds one thread,
            await asyncio.wait_for(asyncio.shield(self._ping), timeout_s)  # not one each
        except (StoreUnavailable, TimeoutError):
            return False
        return True

    async def kept_secret(self, name: str) -> bytes:
        """A random secret every process of this bot shares through the session store: made by the first
        that asks, kept for years (SET NX, so two asking at once agree). The web process and its turn
        workers sign and check each other's download links with it, and links outlive a restart; with
        Redis, every replica shares it. Whoever can read the store can read what the links serve."""
        key = f"secret:{name}"
        await self._store.set_once(key, secrets.token_urlsafe(32), ttl_s=KEPT_SECRET_TTL_S)
        kept = await self._store.get_value(key)
        if not kept:  # expired between the two calls, after years: the next call makes a new one
            raise StoreUnavailable(f"the kept secret {name!r} could not be read back")
        return kept.encode()

    # --- incoming events ---------------------------------------------------------------------------
    async def claim(self, key: str, *, ttl_s: float = 3600.0) -> bool:
        """True the first time `key` (a platform event or message id) is seen within `ttl_s`, across
        replicas and retries; False for a duplicate that must be dropped."""
        return await self._store.first_seen(key, ttl_s=ttl_s)

    async def is_known(self, surface: str, thread_key: tuple[str, ...]) -> bool:
        """True when datathread has already taken part in this thread."""
        return await self._store.get_meta(session_id_for(surface, thread_key)) is not None

    async def follows_up(self, surface: str, thread_key: tuple[str, ...], user_id: str) -> bool:
        """True when a message without a mention is a follow-up for datathread: it has taken part in
        this thread and this person has asked it something there. Anyone's reply counted: a
        colleague's "thanks, that's great!" under an answer started a paid turn ("You're welcome!")."""
        meta = await self._store.get_meta(session_id_for(surface, thread_key))
        return meta is not None and user_id in (meta.get("participants") or [])

    async def joined(self, surface: str, thread_key: tuple[str, ...], user_id: str) -> None:
        """This person asked datathread something in this thread (a mention): their next messages there
        follow up — from now, not from when their turn starts (a follow-up typed meanwhile was dropped)."""
        await self._store.update_meta(
            session_id_for(surface, thread_key), surface=surface, participant=user_id
        )

    async def current_key(
        self, surface: str, base: tuple[str, ...], *, idle_reset: bool, now: float | None = None
    ) -> tuple[str, ...]:
        """The session key of a chat that can be reset: `base` plus its generation; with `idle_reset`,
        a chat idle for IDLE_RESET_S moves on to a fresh generation."""
        generation = await self._generation(surface, base)
        key = _generation_key(base, generation)
        if idle_reset:
            session = await self._store.get_meta(session_id_for(surface, key))
            if session and (now or time.time()) - float(session.get("updated", 0)) > IDLE_RESET_S:
                key = _generation_key(base, await self._next_generation(surface, base))
        return key

    async def reset(self, surface: str, base: tuple[str, ...], *, delete: bool = True) -> str:
        """`reset`: a fresh session; with `delete` (a direct chat) the old one's history and files go."""
        old = session_id_for(surface, _generation_key(base, await self._generation(surface, base)))
        await self._next_generation(surface, base)
        gone = delete and await forget_for_reset(self._store, self.settings, old)
        return fresh_start(self.settings, deleted=delete, files_gone=gone)

    async def _next_generation(self, surface: str, base: tuple[str, ...]) -> int:
        generation = await self._generation(surface, base) + 1
        await self._store.update_meta(_pointer_id(surface, base), generation=generation, surface=surface)
        return generation

    async def _generation(self, surface: str, base: tuple[str, ...]) -> int:
        meta = await self._store.get_meta(_pointer_id(surface, base)) or {}
        return int(meta.get("generation", 0))

    async def person(self, key: str, lookup: Callable[[], Awaitable[dict | None]]) -> dict | None:
        """What the platform says of a person (time zone, team, guest or not), kept a day as a time
        zone is: one lookup serves the time zone and the access rules; `lookup` returns None when the
        platform could not say (not kept, and None here)."""
        cached = await self._store.get_value(f"person:{key}")
        if cached is not None:
            with contextlib.suppress(ValueError):
                return json.loads(cached)
        said = await lookup()
        if said is not None:
            await self._store.set_once(f"person:{key}", json.dumps(said), ttl_s=PERSON_TTL_S)
        return said

    async def note(self, key: str, value: str, *, ttl_s: float = NOTE_TTL_S) -> None:
        """Keep one small fact about a running job for whoever handles it if its worker dies (e.g. the
        thread a slash command's answer goes to), across processes and replicas; the first note stays."""
        await self._store.set_once(f"note:{key}", value, ttl_s=ttl_s)

    async def noted(self, key: str) -> str | None:
        """The fact `note` kept under `key`, or None."""
        return await self._store.get_value(f"note:{key}")

    # --- files --------------------------------------------------------------------------------------
    async def history(self, session_id: str) -> tuple[list[dict], list[dict]]:
        """The thread's saved history, repaired, and for a thread whose history the store let go the
        note its next question carries (core/history_gap.py; [] otherwise). Before the turn updates
        the thread's metadata and records."""
        prior = hist.repair(await self._store.load_history(session_id))
        days = self.settings.history_ttl_days
        return prior, [] if prior else await gap_note(self._store, self._files, session_id, ttl_days=days)

    async def read_file(self, session_id: str, path: str) -> bytes:
        """A workspace file's bytes, as they may go to people (raises FileNotFoundError/PermissionError/
        ValueError when not there, or when a CSV cannot be made safe)."""
        data = await self._files.read_file(session_id, path)
        return await asyncio.to_thread(for_people, path, data)  # a 50 MB CSV takes a second or two

    async def read_artifact(self, artifact: ArtifactReady) -> bytes:
        """The bytes of a file a turn attached, for surfaces that upload it."""
        data = await self._files.read_file(artifact.session_id, artifact.path)
        return await asyncio.to_thread(for_people, artifact.path, data)

    async def forget_idle_workspaces(
        self,
        *,
        root: Path | None = None,
        publish: Callable[[], Awaitable[None]] | None = None,
        now: float | None = None,
    ) -> list[str]:
        """Remove the workspaces nobody has written to for DATATHREAD_HISTORY_TTL_DAYS and whose
        history the store no longer keeps (core/workspace_retention.py); returns their session ids.
        Each is checked again under its session lock (taken without waiting: a thread in use is
        skipped) and renamed out of the way before it is deleted.

        Without `root`, the local workspaces (none on Modal). With it, a mounted Modal Volume, and
        `publish` commits it after each renaming, before the lock is let go: a step of that thread
        starting afterwards in another container reloads a Volume without the folder, instead of
        writing into a folder a later commit of this container removes."""
        if root is None:
            if self.settings.sandbox != "local":  # Modal's are in its Volume, swept by its own function
                return []
            root = self.settings.workspaces_dir
        idle_s = self.settings.history_ttl_days * 86_400
        now = now or time.time()
        removed = []
        for session_id in await asyncio.to_thread(idle_workspaces, root, idle_s=idle_s, now=now):
            try:
                async with self._store.lock(session_id, ttl_s=60, wait_s=0):
                    if await self._store.load_history(session_id):  # still a conversation
                        continue
                    if not await asyncio.to_thread(is_idle, root, session_id, idle_s=idle_s, now=now):
                        continue
                    aside = await asyncio.to_thread(set_aside, root, session_id)
                    if aside is not None and publish is not None:
                        await publish()
            except LockTimeout:  # a turn of it is running
                continue
            if aside is not None and await asyncio.to_thread(delete, aside):
                removed.append(session_id)
        await after_sweep(self.settings, removed, idle_s, now, self._store.load_history)  # their other files
        return removed

    async def forget_expired(self) -> int:
        """What the store keeps past its time and does not drop by itself: gone (core/store_retention.py)."""
        return await self._store.purge_expired()

    async def list_tables(self) -> list[dict]:
        """The tables people may ask about by default (App Home, help), or [] without a warehouse."""
        if self._warehouse is None:
            return []
        return await self._warehouse.list_tables(self._access.datasets)

    def refused(self, who: IncomingMessage) -> str | None:
        """Why `who` may not ask here (the sentence for them), or None: the rules a question meets,
        for what is done with an answer — its buttons and cards skipped them, so a person outside the
        allowlists saw its SQL, saved verified queries for everyone and exported the thread."""
        return self._access.check(who)

    # --- recorded turns -----------------------------------------------------------------------------
    async def turn(self, turn_id: str, *, channel_id: str) -> dict | None:
        """A recorded turn (its question, steps and answer) when it belongs to this channel, else None:
        a button or card can never show another conversation's turn."""
        record = await self._store.get_turn(turn_id)
        if record is None or record.get("channel_id") != channel_id:
            return None
        return record

    async def vote(self, turn: dict, *, user_id: str, value: Literal["up", "down"]) -> str:
        """A 👍/👎 on a recorded turn: recorded as feedback; a 👍 saves a verified query (an admin's
        counts as verified by an admin), a 👎 asks what was wrong — and the voter's reply in the thread,
        without a mention, is that answer: they take part in the thread from now (`follows_up`)."""
        await self._store.set_feedback(turn["turn_id"], user_id=user_id, value=value)
        if value == "down" and turn.get("session_id"):
            await self._store.update_meta(turn["session_id"], participant=user_id)
        if self._verified is None:
            return "Thanks for the feedback."
        admin = self._access.is_admin(user_id)
        return await self._verified.vote(
            turn, user_id=user_id, value="verify" if admin and value == "up" else value, is_admin=admin
        )

    async def export_notebook(self, session_id: str, *, save_as: str | None = None) -> bytes:
        """The thread as a Jupyter notebook; with `save_as`, also written into the thread's workspace
        (to attach or link it). Raises NothingToExport (a LookupError with one sentence) when empty."""
        data = await session_notebook(
            store=self._store,
            sandbox=self._files,
            settings=self.settings,
            session_id=session_id,
            default_dataset=self._default_dataset,
        )
        if save_as:
            await self._files.write_file(session_id, save_as, data)
        return data

    async def export_turn(self, session_id: str, turn_id: str, emit: EventSink) -> str:
        """The "export this as a notebook" turn, on every surface and with no model call: the notebook is
        written into the workspace and attached like any chart or CSV; returns the answer."""
        try:
            data = await self.export_notebook(session_id, save_as=NOTEBOOK_NAME)
        except NothingToExport:
            await emit(AnswerReady(turn_id=turn_id, text=NOTHING_TO_EXPORT))
            return NOTHING_TO_EXPORT
        except WorkspaceFull as exc:
            await emit(AnswerReady(turn_id=turn_id, text=str(exc)))
            return str(exc)
        await emit(
            ArtifactReady(
                turn_id=turn_id,
                session_id=session_id,
                path=NOTEBOOK_NAME,
                name=NOTEBOOK_NAME,
                title=NOTEBOOK_TITLE,
                size=len(data),
                mime="application/x-ipynb+json",
            )
        )
        await emit(AnswerReady(turn_id=turn_id, text=EXPORTED))
        return EXPORTED

    async def resolve_session_id(self, given: str) -> str:
        """The session id `given` names (a session id, or a terminal `--session` key)."""
        return await resolve_session_id(self._store, given)

    async def terminal_key(self, given: str) -> tuple[str, ...] | None:
        """The thread key of the terminal session `given` names — its `--session` key, or its full id
        as `audit` prints it — or None when there is none in this store yet (`chat`/`ask --session`
        say so, where a mistyped key silently started an empty conversation)."""
        if await self.is_known("terminal", (given,)):
            return (given,)
        if given.startswith("te-") and is_valid_session_id(given):
            meta = await self._store.get_meta(given) or {}
            key = tuple(str(part) for part in meta.get("thread_key") or ())
            if key and session_id_for("terminal", key) == given:
                return key
        return None

    # --- confirmations ------------------------------------------------------------------------------
    async def await_confirmation(
        self,
        token: str,
        *,
        asker: str,
        show: Callable[[], Awaitable[bool]],
        timeout_s: float = CONFIRM_TIMEOUT_S,
    ) -> bool | None:
        """Record who may answer, `show()` the Run/Cancel question (False: it could not be shown, so
        nothing runs), then wait: True (run), False (cancel) or None (no answer in time, recorded as
        cancel). The click may arrive on any replica; the asker is recorded before anyone can click."""
        await ask(self._store, token, asker=asker)
        if not await show():
            return False
        return await wait_for_answer(self._store, token, timeout_s=timeout_s)

    async def answer_confirmation(self, token: str, answer: ConfirmAnswer, *, user_id: str) -> ConfirmResult:
        """A click on Run/Cancel: only the asker or an admin may answer; the first answer wins."""
        result = await give_answer(
            self._store,
            token,
            run=answer is ConfirmAnswer.RUN,
            user_id=user_id,
            admin=self._access.is_admin(user_id),
        )
        return ConfirmResult(result)

    # --- schedules ----------------------------------------------------------------------------------
    def schedules(self, *, clock: Clock = utc_now) -> ScheduleBook:
        """The schedule book over this store."""
        return ScheduleBook.from_settings(self._store, self.settings, clock=clock)


def _pointer_id(surface: str, base: tuple[str, ...]) -> str:
    return session_id_for(surface, ("generation", *base))


def _generation_key(base: tuple[str, ...], generation: int) -> tuple[str, ...]:
    return (*base, f"g{generation}") if generation else base
