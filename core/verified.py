"""Verified queries and corrections: what people confirmed about answers, fed back to the model.

A 👍 on an answer (or an admin's ✅ verify) saves the turn's question and its final warehouse SQL
(`core/final_result.py`) as a verified query: who, when, which tables. A curated YAML file next to the
table notes adds more (`verified_queries.yaml`, format below). When a new question is close to a
verified one (`core/verified_match.py`), the model's request carries that SQL as a worked example.
A 👎 asks in the thread what was wrong; the same person's next message there is recorded as a
correction (and answered as a follow-up), and a query verified from that turn stops being offered.

The curated file's format and checks: core/verified_file.py.

Entries are documents of the session store's `verified` collection (its record primitives), shared by
every replica.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from core.events import IncomingMessage
from core.final_result import final_query
from core.sessions import SessionStore
from core.verified_file import read_curated
from core.verified_match import Candidate, closest

CURATED_FILE = "verified_queries.yaml"
COLLECTION = "verified"
Source = Literal["vote", "admin", "file"]
Vote = Literal["up", "down", "verify"]

SAVED = "Thanks! I saved this as a verified query: similar questions will start from its SQL."
THANKS = "Thanks for the feedback 👍"
VERIFIED = "✅ Verified: similar questions will start from this answer's SQL."
NOTHING_TO_VERIFY = "This answer ran no warehouse query, so there is no SQL to verify."
ADMINS_ONLY = "Only admins can verify answers."
ASK_WHAT_WAS_WRONG = (
    "Sorry about that. What was wrong? Reply in this thread and I'll record it as a correction "
    "(and try again with it)."
)
# Teams delivers a channel's or group chat's replies to the bot only when they @-mention it.
ASK_WHAT_WAS_WRONG_TEAMS = (
    "Sorry about that. What was wrong? Tell me in this thread (in a channel or group chat, @-mention me) "
    "and I'll record it as a correction (and try again with it)."
)


@dataclass(frozen=True)
class VerifiedQuery:
    id: str
    question: str
    sql: str
    tables: tuple[str, ...]
    verified_by: str
    verified_at: float | None  # None: a curated entry that gives no `verified_on` (no date is claimed)
    source: Source
    turn_id: str = ""
    session_id: str = ""
    channel_id: str = ""  # where a 👍 was given: such an example is offered there only
    kind: Literal["verified"] = "verified"


@dataclass(frozen=True)
class Correction:
    id: str
    turn_id: str
    session_id: str
    question: str
    sql: str
    text: str
    by: str
    at: float
    kind: Literal["correction"] = "correction"


def tables_in_sql(sql: str, dialect: str) -> tuple[str, ...]:
    """The tables a query reads (CTE names excluded), as written, sorted; () when it does not parse."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:
        return ()
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    names = {".".join(p for p in (t.catalog, t.db, t.name) if p) for t in tree.find_all(exp.Table)}
    return tuple(sorted(n for n in names if n and n.lower() not in ctes))


def _entry_id(prefix: str, *parts: str) -> str:
    return prefix + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:10]


def load_curated(path: Path | None, dialect: str) -> list[VerifiedQuery]:
    """Verified queries from the curated file (checked in core/verified_file.py); [] when there is none."""
    if path is None or not path.exists():
        return []
    return [
        VerifiedQuery(
            id=_entry_id("f-", entry.question, entry.sql),
            question=entry.question,
            sql=entry.sql,
            tables=entry.tables or tables_in_sql(entry.sql, dialect),
            verified_by=entry.verified_by or path.name,
            verified_at=entry.verified_at,
            source="file",
        )
        for entry in read_curated(path, dialect)
    ]


def curated_path(table_notes: Path | None) -> Path | None:
    """`verified_queries.yaml` in the folder of the table notes file (or inside it, if it is a folder)."""
    if table_notes is None:
        return None
    return (table_notes if table_notes.is_dir() else table_notes.parent) / CURATED_FILE


def example_block(query: VerifiedQuery) -> dict:
    """The worked example the model gets next to the question (a text block of the user message)."""
    on = time.strftime(" on %Y-%m-%d", time.gmtime(query.verified_at)) if query.verified_at else ""
    return {
        "type": "text",
        "text": (
            f"(A verified query for a similar question, verified by {query.verified_by}{on}. Use it "
            "as a worked example if it fits this question; adapt it where the question differs.)\n"
            f"Verified question: {query.question}\n```sql\n{query.sql}\n```"
        ),
    }


def _from_entry(data: dict) -> VerifiedQuery | Correction | None:
    kind = data.get("kind")
    fields = {k: v for k, v in data.items()}
    if kind == "verified":
        fields["tables"] = tuple(fields.get("tables") or ())
        return VerifiedQuery(**{k: v for k, v in fields.items() if k in VerifiedQuery.__dataclass_fields__})
    if kind == "correction":
        return Correction(**{k: v for k, v in fields.items() if k in Correction.__dataclass_fields__})
    return None


EXAMPLE_TRIES = 5  # close verified queries checked against the allowlist, closest first


class VerifiedLibrary:
    """Verified queries and corrections over the session store, plus the curated file's entries."""

    def __init__(self, store: SessionStore, *, dialect: str, curated: list[VerifiedQuery] | None = None):
        self.store = store
        self.dialect = dialect
        self.curated = list(curated or [])

    async def entries(self) -> list[VerifiedQuery | Correction]:
        records = await self.store.list_records(COLLECTION)
        records.sort(key=lambda d: (d.get("verified_at") or d.get("at") or 0, d.get("id", "")))
        stored = [_from_entry(d) for d in records]
        return [*self.curated, *(e for e in stored if e is not None)]

    async def queries(self) -> list[VerifiedQuery]:
        return [e for e in await self.entries() if isinstance(e, VerifiedQuery)]

    async def corrections(self) -> list[Correction]:
        return [e for e in await self.entries() if isinstance(e, Correction)]

    async def get(self, entry_id: str) -> VerifiedQuery | Correction | None:
        for query in self.curated:
            if query.id == entry_id:
                return query
        data = await self.store.get_record(COLLECTION, entry_id)
        return _from_entry(data) if data else None

    async def remove(self, entry_id: str) -> bool:
        """Remove a stored entry; curated ones live in their file (ValueError says so)."""
        if any(q.id == entry_id for q in self.curated):
            raise ValueError(f"{entry_id} comes from the curated file; remove it there.")
        return await self.store.delete_record(COLLECTION, entry_id)

    async def vote(self, turn: dict, *, user_id: str, value: Vote, is_admin: bool) -> str:
        """Apply a 👍, 👎 or ✅ to a recorded turn; returns the sentence to post in the thread."""
        if value == "down":
            pending_id = self._pending_id(turn["session_id"], user_id)
            await self.store.put_record(
                COLLECTION, pending_id, {"kind": "pending", "turn_id": turn["turn_id"]}
            )
            return ASK_WHAT_WAS_WRONG_TEAMS if turn.get("surface") == "teams" else ASK_WHAT_WAS_WRONG
        if value == "verify" and not is_admin:
            return ADMINS_ONLY
        saved = await self.verify_turn(turn, by=user_id, source="admin" if value == "verify" else "vote")
        if saved is None:
            return NOTHING_TO_VERIFY if value == "verify" else THANKS
        return VERIFIED if value == "verify" else SAVED

    async def verify_turn(self, turn: dict, *, by: str, source: Source) -> VerifiedQuery | None:
        """Save the turn's question and final warehouse SQL; None when it ran no warehouse query."""
        final = final_query(turn.get("steps") or [], tools=("query_warehouse",))
        if final is None or not final.sql.strip():
            return None
        question = str(turn.get("question", "")).strip()
        query = VerifiedQuery(
            id=_entry_id("v-", question, final.sql),  # the same answer verified twice is one entry
            question=question,
            sql=final.sql,
            tables=tables_in_sql(final.sql, self.dialect),
            verified_by=by,
            verified_at=time.time(),
            source=source,
            turn_id=str(turn.get("turn_id", "")),
            session_id=str(turn.get("session_id", "")),
            channel_id=str(turn.get("channel_id") or ""),
        )
        await self.store.put_record(COLLECTION, query.id, asdict(query))
        return query

    async def take_correction(self, session_id: str, user_id: str, text: str) -> Correction | None:
        """If this person was asked what was wrong in this thread, record `text` as the correction."""
        pending_id = self._pending_id(session_id, user_id)
        pending = await self.store.get_record(COLLECTION, pending_id)
        if not pending or pending.get("kind") != "pending":
            return None
        if not await self.store.delete_record(COLLECTION, pending_id):
            return None  # another replica recorded it first
        turn = await self.store.get_turn(pending["turn_id"]) or {}
        final = final_query(turn.get("steps") or [])
        correction = Correction(
            id=_entry_id("c-", pending["turn_id"], user_id, text),
            turn_id=pending["turn_id"],
            session_id=session_id,
            question=str(turn.get("question", "")),
            sql=final.sql if final else "",
            text=text.strip(),
            by=user_id,
            at=time.time(),
        )
        await self.store.put_record(COLLECTION, correction.id, asdict(correction))
        if turn:  # the audit trail shows it with the turn
            turn.setdefault("corrections", []).append(
                {"by": user_id, "text": correction.text, "at": correction.at}
            )
            await self.store.record_turn(turn)
        return correction

    async def question_blocks(
        self, session_id: str, message: IncomingMessage, permitted: Callable[[str], bool]
    ) -> tuple[list[dict], VerifiedQuery | None]:
        """The question, plus a close verified query as a worked example (returned too, for the receipt);
        a reply to "what was wrong?" is recorded as a correction first (then answered like any follow-up).
        `permitted(sql)`: whether this conversation's allowlist lets that SQL run."""
        await self.take_correction(session_id, message.user_id, message.text)
        blocks = [{"type": "text", "text": message.text}]
        example = await self.example_for(message.text, channel_id=message.channel_id, permitted=permitted)
        return ([*blocks, example_block(example)] if example else blocks), example

    async def example_for(
        self, question: str, *, channel_id: str, permitted: Callable[[str], bool]
    ) -> VerifiedQuery | None:
        """The closest verified query this conversation may see, skipping any whose turn was corrected
        since. A 👍 is offered in its own channel only, an admin's ✅ or a curated entry anywhere; and
        only a query this conversation's allowlist would run. Any person's 👍 reached every channel's
        model: a private channel's question and SQL literals, or text planted to steer later answers."""
        entries = await self.entries()
        corrected = {e.turn_id for e in entries if isinstance(e, Correction)}
        queries = {
            e.id: e
            for e in entries
            if isinstance(e, VerifiedQuery)
            and e.turn_id not in corrected
            and (e.source != "vote" or (e.channel_id and e.channel_id == channel_id))
        }
        for _ in range(EXAMPLE_TRIES):  # the allowlist check parses SQL: only for the closest few
            match = closest(
                question,
                (
                    Candidate(id=q.id, question=q.question, tables=q.tables, verified_at=q.verified_at or 0.0)
                    for q in queries.values()
                ),
            )
            if match is None or permitted(queries[match.id].sql):
                return queries[match.id] if match else None
            del queries[match.id]
        return None

    @staticmethod
    def _pending_id(session_id: str, user_id: str) -> str:
        return _entry_id("p-", session_id, user_id)
