"""The rows the model reads of a result (`core/preview.py`): every Arrow type as one readable line,
numbers as they are, the shape `core/tools.py` counts on, and the byte bound."""

from __future__ import annotations

import datetime
import decimal

import duckdb
import pyarrow as pa
import pytest

from core.preview import MAX_CELL, NULL, cell, preview_table

BIGNUMERIC = decimal.Decimal(
    "-578960446186580977117854925043439539266.34992332820282019728792003956564819967"
)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, NULL),
        (42, "42"),
        (-7, "-7"),
        (True, "true"),
        (0.1 + 0.2, "0.3"),
        (1234567.891, "1234567.891"),  # pandas showed 1.234568e+06
        (123456789.125, "123456789.125"),  # 10 digits showed 123456789.1: the cents went
        (12345678901.0, "12345678901"),  # and 1.23456789e+10: one flight off in a count
        (98765432109.87, "98765432109.87"),
        (3.0, "3"),
        (-0.0, "-0"),
        (decimal.Decimal("0E-9"), "0.000000000"),  # NUMERIC's zero, not 0E-9
        (decimal.Decimal("-5.00E-7"), "-0.000000500"),
        (decimal.Decimal("1.5" + "0" * 37), "1.5"),  # BIGNUMERIC's scale of 38
        (decimal.Decimal("12345678901234567890123.456"), "12345678901234567890123.456"),
        (2.5e-12, "2.5e-12"),
        (float("nan"), "NaN"),
        (float("-inf"), "-inf"),
        (decimal.Decimal("1.50"), "1.50"),
        (datetime.date(2013, 1, 1), "2013-01-01"),
        (datetime.datetime(2013, 1, 1, 5, 30), "2013-01-01 05:30:00"),
        (datetime.datetime(2013, 1, 1, 5, tzinfo=datetime.UTC), "2013-01-01 05:00:00+00:00"),
        ("UA", "UA"),
        ("two\nlines\tand\x1b[2Jescape", "two\\nlines\\tand\\x1b[2Jescape"),
        (b"\x00\xff", "00ff"),
        ([1, None], "[1, NULL]"),
        ({"a": 1, "b": "x"}, "{a: 1, b: x}"),
        ("é" * 100, "é" * (MAX_CELL - 1) + "…"),
        (BIGNUMERIC, str(BIGNUMERIC)),  # cut at 60 characters, mid-digit: another number
        (-(10**39) + 1, str(-(10**39) + 1)),
    ],
)
def test_a_value_is_one_bounded_line(value, shown):
    assert cell(value) == shown


def test_numbers_right_text_left_a_header_and_a_line_per_row_shown():
    table = pa.table({"carrier": ["UA", "B6", "EV"], "delayed": [12345, 7, None]})
    assert preview_table(table, 2, 1000).splitlines() == [
        "carrier  delayed",
        "UA         12345",
        "B6             7",
    ]


def test_the_newlines_count_the_rows_shown_whatever_the_cells_hold():
    """core/tools.py tells the model there are more rows when `rows > preview.count("\\n")`."""
    table = pa.table({"note": ["a\nb", "c\r\nd", "e"], "n": [1, 2, 3]})
    for shown in (0, 1, 3, 10):
        assert preview_table(table, shown, 10_000).count("\n") == min(shown, 3)


def test_an_empty_result_is_its_header():
    con = duckdb.connect()
    table = con.sql("SELECT 1 AS x, 'a' AS s WHERE false").to_arrow_table()
    assert preview_table(table, 10, 1000) == "x  s"


def test_the_preview_stays_within_its_bytes():
    table = pa.table({f"c{i}": ["x" * 50] * 100 for i in range(40)})
    text = preview_table(table, 100, 2000)
    assert len(text.encode()) <= 2000 and text.endswith("[output cut at 2000 bytes]")


def test_duckdb_results_of_every_common_type():
    con = duckdb.connect()
    table = con.sql(
        "SELECT 1::TINYINT AS i, 2.5::DOUBLE AS f, 3.25::DECIMAL(10,2) AS d, 'x' AS s, DATE '2013-01-01' AS day, "
        "TIMESTAMP '2013-01-01 05:00' AS ts, [1, 2] AS l, {'k': 1} AS st, NULL::INT AS missing, true AS b"
    ).to_arrow_table()
    header, row = preview_table(table, 10, 1000).splitlines()
    assert header.split() == ["i", "f", "d", "s", "day", "ts", "l", "st", "missing", "b"]
    assert row.split() == [
        "1",
        "2.5",
        "3.25",
        "x",
        "2013-01-01",
        "2013-01-01",
        "05:00:00",
        "[1,",
        "2]",
        "{k:",
        "1}",
        NULL,
        "true",
    ]


def test_values_python_cannot_hold_are_shown_not_a_failed_step():
    con = duckdb.connect()
    table = con.sql(
        "SELECT 'infinity'::TIMESTAMP AS t, '-infinity'::DATE AS d, DATE '2013-01-01' AS ok"
    ).to_arrow_table()
    header, row = preview_table(table, 10, 1000).splitlines()
    assert header.split() == ["t", "d", "ok"]
    assert row.split() == ["infinity", "-infinity", "2013-01-01"]  # `<value out of range: 2147483647>`


def test_a_map_is_shown_as_its_keys_and_values():
    """DuckDB's `MAP {'k1': 10, 'k2': 20}` was shown as pairs, `[[k1, 10], [k2, 20]]`."""
    table = duckdb.sql("SELECT MAP {'k1': 10, 'k2': 20} AS mp, [MAP {1: 'a'}] AS maps").to_arrow_table()
    assert preview_table(table, 1, 1000).splitlines()[1] == "{k1: 10, k2: 20}  [{1: a}]"


def test_a_map_a_dict_cannot_hold_is_shown_as_its_pairs():
    """`histogram(d)` is keyed by dates; a map with a repeated key lost all but one of them."""
    table = duckdb.sql(
        "SELECT histogram(d) AS hist FROM (VALUES (DATE '2024-01-02'), (DATE '2024-01-02')) v(d)"
    ).to_arrow_table()
    table = table.append_column(
        "dup", pa.MapArray.from_arrays([0, 2], pa.array(["k", "k"]), pa.array([1, 2]))
    )
    assert preview_table(table, 1, 1000).splitlines()[1] == "[[2024-01-02, 2]]  [[k, 1], [k, 2]]"
