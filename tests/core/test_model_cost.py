"""Cost estimates from token counts: the right family's price, cache factors, unknown models."""

from __future__ import annotations

import pytest

from core.events import TurnStats
from core.model_cost import model_cost_usd, price_for


@pytest.mark.parametrize(
    ("model", "input_per_mtok"),
    [
        ("claude-sonnet-5-5", 2.0),
        ("claude-sonnet-5", 2.0),
        ("claude-sonnet-4-6", 3.0),
        ("claude-sonnet-4-5", 3.0),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", 3.0),
        ("claude-opus-5-5", 4.0),
        ("claude-opus-5", 5.0),
        ("claude-opus-4-7", 5.0),
        ("claude-opus-4-5", 5.0),
        ("claude-fable-5-1", 10.0),
        ("claude-haiku-5-5", 0.10),
        ("claude-opus-4-1", 15.0),
        ("claude-haiku-4-5", 1.0),
        ("claude-3-5-haiku-latest", 0.8),
    ],
)
def test_price_by_family(model, input_per_mtok):
    assert price_for(model).input_per_mtok == input_per_mtok


def test_cost_counts_cache_reads_and_writes_at_their_factors():
    stats = TurnStats(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
    )
    # sonnet: 3 in + 15 out + 0.3 cache read + 3.75 cache write
    assert model_cost_usd("claude-sonnet-4-5", stats) == pytest.approx(22.05)


def test_a_published_cache_read_price_overrides_the_factor():
    stats = TurnStats(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000)
    # sonnet 5.5: 2 in + 10 out + 0.10 cache read (not 0.1 x 2 = 0.20)
    assert model_cost_usd("claude-sonnet-5-5", stats) == pytest.approx(12.10)
    # sonnet 5 has no override: 2 + 10 + 0.20
    assert model_cost_usd("claude-sonnet-5", stats) == pytest.approx(12.20)


def test_an_unknown_model_has_no_estimate():
    assert model_cost_usd("claude-test", TurnStats(input_tokens=10)) is None
