"""What model calls cost, estimated from token counts and Anthropic's published list prices.

An estimate, not a bill: list prices in USD per million tokens (https://www.anthropic.com/pricing),
prompt-cache writes at 1.25x and reads at 0.1x the input price (5-minute cache). A model name that
matches no family below has no estimate (None) rather than a guessed one.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.events import TurnStats


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


# Most specific first: the first family whose marker appears in the model id wins.
PRICES: tuple[tuple[str, Price], ...] = (
    ("opus-4-5", Price(5.0, 25.0)),
    ("opus-4.5", Price(5.0, 25.0)),
    ("opus", Price(15.0, 75.0)),
    ("sonnet", Price(3.0, 15.0)),
    ("haiku-4", Price(1.0, 5.0)),
    ("3-5-haiku", Price(0.8, 4.0)),
    ("haiku", Price(0.25, 1.25)),
)

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def price_for(model: str) -> Price | None:
    name = model.lower()
    return next((price for marker, price in PRICES if marker in name), None)


def model_cost_usd(model: str, stats: TurnStats) -> float | None:
    """Estimated USD for the model calls behind `stats`; None for a model without a known price."""
    price = price_for(model)
    if price is None:
        return None
    per_token_in = price.input_per_mtok / 1e6
    return round(
        stats.input_tokens * per_token_in
        + stats.cache_write_tokens * per_token_in * CACHE_WRITE_FACTOR
        + stats.cache_read_tokens * per_token_in * CACHE_READ_FACTOR
        + stats.output_tokens * price.output_per_mtok / 1e6,
        6,
    )
