"""Daily limits on what Claude costs: all questions together, and each person, per UTC day.

The turn budget bounds one question and the hourly limits how many, but nothing bounded a day: at
the defaults one person may ask 60 questions an hour of up to 400,000 tokens each. These budgets are
counted in the session store, so every replica sees one total, in the turn budget's weighted tokens
(`core.turn_state.weighted_tokens`: what the tokens cost, relative to input).

A question is refused before it starts when a budget is spent (saying when it resets, without an
error id: a refusal, like a rate limit). A question in flight is charged after every model call and
stops at the first call that takes a budget past its limit — before running that call's tools, but
keeping an answer the model already wrote — so a day overshoots by at most one call per question in
flight. The store failing to count is logged and does not stop a question (the turn budget still
bounds it): the store is the session lock's too, so a question rarely gets that far without it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from core.access import Refusal
from core.bigquery_cost import format_bytes
from core.config import Settings
from core.events import IncomingMessage
from core.sessions import StoreUnavailable
from core.wording import counted, daily_reset, seconds_to_midnight_utc

log = logging.getLogger("datathread.turn")


class UsageCounter(Protocol):
    async def add_usage(self, key: str, amount: int, *, ttl_s: float) -> int: ...


@dataclass(frozen=True)
class DailyTokens:
    """One daily budget: whose it is (for the sentence), its counter's key (without the day) and limit."""

    everyone: bool
    key: str
    limit: int
    setting: str


@dataclass(frozen=True)
class ModelBudgets:
    """The daily budgets one question counts against (none when both settings are 0)."""

    store: UsageCounter
    budgets: tuple[DailyTokens, ...]
    terminal: bool  # whoever reads the terminal runs the bot: name the setting, not "an admin"

    @classmethod
    def for_message(
        cls, store: UsageCounter, settings: Settings, message: IncomingMessage, *, admin: bool
    ) -> ModelBudgets:
        budgets = []
        if settings.daily_token_budget > 0:
            budgets.append(
                DailyTokens(True, "all", settings.daily_token_budget, "DATATHREAD_DAILY_TOKEN_BUDGET")
            )
        if settings.user_daily_token_budget > 0 and not admin and message.user_id:
            key = f"user:{message.surface}:{message.user_id}"
            budgets.append(
                DailyTokens(
                    False, key, settings.user_daily_token_budget, "DATATHREAD_USER_DAILY_TOKEN_BUDGET"
                )
            )
        return cls(store, tuple(budgets), message.surface == "terminal")

    async def refusal(self) -> Refusal | None:
        """Before a question: a Refusal when a budget is spent, else None."""
        now = time.time()
        for budget in self.budgets:
            used = await self.store.add_usage(_day_key(budget, now), 0, ttl_s=_ttl(now))
            if used >= budget.limit:
                spent = self._spent(budget)
                spent = spent if spent.startswith("datathread") else spent[0].upper() + spent[1:]
                return Refusal(
                    f"{spent}. It resets {daily_reset(now)}.",
                    f"{budget.setting}={budget.limit}",
                    seconds_to_midnight_utc(now),
                )
        return None

    async def charge(self, tokens: int) -> str | None:
        """After a model call: count its tokens; the sentence that stops the question when a budget
        is now past its limit, else None."""
        if not self.budgets or tokens <= 0:
            return None
        now, over = time.time(), None
        for budget in self.budgets:
            try:
                used = await self.store.add_usage(_day_key(budget, now), tokens, ttl_s=_ttl(now))
            except StoreUnavailable as exc:
                log.warning("daily model budget not counted (%s): %s", budget.setting, exc)
                continue
            if used > budget.limit and over is None:
                over = f"This question stopped: {self._spent(budget)}. It resets {daily_reset(now)}."
        return over

    def _spent(self, budget: DailyTokens) -> str:
        """Which budget is spent, as a clause; in chat "set by an admin" (people there cannot act on a
        variable), in the terminal the setting and its value."""
        if self.terminal:
            whose = "datathread's" if budget.everyone else "your"
            limit = counted(budget.limit, "token")
            return f"{whose} daily model budget is spent ({limit}, set by {budget.setting})"
        if budget.everyone:
            return "datathread has used today's model budget, set by an admin"
        return f"you've used your daily model budget ({counted(budget.limit, 'token')}), set by an admin"


def _day_key(budget: DailyTokens, now: float) -> str:
    return f"model:day:{time.strftime('%Y%m%d', time.gmtime(now))}:{budget.key}"


def _ttl(now: float) -> float:
    return seconds_to_midnight_utc(now) + 60


def spend_limits(settings: Settings) -> dict[str, str]:
    """What bounds the bill, for `doctor`: "on — …" or "off — …" per limit, as the protections read.
    The daily model budgets are off by default, and that is said plainly."""
    s = settings
    hourly = [
        f"{n} per {who}"
        for n, who in ((s.user_turns_per_hour, "person"), (s.channel_turns_per_hour, "channel"))
        if n
    ]
    daily = [
        f"{counted(n, 'token')} {who}"
        for n, who in ((s.daily_token_budget, "for all questions"), (s.user_daily_token_budget, "per person"))
        if n
    ]
    limits = {
        "questions an hour": f"on — {', '.join(hourly)}" if hourly else "off — no hourly limit on questions",
        "model, per question": f"on — {counted(s.turn_token_budget, 'token')}, {counted(s.max_steps, 'step')}",
        "model, per day": f"on — {', '.join(daily)}"
        if daily
        else "off — nothing bounds a day's Claude bill: set DATATHREAD_DAILY_TOKEN_BUDGET (all questions) "
        "or DATATHREAD_USER_DAILY_TOKEN_BUDGET (per person)",
    }
    if s.warehouse == "bigquery":
        per_day = [
            f"{format_bytes(n)} {who}"
            for n, who in (
                (s.bigquery_user_day_bytes, "per person"),
                (s.bigquery_channel_day_bytes, "per channel"),
            )
            if n
        ]
        limits["BigQuery bytes"] = (
            f"on — {format_bytes(s.query_hard_cap_bytes)} a query"
            + (f", {format_bytes(s.bigquery_turn_bytes)} a question" if s.bigquery_turn_bytes else "")
            + (f", {', '.join(per_day)} a day" if per_day else "")
        )
    return limits
