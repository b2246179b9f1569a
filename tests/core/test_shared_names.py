"""The pure rules of core/shared_names.py: which name a result takes beside shared files, and which
shared files a text names (the turn-level behaviour is tests/core/test_shared_files_kept.py)."""

from __future__ import annotations

import pytest

from core.shared_names import MAX_NAMES, named_in, shared_in, unshared_stem, with_names


@pytest.mark.parametrize(
    ("stem", "shared", "kinds", "there", "expected"),
    [
        ("flights", (), ("parquet",), None, "flights"),
        ("flights", ("flights.csv",), ("parquet",), None, "flights"),  # another kind: not in the way
        ("flights", ("flights.parquet",), ("parquet",), None, "flights-2"),
        ("FLIGHTS", ("flights.parquet",), ("parquet",), None, "FLIGHTS-2"),  # in any case
        ("flights", ("flights.parquet", "flights-2.parquet"), ("parquet",), None, "flights-3"),
        ("flights", ("flights.parquet",), ("parquet",), set(), "flights"),  # the shared file is gone
        ("flights", ("flights.parquet",), ("parquet",), {"flights.parquet"}, "flights-2"),
        ("book", ("book.parquet",), ("xlsx", "parquet"), None, "book-2"),  # a workbook's Parquet name
    ],
)
def test_the_name_a_result_takes(stem, shared, kinds, there, expected):
    exists = None if there is None else there.__contains__
    assert unshared_stem(stem, shared, kinds=kinds, exists=exists) == expected


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("SELECT * FROM 'sales.csv'", ("sales.csv",)),
        ("pd.read_csv('SALES.CSV')", ("sales.csv",)),
        ("SELECT * FROM 'old_sales.csv'", ()),
        ("SELECT * FROM 'old-sales.csv'", ()),
        ("SELECT * FROM 'dir/sales.csv'", ()),
        ("SELECT * FROM 'sales.csvx'", ()),
        ("weekly totals of sales.csv by region", ("sales.csv",)),
        ("weekly sales totals by region", ()),
    ],
)
def test_which_shared_files_a_text_names(text, named):
    assert named_in([text], ("sales.csv", "b.parquet")) == named


def test_the_names_kept_in_the_meta_are_checked_and_bounded():
    assert shared_in({"shared_files": ["a.csv", 3, "", "x" * 400, "b.csv"]}) == ("a.csv", "b.csv")
    assert shared_in({"shared_files": "a.csv"}) == () and shared_in(None) == ()
    many = with_names(("a.csv",), [f"f{i}.csv" for i in range(MAX_NAMES)] + ["a.csv"])
    assert len(many) == MAX_NAMES and many[-1] == "a.csv" and "f0.csv" not in many  # shared again: kept
