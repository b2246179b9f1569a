"""Turn jobs through Redis streams, so any replica's workers may take any replica's jobs.

Two streams with one consumer group: quick jobs (clicks, home tabs) and turns. A worker always reads
the quick stream and reads turns only while it has a free slot, so a click that would release a
waiting turn never queues behind turns. XREADGROUP hands each entry to exactly one consumer; the
entry stays in the group's pending list until the worker acks (and deletes) it after the job ran.

A worker that dies leaves its entries pending. Live workers renew theirs (XCLAIM to themselves,
JUSTID: idle time back to 0) from a thread, like session locks; an entry idle for longer than
`lost_after_s` belongs to a dead worker, and whoever finds it (XAUTOCLAIM) settles it. A job the dead
worker had started becomes a *lost* job: not a second run of the turn (it may have posted half an
answer), but its surface's message that the answer stopped. A job it had not started — Redis hands a
new entry to a blocked read whose worker was killed a moment before, or the worker died between its
read and the job's start — is queued again, for any worker to run: nobody has heard anything of it,
and "your answer stopped, ask again" would be a question lost for nothing. "Started" is the job's fate
key (below) set to "run", which a worker does before it runs a job, so the two cannot both happen.
The replica whose worker died settles that worker's entries at once.

A put that misses its deadline (a Redis frozen for a while) may still land once Redis answers again —
after its thread was told the store was unreachable and to ask again, so the question was answered
late, or twice. Such a put is withdrawn: its fate key (under its own id) is set to "withdrawn" as soon
as Redis takes it, and a worker runs a job only if it sets that key to "run" first — one of the two,
never both (SET NX). An answer already waiting when the deadline passes (a web process whose event
loop stalled) is still read: only a put Redis did not answer is given up.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import threading
import uuid
from dataclasses import dataclass

import redis

from core.background import Background
from core.outage import Outage
from core.redis_client import fail_fast_client
from core.runner import TurnJob
from core.store_redis import redis_reason, redis_where

log = logging.getLogger("datathread.workers")

GROUP = "workers"
PUT_DEADLINE_S = 1.0  # queueing a job, inside the platform's ack (Slack: 3 s)
QUICK, TURNS = "dt:jobs:quick", "dt:jobs:turns"
FATE = "dt:jobs:fate:"  # + a put's id: "run" (a worker took it) or "withdrawn" (its thread was told)
WITHDRAW_FOR_S = 600.0  # how long a web process keeps trying to withdraw a put that timed out


MAX_REQUEUES = 3  # a job queued again after its workers died before starting it: then it is lost

# XACK answers 1 only to the first to ack a pending entry, so the job is settled once; a script, so the
# ack, the delete, the job's fate and what replaces the entry happen together or not at all.
# KEYS: the entry's stream, the quick stream, the entry's fate key ("" when it has no put id).
# ARGV: group, entry id, its lost job ("" for none), the job itself ("" when malformed), a new put id,
# how often it was queued again already, MAX_REQUEUES. Returns a `Settled` value.
_SETTLE = """
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 'already' end
redis.call('XDEL', KEYS[1], ARGV[2])
if KEYS[3] ~= '' then
  local fate = redis.call('GET', KEYS[3])
  if fate == 'withdrawn' then return 'withdrawn' end
  if not fate and ARGV[4] ~= '' and tonumber(ARGV[6]) < tonumber(ARGV[7]) then
    redis.call('SET', KEYS[3], 'requeued', 'EX', 3600)
    redis.call('XADD', KEYS[1], '*', 'job', ARGV[4], 'put', ARGV[5], 'requeues', tonumber(ARGV[6]) + 1)
    return 'requeued'
  end
end
if ARGV[3] ~= '' then redis.call('XADD', KEYS[2], '*', 'job', ARGV[3]) end
return 'lost'
"""


class Settled(enum.Enum):
    """What became of an abandoned entry when it was settled."""

    ALREADY = "already"  # someone else settled it first: nothing to do
    LOST = "lost"  # it had started: its thread hears that the answer stopped
    REQUEUED = "requeued"  # it had not started: queued again, for any worker
    WITHDRAWN = "withdrawn"  # its thread was told it could not be queued: nothing more to say


@dataclass(frozen=True)
class Taken:
    """One entry a worker holds: where it is, and the job it carries."""

    stream: str
    entry_id: str
    job: TurnJob | None  # None: an entry that is not a job (logged and acked)
    put_id: str = ""  # names its fate key (entries queued before puts had ids have none)
    requeues: int = 0  # how often it was queued again because its workers died before starting it


def _decode(stream: str, entry_id, fields: dict | None) -> Taken:
    raw = (fields or {}).get(b"job")
    job = None
    try:
        data = json.loads(raw) if raw else None
        if isinstance(data, dict):
            job = TurnJob(
                kind=str(data["kind"]), payload=dict(data.get("payload") or {}), quick=bool(data.get("quick"))
            )
    except (ValueError, KeyError, TypeError):
        log.warning("dropping a malformed job entry %s", entry_id)
    key = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    put_id = (fields or {}).get(b"put", b"")
    requeues = (fields or {}).get(b"requeues", b"0")
    return Taken(
        stream=stream,
        entry_id=key,
        job=job,
        put_id=put_id.decode(errors="replace"),
        requeues=int(requeues) if requeues.isdigit() else MAX_REQUEUES,
    )


# > the longest blocking read (`take`'s block_ms) and a Redis's own pauses (a fork for BGSAVE): a read
# cut by it may lose entries Redis already gave this worker (they are then reported lost, not run)
SOCKET_TIMEOUT_S = 30.0


class RedisJobs:
    """The two job streams of one Redis (the store's `REDIS_URL`)."""

    def __init__(self, url: str):
        self.url = url
        # `put` runs inside the platform's ack, so it has its own deadline (`PUT_DEADLINE_S`): a Redis
        # that drops packets took 3 connect attempts of 2 s, and one that accepts and never answers
        # held the ack for ever. Short retries here; the worker's loop has its own back-off. Every call
        # answers within SOCKET_TIMEOUT_S: a Redis that stopped answering held a worker's `take` for
        # ever, and a stopping worker's read is dropped sooner than that (core/runner_worker.py).
        self.r = fail_fast_client(url, socket_timeout=SOCKET_TIMEOUT_S)
        self._settle = self.r.register_script(_SETTLE)
        self._withdrawing = Background()  # puts that timed out, being withdrawn

    async def prepare(self) -> None:
        """Create the streams and the group once (BUSYGROUP: another replica did)."""
        for stream in (QUICK, TURNS):
            try:
                await self.r.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def put(self, job: TurnJob) -> None:
        """Queue `job`, or raise a RedisError within `PUT_DEADLINE_S` (Slack wants its ack in 3 s).
        A put cut at the deadline may still land: it is withdrawn (see the module's docstring), as
        its thread is told it could not be queued."""
        put_id = uuid.uuid4().hex
        entry = {"job": json.dumps(job.to_dict()), "put": put_id}
        adding = asyncio.ensure_future(self.r.xadd(QUICK if job.quick else TURNS, entry))
        done, _ = await asyncio.wait({adding}, timeout=PUT_DEADLINE_S)
        if not done:  # after an event-loop stall the answer may be in the socket, unread: read it
            done, _ = await asyncio.wait({adding}, timeout=0.05)
        if not done:
            adding.cancel()
            self._withdrawing.start(self._withdraw(put_id), name="datathread-withdraw-job")
            raise redis.TimeoutError(f"no answer within {PUT_DEADLINE_S:g} s")
        adding.result()  # a RedisError, as it came

    async def _withdraw(self, put_id: str) -> None:
        """Mark a timed-out put withdrawn, trying until Redis takes it (or WITHDRAW_FOR_S has passed)."""
        deadline, pause = asyncio.get_running_loop().time() + WITHDRAW_FOR_S, 0.5
        while True:
            try:
                if not await self.r.set(FATE + put_id, "withdrawn", ex=3600, nx=True):
                    log.warning("a job whose queueing timed out was run anyway: a worker took it first")
                return
            except (redis.RedisError, OSError) as exc:
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("a job that could not be queued was not withdrawn (%s)", redis_reason(exc))
                    return
            await asyncio.sleep(pause)
            pause = min(pause * 2, 10.0)

    async def may_run(self, taken: Taken, consumer: str = "") -> bool:
        """Claim this entry's job for running: False when the web process withdrew it first (its thread
        was told to ask again) or it was queued again. Entries without an id (queued by an older
        version) run. With `consumer`, the mark names it, and a claim whose answer was lost (Redis
        froze) is found again: the mark already there is this consumer's own."""
        if not taken.put_id:
            return True
        mark = f"run {consumer}" if consumer else "run"
        if await self.r.set(FATE + taken.put_id, mark, ex=3600, nx=True):
            return True
        return bool(consumer) and await self.r.get(FATE + taken.put_id) == mark.encode()

    async def take(self, consumer: str, *, turns: bool, block_ms: int) -> list[Taken]:
        """New entries for `consumer`: quick ones always, turns only when it has room for one."""
        streams = {QUICK: ">", TURNS: ">"} if turns else {QUICK: ">"}
        found = await self.r.xreadgroup(GROUP, consumer, streams, count=1, block=block_ms)
        return [
            _decode(name.decode() if isinstance(name, bytes) else name, entry_id, fields)
            for name, entries in found or []
            for entry_id, fields in entries
        ]

    async def settle(self, taken: Taken, lost: TurnJob | None = None) -> Settled:
        """End an abandoned entry exactly once, in one step and only if it was still pending: ack and
        delete it, then queue it again when it never started (`Settled.REQUEUED`), or else queue
        `lost` (its lost job; without one the caller tells the thread itself on `Settled.LOST`). A dead
        worker's entry can be found at the same time by its replica's takeover and by another replica's
        sweep; only one of them settles it, the other gets `Settled.ALREADY`."""
        lost_json = json.dumps(lost.to_dict()) if lost is not None else ""
        job_json = json.dumps(taken.job.to_dict()) if taken.job is not None else ""
        fate = FATE + taken.put_id if taken.put_id else ""
        args = [GROUP, taken.entry_id, lost_json, job_json, uuid.uuid4().hex, taken.requeues, MAX_REQUEUES]
        answer = await self._settle(keys=[taken.stream, QUICK, fate], args=args)
        return Settled(answer.decode() if isinstance(answer, bytes) else answer)

    async def done(self, taken: Taken) -> None:
        async with self.r.pipeline(transaction=True) as pipe:
            pipe.xack(taken.stream, GROUP, taken.entry_id)
            pipe.xdel(taken.stream, taken.entry_id)
            await pipe.execute()

    async def reclaim(self, consumer: str, *, min_idle_ms: int) -> list[Taken]:
        """Entries nobody renewed for `min_idle_ms` (their worker died), now held by `consumer`."""
        out: list[Taken] = []
        for stream in (QUICK, TURNS):
            _, entries, *_ = await self.r.xautoclaim(stream, GROUP, consumer, min_idle_ms, "0-0", count=50)
            out += [_decode(stream, entry_id, fields) for entry_id, fields in entries if fields is not None]
        return out

    async def take_over(self, dead: str, consumer: str) -> list[Taken]:
        """Every entry the (known dead) consumer `dead` held, now held by `consumer`."""
        out: list[Taken] = []
        for stream in (QUICK, TURNS):
            pending = await self.r.xpending_range(stream, GROUP, "-", "+", 1000, consumername=dead)
            ids = [p["message_id"] for p in pending]
            if ids:
                claimed = await self.r.xclaim(stream, GROUP, consumer, 0, ids)
                out += [
                    _decode(stream, entry_id, fields) for entry_id, fields in claimed if fields is not None
                ]
            await self.r.xgroup_delconsumer(stream, GROUP, dead)
        return out

    async def close(self) -> None:
        self._withdrawing.cancel()
        await self.r.aclose()


class Renewer:
    """Renews a worker's held entries every `interval_s` from a daemon thread with its own connection,
    so a busy event loop cannot make a live worker's job look abandoned."""

    def __init__(self, url: str, consumer: str, held: dict[str, Taken], interval_s: float):
        self._url = url
        self._client = redis.Redis.from_url(url)
        self._consumer = consumer
        self._held = held
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="datathread-job-renewer", daemon=True)

    def start(self) -> Renewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        outage = Outage(log, f"Redis at {redis_where(self._url)} (renewing held jobs)")
        try:
            while not self._stop.wait(self._interval):
                held = list(self._held.values())  # a copy: the loop adds and removes entries meanwhile
                try:
                    with self._client.pipeline(transaction=False) as pipe:
                        for t in held:
                            pipe.xclaim(t.stream, GROUP, self._consumer, 0, [t.entry_id], justid=True)
                        pipe.execute()
                except (redis.RedisError, OSError) as exc:  # one line per outage, not one per try
                    outage.failed(redis_reason(exc))
                    continue
                outage.recovered()
        finally:
            self._client.close()
