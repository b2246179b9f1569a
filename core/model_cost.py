"""What model calls cost, estimated from token counts and Anthropic's published list prices.

An estimate, not a bill: list prices in USD per million tokens (https://www.anthropic.com/pricing),
prompt-cache writes at 1.25x the input price (5-minute cache) and reads at 0.1x, unless a model's
published cache-read price differs (Sonnet 5.5: $0.10). A model name that matches no family below
has no estimate (None) rather than a guessed one.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.events import TurnStats


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None  # None: CACHE_READ_FACTOR x the input price


# Most specific first: the first family whose marker appears in the model id wins.
PRICES: tuple[tuple[str, Price], ...] = (
    ("fable-5-2", Price(8.0, 40.0)),
    ("fable", Price(10.0, 50.0)),
    ("opus-5-5", Price(4.0, 20.0)),
    ("opus-5", Price(5.0, 25.0)),
    ("opus-4-8", Price(5.0, 25.0)),
    ("opus-4-7", Price(5.0, 25.0)),
    ("opus-4-6", Price(5.0, 25.0)),
    ("opus-4-5", Price(5.0, 25.0)),
    ("opus-4.5", Price(5.0, 25.0)),
    ("opus", Price(15.0, 75.0)),
    ("sonnet-5-5", Price(2.0, 10.0, cache_read_per_mtok=0.10)),
    ("sonnet-5", Price(2.0, 10.0)),
    ("sonnet", Price(3.0, 15.0)),
    ("haiku-5", Price(0.10, 0.50, cache_read_per_mtok=0.01)),
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
    cache_read_per_mtok = price.cache_read_per_mtok
    if cache_read_per_mtok is None:
        cache_read_per_mtok = price.input_per_mtok * CACHE_READ_FACTOR
    return round(
        stats.input_tokens * per_token_in
        + stats.cache_write_tokens * per_token_in * CACHE_WRITE_FACTOR
        + stats.cache_read_tokens * cache_read_per_mtok / 1e6
        + stats.output_tokens * price.output_per_mtok / 1e6,
        6,
    )
