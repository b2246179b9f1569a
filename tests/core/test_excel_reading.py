"""Where a sheet's header is and what its columns are called (`core/excel_reading.py`), on the first
rows as pandas reads them without a header; converting real workbooks end to end is
tests/core/test_file_intake_bounds.py."""

from __future__ import annotations

import math

import pytest

from core.excel_reading import column_names, header_rows

NAN = math.nan


@pytest.mark.parametrize(
    ("top", "rows"),
    [
        ([["region", "amount"], ["north", 10]], (0, 1)),  # the usual sheet
        ([["Sales report Q1"], [NAN, NAN], ["region", "amount"], ["north", 10]], (2, 3)),  # a title above
        ([["Report"], ["region", "amount"], ["north", 10]], (1, 2)),  # a title right above the header
        (
            [
                ["Region", "Revenue", NAN, "Units", NAN],
                [NAN, "Jan", "Feb", "Jan", "Feb"],
                ["North", 10, 11, 1, 2],
            ],
            (0, 2),  # merged over two rows
        ),
        ([["name"], ["Ada"], ["Grace"]], (0, 1)),  # one column: its first row is not a title
        ([["a", NAN, "c"], ["x", "y", "z"]], (0, 1)),  # text alone below: no data to end a header at
        ([["region", 2024], ["north", 10]], (0, 1)),  # a year in the header
        ([], (0, 0)),
    ],
)
def test_the_header_is_found_below_titles_and_across_merged_rows(top, rows):
    assert header_rows(top) == rows


@pytest.mark.parametrize(
    ("header", "width", "names"),
    [
        ([["region", "amount"]], 2, ["region", "amount"]),
        (
            [["Region", "Revenue", NAN, "Units", NAN], [NAN, "Jan", "Feb", "Jan", "Feb"]],
            5,
            ["Region", "Revenue Jan", "Revenue Feb", "Units Jan", "Units Feb"],
        ),
        ([["a", NAN, "A"]], 4, ["a", "column_2", "A_2", "column_4"]),  # unnamed, and the same name twice
        ([["year", 2024.0, "  spaced\n name "]], 3, ["year", "2024", "spaced name"]),
    ],
)
def test_columns_are_named_from_every_header_row(header, width, names):
    assert column_names(header, width) == names
