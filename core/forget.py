"""What `datathread forget` deletes, and deleting it: everything datathread keeps about one thread, one
person, one channel or one workspace (Slack team / Teams tenant), before its time is up.

Nothing deleted any of it on request: a thread's history went after DATATHREAD_HISTORY_TTL_DAYS, its
turn records after DATATHREAD_AUDIT_TTL_DAYS, and schedules, verified queries and corrections, and the
download links' objects in the files bucket never. docs/OPERATIONS.md ("Deleting data") lists what is
kept where, and what this does not reach (the logs, Slack's and Teams' own copies).

A thread goes whole: history, metadata, turn records, workspace, attachment copies, bucket objects
(core/thread_files.py), the schedules that post in it and the verified queries and corrections made
from it. A person (`--user`): their turn records everywhere, every thread only they took part in (whole),
the schedules they own, the verified queries and corrections they made, and what the platform said of
them (the cached look-up). A thread they shared with others keeps its history and files — other
people's conversation — unless `shared` says to delete those threads too: the history is one
transcript of everyone's words and cannot be cut by speaker. Without `shared`, their words there go
when the thread's history expires (DATATHREAD_HISTORY_TTL_DAYS, 30 days by default), within the month
the GDPR allows for an erasure request; with it, at once.

Each thread is deleted under its session lock, so a running turn cannot save its history back after it
went: a thread whose turn holds the lock longer than `lock_wait_s` is skipped and counted as busy.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field

from core.config import Settings
from core.sessions import LockTimeout, SessionStore, resolve_session_id
from core.thread_files import remove_thread_files

SCHEDULES = "schedule"  # core/schedules_store.KIND
VERIFIED = "verified"  # core/verified.COLLECTION
LOCK_WAIT_S = 30.0
RESET_WAIT_S = 900.0  # a turn's longest wait for its lock: what a reset waits for a running turn

log = logging.getLogger("datathread.forget")


class NothingToForget(LookupError):
    """No thread, person, channel or workspace of that id is known; the message is one sentence."""


@dataclass
class ForgetPlan:
    """What will go: computed first, so the command can say it and ask before anything is deleted."""

    what: str  # "thread sl-…", "user U…", …
    sessions: list[str]  # threads deleted whole
    shared: list[str] = field(default_factory=list)  # `--user`: threads they shared with others
    user_id: str | None = None
    schedules: list[str] = field(default_factory=list)
    verified_entries: list[str] = field(default_factory=list)  # verified queries and corrections
    lookups: list[str] = field(default_factory=list)  # glob patterns of cached person look-ups
    delete_shared: bool = False

    @property
    def whole(self) -> list[str]:
        """Every thread deleted whole: with `delete_shared`, the shared ones too."""
        return self.sessions + (self.shared if self.delete_shared else [])


def _glob(text: str) -> str:
    """`text` matched literally in a glob (SQLite GLOB and Redis MATCH both take [x] classes)."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)


async def plan_forget(
    store: SessionStore,
    *,
    thread: str | None = None,
    user: str | None = None,
    channel: str | None = None,
    team: str | None = None,
    delete_shared: bool = False,
) -> ForgetPlan:
    """What forgetting this thread, person, channel or workspace deletes (exactly one of them); raises
    NothingToForget when the store knows nothing of it."""
    if thread is not None:
        session_id = await resolve_session_id(store, thread)
        known = await store.get_meta(session_id) or await store.load_history(session_id)
        if not known and not await store.list_turns(session_id=session_id, limit=1):
            raise NothingToForget(
                f"No thread {thread!r} is known here; `datathread audit` lists the thread ids."
            )
        plan = ForgetPlan(what=f"thread {session_id}", sessions=[session_id])
    else:
        threads = await store.find_threads(user_id=user, channel_id=channel, team_id=team)
        if user is not None:
            alone = sorted(s for s, people in threads.items() if set(people) <= {user})
            shared = sorted(set(threads) - set(alone))
            plan = ForgetPlan(what=f"user {user}", sessions=alone, shared=shared, user_id=user)
            plan.lookups = [f"person:*:{_glob(user)}"]
        else:
            plan = ForgetPlan(
                what=f"channel {channel}" if channel else f"team {team}", sessions=sorted(threads)
            )
            plan.lookups = [f"person:*:{_glob(team)}:*"] if team else []
        plan.delete_shared = delete_shared
        turns = await store.list_turns(user_id=user, limit=1) if user else []
        if not threads and not turns and not await _owned(store, user, channel, team):
            said = {"user": user, "channel": channel, "team": team}
            kind, value = next((k, v) for k, v in said.items() if v is not None)
            raise NothingToForget(
                f"Nothing is kept about {kind} {value!r} here; `datathread audit` lists the ids."
            )
    plan.schedules = await _schedules(store, plan, channel=channel, team=team)
    plan.verified_entries = await _verified(store, plan)
    return plan


async def _owned(store: SessionStore, user, channel, team) -> bool:
    """Whether schedules or verified entries name this person, channel or team (nothing else may)."""
    probe = ForgetPlan(what="", sessions=[], user_id=user)
    return bool(await _schedules(store, probe, channel=channel, team=team) or await _verified(store, probe))


async def _schedules(store: SessionStore, plan: ForgetPlan, *, channel, team) -> list[str]:
    """The schedules that go: posting in a thread that goes, owned by the person, in the channel or team."""
    from core.sessions import session_id_for

    threads = set(plan.whole)
    out = []
    for s in await store.list_records(SCHEDULES):
        posts_in = session_id_for(
            str(s.get("surface", "")), (s.get("team_id", ""), s.get("channel", ""), s.get("thread", ""))
        )
        if (
            (s.get("thread") and posts_in in threads)
            or f"schedule:{s.get('id')}" in threads
            or (plan.user_id is not None and s.get("owner") == plan.user_id)
            or (channel is not None and s.get("channel") == channel)
            or (team is not None and s.get("team_id") == team)
        ):
            out.append(str(s["id"]))
    return sorted(out)


async def _verified(store: SessionStore, plan: ForgetPlan) -> list[str]:
    """Verified queries and corrections made from a thread that goes, or by the person."""
    threads = set(plan.whole)
    out = []
    for entry in await store.list_records(VERIFIED):
        by = entry.get("verified_by") or entry.get("by")
        if entry.get("session_id") in threads or (plan.user_id is not None and by == plan.user_id):
            out.append(str(entry["id"]))
    return sorted(out)


async def carry_out(
    store: SessionStore, settings: Settings, plan: ForgetPlan, *, lock_wait_s: float = LOCK_WAIT_S
) -> Counter:
    """Delete what the plan says; counts by what went ("busy": threads skipped, a turn held them)."""
    counts: Counter = Counter()
    for session_id in plan.whole:
        try:
            async with store.lock(session_id, ttl_s=60, wait_s=lock_wait_s):
                counts.update(await store.erase_sessions([session_id]))
                counts.update(await remove_thread_files(settings, store, session_id))
        except LockTimeout:
            counts["busy"] += 1
    if plan.user_id is not None:
        counts["turn records"] += await store.erase_user_turns(plan.user_id)
    for schedule_id in plan.schedules:
        counts["schedules"] += await store.delete_record(SCHEDULES, schedule_id)
    for entry_id in plan.verified_entries:
        counts["verified queries and corrections"] += await store.delete_record(VERIFIED, entry_id)
    for pattern in plan.lookups:
        counts["cached look-ups"] += await store.erase_values(pattern)
    return counts


async def forget_for_reset(store: SessionStore, settings: Settings, session_id: str) -> None:
    """`reset`: the old conversation's history, metadata and files go; its turn records stay (the
    operator's audit trail, with their own TTL). Under the thread's lock, not waited for: when a turn
    of it is still running (a `reset` typed while it answers), everything goes now and once more when
    that turn lets the lock go, or it would save its history back into the conversation said deleted."""
    try:
        async with store.lock(session_id, ttl_s=60, wait_s=0):
            await _reset_erase(store, settings, session_id)
            return
    except LockTimeout:
        pass
    await _reset_erase(store, settings, session_id)
    task = asyncio.create_task(_after_the_turn(store, settings, session_id), name=f"reset-{session_id}")
    _LATER.add(task)
    task.add_done_callback(_LATER.discard)


_LATER: set[asyncio.Task] = set()  # deletions waiting for a running turn (a reference, or they vanish)


async def _reset_erase(store: SessionStore, settings: Settings, session_id: str) -> None:
    await store.erase_sessions([session_id], turns=False)
    await remove_thread_files(settings, store, session_id)


async def _after_the_turn(store: SessionStore, settings: Settings, session_id: str) -> None:
    try:
        async with store.lock(session_id, ttl_s=60, wait_s=RESET_WAIT_S):
            await _reset_erase(store, settings, session_id)
    except Exception as exc:  # a background task: said in the log, never raised into nowhere
        log.warning("reset: the history of %s could not be deleted after its turn: %s", session_id, exc)
