"""Inside the sandbox: an Excel workbook from outside made a Parquet file DuckDB can read, as people
export them — a title above the header, header cells merged over two rows, a column of numbers with
an "n/a" in it — and in bounded work, whatever the bytes are.

`core/file_reading.py` calls `excel_to_parquet` in a sandbox step; nothing here runs in the bot. A
workbook is a zip of XML: its directory says how much it unpacks to before a byte of XML is parsed,
so a 12 MB "workbook" of 4 GB of rows, or one of more XML than the time a file is given reads, is
refused in milliseconds instead of holding the turn until the step is killed (`zipfile` stops a
member at the size its directory gave, so the check holds for a directory that lies). The first sheet is read once, without a header (`pd.read_excel`), and
the header found in its first rows; a column that still mixes kinds (text and numbers) is made text,
which Parquet needs (pyarrow refused it: "Expected bytes, got a 'int' object"). Library warnings
are silenced: they went into what the model read ("Pandas4Warning: ExcelFile.parse is deprecated").
"""

from __future__ import annotations

import math
import warnings
import zipfile

from core.steps import unique_names

UNPACKED_MB = 200  # XML a workbook's parts may unpack to, however long a step may read it
# XML pandas and openpyxl read a second, at most: measured on one core of the dev host, a sheet of 8
# columns of numbers 5.2 MB/s (14.6 MB of XML in 2.8 s of CPU), of numbers and words 3.6-4.0, of
# words 3.3-3.5. A workbook of more than `read_s` seconds of it at that speed is never read in time.
XML_MB_PER_S = 5
MAX_PARTS = 10_000  # zip members: a real workbook has dozens
HEADER_SCAN = 20  # rows searched for the header
HEADER_ROWS = 3  # at most, for a header merged over rows
LISTED = 20  # names of sheets and of columns made text, reported at most


class Unreadable(ValueError):
    """A workbook refused before it is parsed; the message is for the person and the model."""


def excel_to_parquet(src: str, dst: str, read_s: float = 0) -> dict:
    """Convert the first sheet of workbook `src` to Parquet file `dst` in `read_s` seconds (0: no time
    of its own); what was done, for the description: the sheet read and the others, the header's
    rows, the columns made text."""
    check_unpacked(src, read_s)
    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pd.ExcelFile(src) as book:
            sheets = [str(name) for name in book.sheet_names]
            raw = pd.read_excel(book, sheet_name=book.sheet_names[0], header=None)
        top = [list(row) for row in raw.head(HEADER_SCAN).itertuples(index=False)]
        start, end = header_rows(top)
        names = column_names([top[i] for i in range(start, end)], raw.shape[1])
        frame = raw.iloc[end:].reset_index(drop=True)
        frame.columns = names
        frame = frame[[n for n in names if not (n.startswith("column_") and frame[n].isna().all())]]
        frame = frame.infer_objects()
        text = [name for name in frame.columns if frame[name].dtype == object and _mixed(frame[name])]
        for name in text:
            frame[name] = frame[name].map(lambda v: None if _blank(v) else str(v)).astype(object)
        frame.to_parquet(dst, index=False)
    return {
        "sheet": sheets[0],
        "other_sheets": sheets[1 : LISTED + 1],
        "more_sheets": max(0, len(sheets) - 1 - LISTED),
        "header_rows": [start + 1, end] if end > start else [],
        "text_columns": text[:LISTED],
    }


def unpacked_limit_mb(read_s: float) -> int:
    """The most XML a workbook may unpack to when it has `read_s` seconds to be read (0: any time)."""
    return min(UNPACKED_MB, int(read_s * XML_MB_PER_S)) if read_s > 0 else UNPACKED_MB


def check_unpacked(src: str, read_s: float = 0) -> None:
    """Refuse a workbook whose parts would unpack past what `read_s` seconds read (UNPACKED_MB at most),
    by its zip directory alone."""
    try:
        with zipfile.ZipFile(src) as book:
            parts = book.infolist()
    except zipfile.BadZipFile:
        raise Unreadable(
            "It is not an Excel workbook (an .xlsx file is a zip archive; this is not one)."
        ) from None
    if len(parts) > MAX_PARTS:
        raise Unreadable(f"It holds {len(parts):,} parts; a workbook has dozens, so I did not open it.")
    unpacked, limit = sum(part.file_size for part in parts), unpacked_limit_mb(read_s)
    if unpacked > limit * 2**20:
        timed = f" in the {read_s:g} seconds I give a file" if limit < UNPACKED_MB else ""
        raise Unreadable(
            f"Its sheets unpack to {_size(unpacked)}, more than the {limit} MB I can read from a "
            f"workbook{timed}. Saving the sheet you need as CSV and sharing that works."
        )


def header_rows(top: list[list]) -> tuple[int, int]:
    """The header's rows in a sheet's first rows, as (first, end): title rows above it (a row of one
    cell where the sheet is wider, a blank row) are skipped; a header row with gaps that the next row
    of text fills (cells merged over two rows: "Revenue" above "Jan", "Feb") goes on into that row,
    while some row below holds a value that is not text (the data). (0, 0): no rows at all."""
    if not top:
        return 0, 0
    widest = max(len(_filled(row)) for row in top)
    start = next((i for i, row in enumerate(top) if len(_filled(row)) >= min(2, widest)), 0)
    end = start + 1
    data_below = [i for i, row in enumerate(top) if _filled(row) and not _all_text(row)]
    while end < len(top) and end - start < HEADER_ROWS and any(i > end for i in data_below):
        above, row = top[end - 1], top[end]
        fills_gaps = any(_blank(a) and not _blank(b) for a, b in zip(above, row, strict=False))
        if not (_filled(row) and _all_text(row) and fills_gaps):
            break
        end += 1
    return start, end


def column_names(header: list[list], width: int) -> list[str]:
    """One name per column from the header's rows: an upper row's name carried right over the blanks
    a merged cell leaves ("Revenue", "Revenue"), the rows' parts joined ("Revenue Jan"); a column
    without one is `column_<n>`; names made unique as pandas would not ("amount", "amount_2")."""
    parts: list[list[str]] = [[] for _ in range(width)]
    for depth, row in enumerate(header):
        carried = ""
        for i in range(width):
            cell = row[i] if i < len(row) else None
            if not _blank(cell):
                carried = _cell_text(cell)
                parts[i].append(carried)
            elif depth < len(header) - 1 and carried:  # an upper row's merged cell spans it
                parts[i].append(carried)
    joined = [" ".join(dict.fromkeys(pieces)) or f"column_{i + 1}" for i, pieces in enumerate(parts)]
    return unique_names(joined, first_suffix=2)  # a second "Revenue" is "Revenue_2", as in a sheet


def _blank(value) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str):
        return not value.strip()
    try:
        import pandas as pd

        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _filled(row: list) -> list:
    return [cell for cell in row if not _blank(cell)]


def _all_text(row: list) -> bool:
    return all(isinstance(cell, str) for cell in _filled(row))


def _cell_text(cell) -> str:
    if isinstance(cell, float) and cell.is_integer():
        return str(int(cell))  # a year in a header read as 2024.0
    return " ".join(str(cell).split())


def _mixed(column) -> bool:
    """Whether an object column holds values of more than one kind (Parquet needs one)."""
    kinds = {type(v) for v in column if not _blank(v)}
    return len(kinds) > 1 or (len(kinds) == 1 and kinds != {str})


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"
