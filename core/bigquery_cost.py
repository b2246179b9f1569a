"""What a BigQuery query costs and whether it may run: pure helpers, no I/O.

On-demand BigQuery bills bytes processed, rounded up to a whole MB with a 10 MB minimum per table
referenced (https://cloud.google.com/bigquery/pricing#on_demand_pricing). A dry run tells us the bytes
before we spend anything; these helpers turn that number into words, a run/confirm/refuse decision,
a `maximum_bytes_billed` for the job, job labels for cost attribution, and byte-budget keys.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from core.wording import daily_reset, seconds_to_midnight_utc

if TYPE_CHECKING:
    from core.config import Settings

TIB = 2**40
MB = 2**20
MIN_BILLED_BYTES = 10 * MB  # BigQuery bills at least 10 MB per table a query references
DEFAULT_PRICE_PER_TIB = 6.25  # USD, on-demand (2024 list price)

_LABEL_BAD = re.compile(r"[^a-z0-9_-]+")


def format_bytes(n: int | float) -> str:
    """Decimal units as the BigQuery console shows them: '12.3 GB', '850 MB', '0 B'."""
    n = float(max(0, n))
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{int(n)} B"


def billed_bytes(processed: int, tables: int = 1) -> int:
    """Bytes BigQuery would bill for `processed` bytes: whole MBs, at least 10 MB per table."""
    if processed <= 0:
        return 0
    rounded = -(-processed // MB) * MB
    return max(rounded, MIN_BILLED_BYTES * max(1, tables))


def cost_usd(billed: int, price_per_tib: float = DEFAULT_PRICE_PER_TIB) -> float:
    """Dollars for `billed` bytes at the on-demand price."""
    return billed / TIB * price_per_tib


def format_cost(processed: int, price_per_tib: float = DEFAULT_PRICE_PER_TIB) -> str:
    """'12.3 GB (~$0.08 at $6.25/TiB)': the estimate in words a person and the model both read."""
    dollars = cost_usd(billed_bytes(processed), price_per_tib)
    money = f"${dollars:,.2f}" if dollars >= 0.01 or dollars == 0 else "<$0.01"
    return f"{format_bytes(processed)} (~{money} at ${price_per_tib:g}/TiB)"


@dataclass(frozen=True)
class CostLimits:
    """Per-query caps and byte budgets, from settings."""

    soft_cap: int
    hard_cap: int
    price_per_tib: float
    per_turn: int
    per_user_day: int
    per_channel_day: int

    @classmethod
    def from_settings(cls, settings: Settings) -> CostLimits:
        return cls(
            soft_cap=settings.query_soft_cap_bytes,
            hard_cap=settings.query_hard_cap_bytes,
            price_per_tib=settings.bigquery_price_per_tib,
            per_turn=settings.bigquery_turn_bytes,
            per_user_day=settings.bigquery_user_day_bytes,
            per_channel_day=settings.bigquery_channel_day_bytes,
        )


@dataclass(frozen=True)
class CapDecision:
    """What to do with a query of a known estimate: run it, ask a person first, or refuse."""

    action: Literal["run", "confirm", "refuse"]
    estimate: int
    maximum_bytes_billed: int
    message: str = ""


CONFIRMED_MARGIN_PCT = 10  # a confirmed query may bill this much over the estimate the person saw


def decide(
    estimate: int,
    *,
    soft_cap: int,
    hard_cap: int,
    price_per_tib: float = DEFAULT_PRICE_PER_TIB,
) -> CapDecision:
    """Compare a dry-run estimate with the caps; the message tells the model how to narrow the query.

    `maximum_bytes_billed` bounds what the job may bill whatever the estimate said (an external table
    dry-runs at 0 bytes): a query run without asking, by the soft cap (it was the hard cap, so a
    0-byte estimate could bill 100 GB without anyone asked); a confirmed one, by what the person was
    shown plus CONFIRMED_MARGIN_PCT. Never below BigQuery's 10 MB minimum, or every small query would fail.
    """
    limit = max(hard_cap, MIN_BILLED_BYTES)
    words = format_cost(estimate, price_per_tib)
    if estimate > hard_cap:
        return CapDecision(
            "refuse",
            estimate,
            limit,
            f"Not run: this query would scan {words}, over the {format_bytes(hard_cap)} limit per query. "
            "Narrow it: select only the columns you need, filter on the partitioning column "
            "(e.g. a date range), or query a smaller table.",
        )
    if estimate > soft_cap:
        agreed = max(estimate - (-estimate * CONFIRMED_MARGIN_PCT // 100), MIN_BILLED_BYTES)
        return CapDecision("confirm", estimate, min(limit, agreed), f"This query will scan {words}. Run it?")
    return CapDecision("run", estimate, max(min(soft_cap, hard_cap), MIN_BILLED_BYTES))


def sanitise_label(value: str, *, key: bool = False) -> str:
    """A BigQuery label value (or key): lowercase letters, digits, '_' and '-', at most 63 characters.

    Keys must also start with a letter (https://cloud.google.com/bigquery/docs/labels-intro#requirements).
    """
    text = _LABEL_BAD.sub("_", value.strip().lower()).strip("_")[:63]
    if key and (not text or not text[0].isalpha()):
        text = ("k_" + text)[:63]
    return text


def user_hash(user_id: str) -> str:
    """A stable pseudonym for a person in job labels: the raw id never leaves us."""
    return hashlib.sha256(user_id.encode()).hexdigest()[:32]


def job_labels(*, surface: str, channel_id: str, user_id: str, session_id: str) -> dict[str, str]:
    """Labels for cost attribution in the billing export; empty values are left out."""
    raw = {
        "app": "datathread",
        "surface": surface,
        "channel": channel_id,
        "user": user_hash(user_id) if user_id else "",
        "session": session_id,
    }
    return {sanitise_label(k, key=True): sanitise_label(v) for k, v in raw.items() if sanitise_label(v)}


@dataclass(frozen=True)
class Budget:
    """One byte budget: a counter key in the session store, its limit and when it resets."""

    name: str  # for people: "this turn", "today's budget for this channel"
    key: str
    limit: int
    ttl_s: float
    resets: str  # for people: "when the turn ends", "at 00:00 UTC (in 3 hours)"


def budgets(
    *,
    surface: str,
    channel_id: str,
    user_id: str,
    turn_id: str,
    per_turn: int,
    per_user_day: int,
    per_channel_day: int,
    now: float | None = None,
) -> list[Budget]:
    """The budgets one query counts against; a limit of 0 (or no id to key on) means no budget."""
    now = time.time() if now is None else now
    day = time.strftime("%Y%m%d", time.gmtime(now))
    left, daily = seconds_to_midnight_utc(now), daily_reset(now)
    out: list[Budget] = []
    if per_turn > 0 and turn_id:
        out.append(
            Budget("this question's budget", f"bq:turn:{turn_id}", per_turn, 86400, "with your next question")
        )
    if per_user_day > 0 and user_id:
        key = f"bq:day:{day}:user:{surface}:{user_hash(user_id)}"
        out.append(Budget("your daily budget", key, per_user_day, left + 60, daily))
    if per_channel_day > 0 and channel_id:
        key = f"bq:day:{day}:channel:{surface}:{channel_id}"
        out.append(Budget("this channel's daily budget", key, per_channel_day, left + 60, daily))
    return out


def over_budget_message(budget: Budget, used: int, estimate: int, price_per_tib: float) -> str:
    """Why a query was refused for a budget, and when it resets."""
    return (
        f"Not run: this query would scan {format_cost(estimate, price_per_tib)}, but {budget.name} of "
        f"{format_bytes(budget.limit)} has {format_bytes(max(0, budget.limit - used))} left "
        f"({format_bytes(used)} used). It resets {budget.resets}. Narrow the query (fewer columns, a "
        "partition filter) or answer from results already in the workspace."
    )
