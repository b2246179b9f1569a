"""Execution-accuracy scoring, table-driven: column order, extra columns, tolerance, order and ties."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from core.eval_compare import ResultSet, compare, normalize
from core.eval_suite import ScoringRules

GOLD = ResultSet(["origin", "n"], [("EWR", 120835), ("JFK", 111279), ("LGA", 104662)])


def rs(columns: str, *rows: tuple) -> ResultSet:
    return ResultSet(columns.split(), list(rows))


CASES = [
    # (name, gold, got, rules, correct, reason contains)
    ("identical", GOLD, GOLD, {}, True, "same rows"),
    ("row order ignored", GOLD, rs("o n", ("LGA", 104662), ("EWR", 120835), ("JFK", 111279)), {}, True, ""),
    (
        "column order and names ignored",
        GOLD,
        rs("n airport", (111279, "JFK"), (104662, "LGA"), (120835, "EWR")),
        {},
        True,
        "",
    ),
    (
        "extra column allowed by default",
        GOLD,
        rs(
            "origin name n",
            ("EWR", "Newark", 120835),
            ("JFK", "Kennedy", 111279),
            ("LGA", "LaGuardia", 104662),
        ),
        {},
        True,
        "",
    ),
    (
        "extra column refused when strict",
        GOLD,
        rs(
            "origin name n",
            ("EWR", "Newark", 120835),
            ("JFK", "Kennedy", 111279),
            ("LGA", "LaGuardia", 104662),
        ),
        {"extra_columns": False},
        False,
        "exactly 2 columns",
    ),
    ("missing column", GOLD, rs("origin", ("EWR",), ("JFK",), ("LGA",)), {}, False, "expected 2 columns"),
    (
        "wrong value",
        GOLD,
        rs("origin n", ("EWR", 120835), ("JFK", 111279), ("LGA", 999)),
        {},
        False,
        "no result column has the values of n",
    ),
    (
        "extra row",
        GOLD,
        rs("origin n", ("EWR", 120835), ("JFK", 111279), ("LGA", 104662), ("XXX", 1)),
        {},
        False,
        "expected 3 rows, got 4",
    ),
    (
        "values swapped between rows",
        GOLD,
        rs("origin n", ("EWR", 111279), ("JFK", 120835), ("LGA", 104662)),
        {},
        False,
        "rows differ",
    ),
    ("int equals float", rs("n", (5,)), rs("n", (5.0,)), {}, True, ""),
    ("decimal equals float", rs("n", (decimal.Decimal("1.50"),)), rs("n", (1.5,)), {}, True, ""),
    ("within default tolerance 1e-3", rs("avg", (12.639070257,)), rs("avg", (12.64,)), {}, True, ""),
    ("outside default tolerance", rs("avg", (12.639070257,)), rs("avg", (12.6,)), {}, False, ""),
    (
        "wider tolerance admits rounding",
        rs("avg", (12.639070257,)),
        rs("avg", (12.6,)),
        {"tolerance": 0.01},
        True,
        "",
    ),
    ("zero tolerance is exact", rs("avg", (1.0,)), rs("avg", (1.0000001,)), {"tolerance": 0}, False, ""),
    ("percent is not a fraction", rs("pct", (55.2,)), rs("share", (0.552,)), {}, False, ""),
    (
        "near-equal numbers that sort apart still pair",
        rs("x k", (1.0000001, "b"), (1.0, "a")),
        rs("x k", (1.0, "b"), (1.0000001, "a")),
        {},
        True,
        "",
    ),
    ("nulls and NaN are equal", rs("a", (None,), (1,)), rs("a", (float("nan"),), (1,)), {}, True, ""),
    ("text is stripped, case kept", rs("a", ("JFK",)), rs("a", (" JFK ",)), {}, True, ""),
    ("text case matters", rs("a", ("JFK",)), rs("a", ("jfk",)), {}, False, ""),
    (
        "date equals midnight timestamp",
        rs("d", (dt.date(2013, 11, 27),)),
        rs("d", (dt.datetime(2013, 11, 27),)),
        {},
        True,
        "",
    ),
    ("date equals ISO text", rs("d", (dt.date(2013, 11, 27),)), rs("d", ("2013-11-27",)), {}, True, ""),
    ("multiset: duplicates count", rs("a", (1,), (1,)), rs("a", (1,)), {}, False, "expected 2 rows, got 1"),
    ("one row, in the singular", rs("a", (1,)), rs("a", (1,), (2,)), {}, False, "expected 1 row, got 2"),
    (
        "one column, in the singular",
        rs("a", (1,)),
        rs("a b", (1, 2)),
        {"extra_columns": False},
        False,
        "expected exactly 1 column, got 2",
    ),
    (
        "distinct: duplicates ignored",
        rs("a", (1,), (1,), (2,)),
        rs("a", (2,), (1,)),
        {"distinct": True},
        True,
        "",
    ),
    ("both empty", rs("a"), rs("b c"), {}, True, "both results are empty"),
    ("no result at all", GOLD, None, {}, False, "no query result"),
    ("ordered: same order", GOLD, GOLD, {"ordered": True}, True, "same order"),
    (
        "ordered: wrong order",
        GOLD,
        rs("o n", ("LGA", 104662), ("EWR", 120835), ("JFK", 111279)),
        {"ordered": True},
        False,
        "different order",
    ),
    # ties: rows equal on the order_by columns may come in any order among themselves
    (
        "ordered ties may swap",
        rs("c n", ("A", 3), ("B", 2), ("C", 2), ("D", 1)),
        rs("c n", ("A", 3), ("C", 2), ("B", 2), ("D", 1)),
        {"ordered": True, "order_by": ["n"]},
        True,
        "",
    ),
    (
        "ordered ties without order_by may not",
        rs("c n", ("A", 3), ("B", 2), ("C", 2)),
        rs("c n", ("A", 3), ("C", 2), ("B", 2)),
        {"ordered": True},
        False,
        "different order",
    ),
    (
        "ties do not excuse other swaps",
        rs("c n", ("A", 3), ("B", 2), ("C", 2), ("D", 1)),
        rs("c n", ("B", 2), ("A", 3), ("C", 2), ("D", 1)),
        {"ordered": True, "order_by": ["n"]},
        False,
        "",
    ),
    (
        "same values in two columns: assignment found",
        rs("a b", (1, 2), (2, 1)),
        rs("x y", (2, 1), (1, 2)),
        {},
        True,
        "",
    ),
]


@pytest.mark.parametrize(
    ("name", "gold", "got", "rules", "correct", "reason"), CASES, ids=[c[0] for c in CASES]
)
def test_compare(name, gold, got, rules, correct, reason):
    verdict = compare(gold, got, ScoringRules(**rules))
    assert verdict.correct is correct, verdict.reason
    assert reason in verdict.reason


@pytest.mark.parametrize(
    ("value", "normal"),
    [
        (True, 1.0),
        (3, 3.0),
        (float("nan"), None),
        (dt.datetime(2013, 1, 1, 5, 0, tzinfo=dt.timezone(dt.timedelta(hours=-5))), "2013-01-01 10:00:00"),
        (dt.timedelta(minutes=2), 120.0),
        ("  x ", "x"),
    ],
)
def test_normalize(value, normal):
    assert normalize(value) == normal


def test_huge_results_are_not_compared():
    big = ResultSet(["a"], [(i,) for i in range(100_001)])
    assert compare(big, big, ScoringRules()).reason.startswith("a result has more than")
