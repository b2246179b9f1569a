"""Counts in words: the one plural helper every surface's "N rows", "N steps" and "N model calls" use."""

from __future__ import annotations

import pytest

from core.wording import counted


@pytest.mark.parametrize(
    ("n", "noun", "words"),
    [
        (0, "row", "0 rows"),
        (1, "row", "1 row"),
        (2, "step", "2 steps"),
        (1234, "row", "1,234 rows"),
        (1, "model call", "1 model call"),
        (3, "more row", "3 more rows"),
    ],
)
def test_counted(n, noun, words):
    assert counted(n, noun) == words
