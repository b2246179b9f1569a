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
went: a thread whose turn holds the lock longer than `lock_wait_s` is skipped and counted as busy. Its
files-bucket objects go first: when the bucket fails, the thread is left whole and named (deleting its
rows first made its objects unreachable: the same command then said "No thread … is known"), and the
bucket is not called again in that run (core/files_bucket.py's BucketRun).
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from core.config import Settings
from core.erase_mark import mark_erased
from core.file_deletions import forget_shared_files
from core.files_bucket import BucketRun
from core.sessions import LockTimeout, SessionStore, StoreUnavailable, resolve_session_id
from core.thread_files import delete_or_queue, remove_thread_files

SCHEDULES = "schedule"  # core/schedules_store.KIND
VERIFIED = "verified"  # core/verified.COLLECTION
LOCK_WAIT_S = 30.0
RESET_BUCKET_S = 5.0  # what `reset` waits for the files bucket before queueing its objects (it waited 41 s)

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
            # a schedule's audit entries (`schedule:<id>`, core/schedules_store.py) are no conversation:
            # counted as a thread "they shared with others"; their own entries go with their turn records
            threads = {s: people for s, people in threads.items() if not s.startswith("schedule:")}
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


@dataclass
class Deleted:
    """What `carry_out` deleted (`counts`, by kind) and what it left: threads a running turn held
    (`busy`), threads whose bucket objects could not be deleted (`bucket_left`: left whole, so the same
    command finds them again), and the store's failure that stopped it (`stopped`) after `done` of
    `total` threads."""

    counts: Counter = field(default_factory=Counter)
    busy: list[str] = field(default_factory=list)
    bucket_left: list[str] = field(default_factory=list)
    done: int = 0
    total: int = 0
    stopped: StoreUnavailable | None = None


async def carry_out(
    store: SessionStore, settings: Settings, plan: ForgetPlan, *, lock_wait_s: float = LOCK_WAIT_S
) -> Deleted:
    """Delete what the plan says, each thread under its lock. A session store that stops answering
    midway ends the run, with what went so far said (`stopped`): the same command carries on."""
    shared_turns = [] if plan.delete_shared or plan.user_id is None else plan.shared
    out = Deleted(total=len(plan.whole) + len(shared_turns))
    bucket = BucketRun(settings, why="datathread forget")
    try:
        for session_id in plan.whole:
            whole = functools.partial(_whole, store, settings, bucket, out, session_id)
            await _held(store, session_id, lock_wait_s, out, whole)
            out.done += 1
        for session_id in shared_turns:  # their turn records there, under the lock (a running turn's
            theirs = functools.partial(_theirs, store, str(plan.user_id), session_id, out)
            await _held(store, session_id, lock_wait_s, out, theirs)
            out.done += 1  # record would otherwise come back when it ends)
        if plan.user_id is not None and not out.busy:  # the rest: records of no thread kept
            out.counts["turn records"] += await store.erase_user_turns(plan.user_id)
        await _owned_by(store, plan, out.counts)
        await forget_shared_files(store, set(plan.whole) - set(out.busy + out.bucket_left))
    except StoreUnavailable as exc:
        out.stopped = exc
    return out


async def _held(
    store: SessionStore, session_id: str, wait_s: float, out: Deleted, work: Callable[[], Awaitable[None]]
) -> None:
    """Run `work()` under the thread's lock; a thread a turn holds is left, as busy."""
    try:
        async with store.lock(session_id, ttl_s=60, wait_s=wait_s):
            await work()
    except LockTimeout:
        out.busy.append(session_id)
        out.counts["busy"] += 1


async def _whole(
    store: SessionStore, settings: Settings, bucket: BucketRun, out: Deleted, session_id: str
) -> None:
    """The thread whole: its bucket objects first; when they cannot go, nothing of it goes (said, and
    the same command finds it again — deleting the rows first lost the only record of the thread)."""
    gone = await bucket.delete(session_id)
    if gone is None:
        out.bucket_left.append(session_id)
        return
    out.counts["files in the bucket"] += gone
    out.counts.update(await store.erase_sessions([session_id]))
    out.counts.update(await remove_thread_files(settings, store, session_id))


async def _theirs(store: SessionStore, user_id: str, session_id: str, out: Deleted) -> None:
    out.counts["turn records"] += await store.erase_user_turns(user_id, session_id=session_id)


async def _owned_by(store: SessionStore, plan: ForgetPlan, counts: Counter) -> None:
    """Schedules, verified entries and cached look-ups the plan names."""
    for schedule_id in plan.schedules:
        counts["schedules"] += await store.delete_record(SCHEDULES, schedule_id)
    for entry_id in plan.verified_entries:
        counts["verified queries and corrections"] += await store.delete_record(VERIFIED, entry_id)
    for pattern in plan.lookups:
        counts["cached look-ups"] += await store.erase_values(pattern)


async def forget_for_reset(store: SessionStore, settings: Settings, session_id: str) -> bool:
    """`reset`: the old conversation's history, metadata and files go; its turn records stay (the
    operator's audit trail, with their own TTL). Not under the thread's lock: a turn of it still
    running (a `reset` typed while it answers) finds the mark and does not save its history back
    (core/erase_mark.py). Its bucket objects are tried for RESET_BUCKET_S, then queued for the hourly
    sweep; returns whether they went (the sentence says so when they did not)."""
    await mark_erased(store, session_id)
    await store.erase_sessions([session_id], turns=False)
    await remove_thread_files(settings, store, session_id)
    await forget_shared_files(store, [session_id])
    bucket = BucketRun(settings, deadline_s=RESET_BUCKET_S, why="reset")
    return await delete_or_queue(store, bucket, session_id)
