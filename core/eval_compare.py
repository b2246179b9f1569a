"""Execution-accuracy scoring: does the bot's final result equal the gold result?

Spider/BIRD style: the two result sets are compared as multisets of rows (sets with `distinct`), column
order and column names ignored, numbers equal within a relative tolerance. Gold columns are matched to
result columns by their values; with `extra_columns` the result may carry more columns than the gold.
With `ordered`, rows must also come in the gold order, except that rows tied on `order_by` may swap.
Pure functions over plain rows: table-driven tests in tests/core/test_eval_compare.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
from dataclasses import dataclass
from typing import Any

from core.eval_suite import ScoringRules
from core.wording import counted

MAX_COMPARE_ROWS = 100_000  # beyond this a result is not a plausible answer to compare cell by cell
MAX_PAIRWISE = 2_000  # rows matched one by one when sorting alone cannot pair them within tolerance
MAX_ASSIGNMENTS = 5_000  # column assignments tried before giving up


@dataclass(frozen=True)
class ResultSet:
    """A query result as plain Python values: column names and rows."""

    columns: list[str]
    rows: list[tuple]


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str  # one line for the report: why it is wrong, or how it matched


def normalize(value: Any) -> Any:
    """One comparable form per value: numbers as float, dates as ISO text (midnight timestamps as their
    date), NaN as None, text stripped."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float | decimal.Decimal):
        number = float(value)
        return None if math.isnan(number) else number
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        if value.time() == dt.time(0):  # a date held as a timestamp is that date
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, str):
        return value.strip()
    if hasattr(value, "item"):  # numpy scalars
        return normalize(value.item())
    return str(value)


def _sort_key(value: Any) -> tuple:
    if value is None:
        return (0, 0.0)
    if isinstance(value, float):
        return (1, value)
    return (2, str(value))


def _row_key(row: tuple) -> tuple:
    return tuple(_sort_key(v) for v in row)


def _close(a: Any, b: Any, tolerance: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-9)
    return a == b


def _rows_close(a: tuple, b: tuple, tolerance: float) -> bool:
    return len(a) == len(b) and all(_close(x, y, tolerance) for x, y in zip(a, b, strict=True))


def same_multiset(gold: list[tuple], got: list[tuple], tolerance: float) -> bool:
    """Equal as multisets of rows, numbers within tolerance (sorted pairing, then one-by-one)."""
    if len(gold) != len(got):
        return False
    a, b = sorted(gold, key=_row_key), sorted(got, key=_row_key)
    if all(_rows_close(x, y, tolerance) for x, y in zip(a, b, strict=True)):
        return True
    if tolerance == 0 or len(a) > MAX_PAIRWISE:
        return False
    left = list(b)  # near-equal numbers may sort apart: pair what sorting could not
    for row in a:
        match = next((i for i, other in enumerate(left) if _rows_close(row, other, tolerance)), None)
        if match is None:
            return False
        left.pop(match)
    return True


def _same_sequence(gold: list[tuple], got: list[tuple], tie_key: list[int], tolerance: float) -> bool:
    """Equal in order; consecutive gold rows equal on `tie_key` form a group compared as a multiset."""
    if len(gold) != len(got):
        return False
    if not tie_key:
        return all(_rows_close(x, y, tolerance) for x, y in zip(gold, got, strict=True))
    start = 0
    for _, group in itertools.groupby(gold, key=lambda r: tuple(r[i] for i in tie_key)):
        size = len(list(group))
        if not same_multiset(gold[start : start + size], got[start : start + size], tolerance):
            return False
        start += size
    return True


def _column(rows: list[tuple], index: int) -> list[tuple]:
    return [(r[index],) for r in rows]


def _assignments(gold: ResultSet, got: ResultSet, tolerance: float):
    """Injective maps gold column → result column, each pair equal as a multiset of values."""
    candidates = [
        [
            j
            for j in range(len(got.columns))
            if same_multiset(_column(gold.rows, i), _column(got.rows, j), tolerance)
        ]
        for i in range(len(gold.columns))
    ]
    missing = [gold.columns[i] for i, c in enumerate(candidates) if not c]
    if missing:
        return missing, iter(())
    order = sorted(range(len(candidates)), key=lambda i: len(candidates[i]))  # most constrained first

    def search(k: int, used: tuple[int, ...], chosen: dict[int, int]):
        if k == len(order):
            yield [chosen[i] for i in range(len(candidates))]
            return
        i = order[k]
        for j in candidates[i]:
            if j not in used:
                yield from search(k + 1, (*used, j), {**chosen, i: j})

    return [], itertools.islice(search(0, (), {}), MAX_ASSIGNMENTS)


def compare(gold: ResultSet, got: ResultSet | None, rules: ScoringRules) -> Verdict:
    """Score one result against the gold one under the question's rules."""
    if got is None:
        return Verdict(False, "the turn produced no query result to compare")
    if max(len(gold.rows), len(got.rows)) > MAX_COMPARE_ROWS:
        return Verdict(False, f"a result has more than {MAX_COMPARE_ROWS:,} rows; not compared")
    gold_rows = [tuple(normalize(v) for v in r) for r in gold.rows]
    got_rows = [tuple(normalize(v) for v in r) for r in got.rows]
    if rules.distinct:
        gold_rows, got_rows = _distinct(gold_rows), _distinct(got_rows)
    gold_n, got_n = ResultSet(gold.columns, gold_rows), ResultSet(got.columns, got_rows)
    if len(gold_rows) != len(got_rows):
        return Verdict(False, f"expected {counted(len(gold_rows), 'row')}, got {len(got_rows):,}")
    if len(got.columns) < len(gold.columns):
        return Verdict(False, f"expected {counted(len(gold.columns), 'column')}, got {len(got.columns)}")
    if not rules.extra_columns and len(got.columns) != len(gold.columns):
        return Verdict(
            False, f"expected exactly {counted(len(gold.columns), 'column')}, got {len(got.columns)}"
        )
    if not gold_rows:
        return Verdict(True, "both results are empty")
    missing, assignments = _assignments(gold_n, got_n, rules.tolerance)
    if missing:
        return Verdict(False, f"no result column has the values of {', '.join(missing[:3])}")
    tie_key = [gold.columns.index(c) for c in rules.order_by if c in gold.columns]
    unordered_match = False
    for mapping in assignments:
        projected = [tuple(r[j] for j in mapping) for r in got_rows]
        if not same_multiset(gold_rows, projected, rules.tolerance):
            continue
        if not rules.ordered:
            return Verdict(True, "same rows")
        if _same_sequence(gold_rows, projected, tie_key, rules.tolerance):
            return Verdict(True, "same rows in the same order")
        unordered_match = True
    return Verdict(False, "same rows in a different order" if unordered_match else "rows differ")


def _distinct(rows: list[tuple]) -> list[tuple]:
    return list(dict.fromkeys(rows))
