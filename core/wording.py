"""Counts in words for people: "1 row", "16 rows", "1 step" — one helper, so no surface says "1 rows"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` (with thousands separators) and `noun`, plural unless `n` is exactly 1."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
