"""The few rows of a result the model reads: a bounded, aligned text table made straight from Arrow.

Why not pandas: `to_pandas` + `DataFrame.to_string` on ten rows cost a step child 5-7 ms of its
~15 ms of SQL work (a fork of the fork server touching pandas' formatting machinery, page by page),
on every SQL, warehouse and BigQuery step. Arrow gives the values as Python objects in microseconds,
and a table of ten rows needs no more than `str.rjust`. It also shows numbers as they are: pandas
rounds floats to 6 significant digits (1234567.891 became 1.234568e+06); here they keep 15 (all a
float64 holds for certain: 10 turned 12,345,678,901 into 1.23456789e+10, and a total's cents went).

Shape (the model and `core/tools.py` rely on it): a header line, then one line per row, joined by
newlines — so the number of newlines is the number of rows shown. Numbers are right-aligned, text
left-aligned; a cell never holds a newline or a control character; long cells end in "…" (numbers are
never cut).
"""

from __future__ import annotations

import datetime
import decimal
import math

from core.arrow_values import py_values

MAX_CELL = 60  # characters of one cell
FLOAT_DIGITS = 15  # significant digits of a float (all a float64 holds exactly; 0.1 + 0.2 shows 0.3)
DECIMAL_PLACES = 9  # a decimal's places shown as they are; past this, trailing zeros go (BIGNUMERIC's 38)
NULL = "NULL"
_CONTROL = {i: f"\\x{i:02x}" for i in (*range(32), 127)} | {10: "\\n", 13: "\\r", 9: "\\t"}


def clip(text: str, limit: int) -> str:
    """`text` at most `limit` bytes of UTF-8, saying where it was cut."""
    if len(text.encode()) <= limit:
        return text
    cut = text.encode()[: max(0, limit - 80)].decode(errors="ignore")
    return cut + f"\n… [output cut at {limit} bytes]"


def preview_table(table, rows: int, max_bytes: int) -> str:
    """The first `rows` rows of an Arrow table as aligned text, at most `max_bytes` bytes."""
    head = table.slice(0, max(rows, 0))
    names = [str(name) for name in table.column_names]
    columns = []
    for name, column in zip(names, head.columns, strict=True):
        cells = _cells(column)
        numeric = _is_numeric(column.type)
        width = max([len(name), *map(len, cells)])
        align = str.rjust if numeric else str.ljust
        columns.append([align(_one_line(name), width), *(align(c, width) for c in cells)])
    if not columns:
        return clip(f"({head.num_rows} rows, no columns)", max_bytes)
    lines = ("  ".join(parts).rstrip() for parts in zip(*columns, strict=True))
    return clip("\n".join(lines), max_bytes)


def _cells(column) -> list[str]:
    """A column's values as cells (a map as `{k1: 10}` when it can be a dict: `core/arrow_values.py`).
    Values Python cannot hold (DuckDB's `infinity` dates and timestamps, years past 9999) are shown
    as DuckDB writes them (`infinity`, `12000-01-01`: `core/portable_columns.py`), never a failed
    step."""
    try:
        return [cell(value) for value in py_values(column)]
    except (OverflowError, ValueError):
        import pyarrow as pa

        from core.portable_columns import portable

        try:
            text = portable(pa.table({"c": column}))[0].column(0)
            return [cell(value) for value in text.cast(pa.string()).to_pylist()]
        except Exception:  # no string form at all: say so rather than fail the step
            return ["?"] * len(column)


def cell(value) -> str:
    """One value as the model reads it: on one line, at most `MAX_CELL` characters — but a number whole,
    however long: a BIGNUMERIC cut at 60 characters was another number, its last digits gone."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        return _float(value)
    elif isinstance(value, decimal.Decimal):
        return _decimal(value)
    elif isinstance(value, int):
        return str(value)
    elif isinstance(value, datetime.datetime | datetime.date | datetime.time):
        text = str(value)
    elif isinstance(value, bytes):
        text = value.hex() if len(value) <= MAX_CELL // 2 else value[: MAX_CELL // 2].hex() + "…"
    elif isinstance(value, dict | list | tuple):
        text = _nested(value)
    else:
        text = str(value)
    return _one_line(text)


def _float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value.is_integer() and abs(value) < 2**53:  # a count or a sum of whole units: every digit
        return str(int(value)) if value or math.copysign(1, value) > 0 else "-0"
    return f"{value:.{FLOAT_DIGITS}g}"


def _decimal(value: decimal.Decimal) -> str:
    """Positional, never scientific (NUMERIC's zero was `0E-9`, 0.0000005 `5.00E-7`); the places a
    column's scale gives, up to DECIMAL_PLACES, past which trailing zeros go."""
    if not value.is_finite():
        return str(value)
    text = format(value, "f")
    whole, _, places = text.partition(".")
    if len(places) > DECIMAL_PLACES:
        places = places.rstrip("0") or "0"
    return f"{whole}.{places}" if places else whole


def _nested(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {cell(v)}" for k, v in value.items()) + "}"
    return "[" + ", ".join(cell(v) for v in value) + "]"


def _one_line(text: str) -> str:
    text = text.translate(_CONTROL)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _is_numeric(arrow_type) -> bool:
    import pyarrow.types as t

    return t.is_integer(arrow_type) or t.is_floating(arrow_type) or t.is_decimal(arrow_type)
