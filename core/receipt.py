"""Answer receipts: what an answer stands on, in one line under it on every surface.

A data team trusts a number when it can see where it came from: which tables were read, how many rows
came back, how fresh the data is, what it cost, and whether the number in the sentence was really
produced by a query in this turn rather than remembered by the model. `build_receipt` gathers that
from the turn's step records; `receipt_line` says it in one line that every surface draws as is.

The numbers check (`unsupported_numbers`, in `core/receipt_numbers.py` with its limits) compares the
numbers the answer writes with every number the thread gave the model. An answer that ran no step at
all is judged the same way; it is where a remembered table of figures would otherwise pass unmarked.
It reads every number of the thread, so a turn runs it in a worker thread and waits `NUMBERS_CHECK_S`
at most: the bot's event loop serves other threads meanwhile, and a check that is slow goes unshown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from core.asked_when import is_asked_line
from core.bigquery_cost import format_bytes
from core.events import Receipt, StepRecord, TurnStats
from core.final_result import QUERY_TOOLS
from core.receipt_numbers import unsupported_numbers
from core.shared_files import is_intake_block
from core.wording import counted

log = logging.getLogger("datathread.receipt")
NUMBERS_CHECK_S = 2.0  # the longest a turn waits for the numbers check; past it, the receipt goes without

if TYPE_CHECKING:
    from core.verified import VerifiedQuery
    from core.warehouse import Warehouse


def build_receipt(
    answer: str,
    steps: Sequence[StepRecord],
    stats: TurnStats,
    *,
    evidence: Iterable[str] = (),
    tables: Iterable[str] = (),
    fresh_as_of: datetime | None = None,
    verified_by: str = "",
    unsupported: tuple[str, ...] | None = None,
) -> Receipt:
    """The receipt of a finished turn. `evidence` is what the thread's steps returned to the model and
    its questions; `tables` what the policy saw each query read (in order, repeats allowed). An answer
    with no step is judged too: a number it writes that no question or earlier result holds was
    remembered or made up, and says so. `unsupported` is the numbers check's result when the caller
    ran it already (`turn_receipt` does, off the event loop); otherwise it runs here."""
    queries = [s for s in steps if s.ok and s.tool in QUERY_TOOLS]
    return Receipt(
        tables=tuple(dict.fromkeys(tables)),
        rows=sum(s.rows or 0 for s in queries),
        bytes_billed=sum(s.bytes_billed or 0 for s in queries),  # billed, not processed: 10 MB minimum
        model_calls=stats.model_calls,
        wall_s=stats.duration_s,
        fresh_as_of=fresh_as_of,
        verified_by=verified_by,
        # Judged whether or not a step ran: a turn with no query is exactly where a remembered table
        # of figures hides, and numbers from the question or earlier turns' results are in `evidence`.
        unsupported=_checked(answer, evidence) if unsupported is None else unsupported,
    )


def _checked(answer: str, evidence: Iterable[str]) -> tuple[str, ...]:
    """`unsupported_numbers`, or none when the check itself fails: it is a hint under an answer that
    was given and saved (a French "58 665,5" once raised here and the turn ended in "Something went
    wrong"), so it is logged and left out, never the answer's end."""
    try:
        return unsupported_numbers(answer, evidence)
    except TimeoutError:  # `_until` gave up: `_checked_in_time` says so
        raise
    except Exception:
        log.exception("the receipt's numbers check failed; the receipt goes without it")
        return ()


async def _checked_in_time(answer: str, evidence: Sequence[str]) -> tuple[str, ...]:
    """`_checked` in a worker thread, waited for `NUMBERS_CHECK_S` at most. Run in the event loop, the
    check held every turn of every thread (a 20,000-digit step output once cost 11.5 s); a thread cannot
    be stopped, so the evidence it reads gives up at the same deadline rather than run on unwatched."""
    give_up = time.monotonic() + NUMBERS_CHECK_S
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(_checked, answer, _until(give_up, evidence)), NUMBERS_CHECK_S
        )
    except TimeoutError:
        log.warning(
            "the receipt's numbers check took over %g s; the receipt goes without it", NUMBERS_CHECK_S
        )
        return ()


def _until(give_up: float, texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if time.monotonic() > give_up:
            raise TimeoutError
        yield text


@dataclass(frozen=True)
class AsOf:
    """How fresh the data is, as the receipt says it: `words` in UTC for everyone ("7 Dec 2026 17:48
    UTC" within 36 hours, else the date alone), and the moment for a surface that can show each reader
    their own time zone (Slack's date token)."""

    moment: datetime
    words: str
    with_time: bool


def receipt_line(
    receipt: Receipt,
    *,
    now: datetime | None = None,
    safe: Callable[[str], str] = str,
    dated: Callable[[AsOf], str] | None = None,
) -> str:
    """'flights, airlines · 16 rows · data as of 20 Nov 2026 · 1.2 GB billed · 3 model calls · 4.1 s'.

    `safe` makes its words safe in a surface's markup (Slack escapes `<`, `>`, `&`); `dated`, given,
    draws the "data as of" time instead of its words, as is (Slack: a date token, left unescaped)."""
    line: list[str | AsOf] = []

    def part(*pieces: str | AsOf) -> None:
        line.extend([" · ", *pieces] if line else pieces)

    if receipt.tables:
        shown = ", ".join(receipt.tables[:4])
        part(shown + (f" +{len(receipt.tables) - 4}" if len(receipt.tables) > 4 else ""))
    if receipt.tables or receipt.rows:
        part(counted(receipt.rows, "row"))
    if receipt.fresh_as_of is not None:
        part("data as of ", as_of(receipt.fresh_as_of, now or datetime.now(UTC)))
    if receipt.bytes_billed:
        part(f"{format_bytes(receipt.bytes_billed)} billed")
    if receipt.model_calls:
        part(counted(receipt.model_calls, "model call"))
    part(f"{receipt.wall_s:.1f} s")
    if receipt.verified_by:
        part(f"based on a verified query by {receipt.verified_by}")
    if receipt.unsupported:
        shown = ", ".join(receipt.unsupported[:3]) + ("…" if len(receipt.unsupported) > 3 else "")
        part(f"⚠ not from any query in this turn: {shown}")

    def drawn(piece: str | AsOf) -> str:
        if isinstance(piece, str):
            return safe(piece)
        return dated(piece) if dated else safe(piece.words)

    return "".join(map(drawn, line))


def as_of(moment: datetime, now: datetime) -> AsOf:
    """`moment` as the receipt says it: with the time (UTC) when it is recent, else the date."""
    moment = moment.astimezone(UTC)
    if (now - moment).total_seconds() < 36 * 3600:
        return AsOf(moment, moment.strftime("%d %b %Y %H:%M UTC").lstrip("0"), with_time=True)
    return AsOf(moment, moment.strftime("%d %b %Y").lstrip("0"), with_time=False)


async def turn_receipt(
    answer: str,
    steps: Sequence[StepRecord],
    stats: TurnStats,
    messages: Sequence[dict],
    warehouse: Warehouse,
    example: VerifiedQuery | None,
) -> Receipt:
    """The receipt of an answered turn: `messages` is the thread's history as the model saw it (the
    question, earlier answers' results and this turn's tool results are all fair sources)."""
    short = f"{warehouse.default_dataset}." if warehouse.dialect == "duckdb" else ""

    def read_by(step: StepRecord) -> list[str]:  # DuckDB's `main.flights` is `flights` to people
        return [t.removeprefix(short) if short else t for t in step.tables] if step.ok else []

    queries = [s for s in steps if s.tool in QUERY_TOOLS]
    warehouse_tables = [t for s in queries if s.ok and s.tool == "query_warehouse" for t in s.tables]
    used = example is not None and any(
        not example.tables or set(example.tables) & set(read_by(s))
        for s in queries
        if s.tool == "query_warehouse"
    )
    return build_receipt(
        answer,
        steps,
        stats,
        tables=[t for s in queries for t in read_by(s)],
        fresh_as_of=await warehouse.freshness(list(dict.fromkeys(warehouse_tables))),
        verified_by=example.verified_by if used and example else "",
        unsupported=await _checked_in_time(answer, evidence_texts(messages)),
    )


def evidence_texts(messages: Sequence[dict]) -> list[str]:
    """Every text the model was given: questions and tool results (not its own words)."""
    out: list[str] = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for n, block in enumerate(blocks):
            if block.get("type") == "text" and not _told_with_it(n, block.get("text", "")):
                out.append(block.get("text", ""))  # the question, not the line dating it
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    out.append(inner)
                else:
                    out += [b.get("text", "") for b in inner or [] if b.get("type") == "text"]
    return out


def _told_with_it(n: int, text: str) -> bool:
    """A block the bot added to a question, not evidence: the line dating it, and the shared files'
    block (its sizes and preview rows let a made-up number stand; a figure from a shared file comes
    from a query over it). Never the first block, the person's own words, whatever it says."""
    return is_asked_line(text) or (n > 0 and is_intake_block(text))
