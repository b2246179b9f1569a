"""Inside the sandbox: one file from outside (shared with a question, loaded from S3) read and
described as one line of JSON, in bounded work whatever its bytes are.

`core/file_describe.py` runs `report` in a sandbox step and turns its facts into the model's words;
nothing here runs in the bot. Each bound answers a file that held a turn for minutes:
- DuckDB reads a list nested 30 deep in exponential time (3.7 KB of Parquet: past a 120 s step), so
  columns nested past DEEPEST_PREVIEW are left out of the preview (their type is still listed);
- its CSV sniffer types a number a million digits long as BIGNUM and takes a minute or more over it,
  `all_varchar` too: a CSV with a run of more than LONG_DIGITS digits is read without that type,
  and the model is told how (`type_candidates`);
- a preview value is cut to VALUE_CHARS by DuckDB itself, and the preview is PREVIEW_ROWS rows of at
  most PREVIEW_COLUMNS columns (DuckDB's box printout drew every value whole);
- a workbook is checked by its zip directory before it is parsed (`core/excel_reading.py`): one of
  more XML than the time a file is given reads is refused at once.
A CSV that is not UTF-8 (a Windows export in Windows-1252) gets a UTF-8 copy: DuckDB's own
`latin-1` refuses Windows-1252's € and curly quotes, and its encodings extension is not installed
in the sandbox. A text column of numbers written with a decimal comma ("847,43") is named, with
whether `decimal_separator=','` reads it as numbers.
"""

from __future__ import annotations

import codecs
import json
import re
import traceback
from pathlib import Path

from core.excel_reading import Unreadable, excel_to_parquet

PREVIEW_ROWS = 5
PREVIEW_COLUMNS = 20
VALUE_CHARS = 100
LISTED_COLUMNS = 100  # names and types listed; the count says how many more
NAME_CHARS = 100
DEEPEST_PREVIEW = 4  # levels of LIST/STRUCT/MAP a previewed column may have
LONG_DIGITS = 1_000  # a longer run of digits in a CSV: read without BIGNUM
# DuckDB's own candidates without BIGNUM (and HUGEINT, whose numbers DOUBLE holds)
TYPE_CANDIDATES = ("BOOLEAN", "BIGINT", "DOUBLE", "TIME", "DATE", "TIMESTAMP", "VARCHAR")
DECIMAL_SAMPLE = 200  # values of a text column looked at for a decimal comma
_DECIMAL_COMMA = re.compile(r"[-+]?(?:\d{1,3}(?:\.\d{3})+|\d+),\d+")
_DIGIT_RUNS = bytes(49 if 48 <= b <= 57 else 48 for b in range(256))  # digits -> "1", the rest "0"
_LONG_RUN = b"1" * (LONG_DIGITS + 1)
_NOT_CP1252 = (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d")  # the bytes Windows-1252 leaves out
CHUNK = 16 * 2**20
_NESTED = ("list", "struct", "map", "array", "union")
ERROR_CHARS = 2_000


def report(path: str, kind: str, copy_to: str = "", memory_mb: int = 0, read_s: float = 0) -> None:
    """Print what workspace file `path` of `kind` holds as one JSON line. `copy_to`: where a workbook's
    Parquet file or a CSV's UTF-8 copy goes; `read_s`: the time a file is given (a workbook of more
    than that reads is refused at once). A file that cannot be read is {"error": …}, with "stage":
    "excel" for a workbook not converted and "for_people" when the error is a sentence of ours."""
    stage = "read"
    try:
        facts: dict = {}
        source = path
        if kind == "xlsx":
            stage = "excel"
            facts.update(excel_to_parquet(path, copy_to, read_s))
            source, stage = copy_to, "read"
        elif kind in ("csv", "tsv"):
            source, read = _csv_source(path, copy_to)
            facts.update(read)
        if source != path:
            facts["converted"] = True
        facts.update(_described(source, facts.get("type_candidates", False), memory_mb))
        if kind in ("csv", "tsv"):
            facts.update(_decimal_commas(source, facts, memory_mb))
    except Exception as exc:  # the file's own fault (or a library's): one sentence, not a traceback
        facts = {"error": _exception_text(exc), "stage": stage, "for_people": isinstance(exc, Unreadable)}
    print(json.dumps(facts, ensure_ascii=False))


def _csv_source(path: str, copy_to: str) -> tuple[str, dict]:
    """The file DuckDB is to read — `path`, or its UTF-8 copy at `copy_to` — and what was found. The
    file is looked through in chunks (an S3 object may be 512 MB): memory stays a few chunks."""
    scan = _scan(path)
    found = {"type_candidates": True} if scan["long_digits"] else {}
    codec = _codec(scan)
    if codec is None:
        return path, found
    decoder = codecs.getincrementaldecoder(codec[0])()
    with open(path, "rb") as src, open(copy_to, "w", encoding="utf-8", newline="") as dst:
        while chunk := src.read(CHUNK):
            dst.write(decoder.decode(chunk))
        dst.write(decoder.decode(b"", final=True))
    return copy_to, {**found, "encoding": codec[1]}


def _scan(path: str) -> dict:
    """One pass over the bytes: UTF-8 or not, any NUL byte, any byte Windows-1252 leaves out, any
    run of digits longer than LONG_DIGITS (across chunk edges too)."""
    utf8 = codecs.getincrementaldecoder("utf-8")()
    found = {"utf8": True, "nul": False, "cp1252": True, "long_digits": False}
    run = 0  # digits at the end of what was read so far
    with open(path, "rb") as file:
        found["bom"] = file.read(2)
        file.seek(0)
        while chunk := file.read(CHUNK):
            if found["utf8"]:
                try:
                    utf8.decode(chunk)
                except UnicodeDecodeError:
                    found["utf8"] = False
            found["nul"] = found["nul"] or b"\x00" in chunk
            found["cp1252"] = found["cp1252"] and not any(b in chunk for b in _NOT_CP1252)
            digits = chunk.translate(_DIGIT_RUNS)
            lead = len(digits) - len(digits.lstrip(b"1"))
            found["long_digits"] = found["long_digits"] or run + lead > LONG_DIGITS or _LONG_RUN in digits
            run = run + lead if lead == len(digits) else len(digits) - len(digits.rstrip(b"1"))
    if found["utf8"]:
        try:
            utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            found["utf8"] = False
    return found


def _codec(scan: dict) -> tuple[str, str] | None:
    """(codec, name for people) of text that is not UTF-8; None for UTF-8, or for bytes that are no
    text in any of these (a NUL byte: DuckDB then says what it found)."""
    if scan["bom"] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16", "UTF-16"
    if scan["utf8"] or scan["nul"]:
        return None
    return ("cp1252", "Windows-1252") if scan["cp1252"] else ("latin-1", "Latin-1")


def _connect(memory_mb: int):
    from core.steps import connect_duckdb

    return connect_duckdb(Path.cwd(), memory_mb=memory_mb or None)


def from_clause(name: str, type_candidates: bool = False, **options: str) -> str:
    """What to put after FROM to read workspace file `name` as described (also the model's words)."""
    quoted = "'" + name.replace("'", "''") + "'"
    if not type_candidates and not options:
        return quoted
    args = [quoted]
    if type_candidates:
        args.append("auto_type_candidates=[" + ", ".join(f"'{t}'" for t in TYPE_CANDIDATES) + "]")
    args += [f"{key}='{value}'" for key, value in options.items()]
    return f"read_csv({', '.join(args)})"


def _described(source: str, type_candidates: bool, memory_mb: int) -> dict:
    """Rows, columns and the first rows' values (as text, each cut by DuckDB) of `source`."""
    con = _connect(memory_mb)
    from_ = from_clause(source, type_candidates)
    relation = con.sql("SELECT * FROM " + from_)
    names, types = list(relation.columns), list(relation.types)
    rows = con.sql("SELECT count(*) FROM " + from_).fetchall()[0][0]
    shown = [i for i, kind in enumerate(types) if _depth(kind) <= DEEPEST_PREVIEW][:PREVIEW_COLUMNS]
    cells = ", ".join(f"left(CAST({_ident(names[i])} AS VARCHAR), {VALUE_CHARS})" for i in shown)
    preview = con.sql(f"SELECT {cells} FROM {from_} LIMIT {PREVIEW_ROWS}").fetchall() if shown else []
    return {
        "rows": int(rows),
        "columns": [[_cut(n), str(t)[:60]] for n, t in zip(names[:LISTED_COLUMNS], types, strict=False)],
        "more_columns": max(0, len(names) - LISTED_COLUMNS),
        "preview_columns": [_cut(names[i]) for i in shown],
        "too_nested": [_cut(names[i]) for i, k in enumerate(types) if _depth(k) > DEEPEST_PREVIEW][:20],
        "preview": [list(row) for row in preview],
    }


def _decimal_commas(source: str, facts: dict, memory_mb: int) -> dict:
    """Text columns whose values are all numbers with a decimal comma, a sample of each, and whether
    `decimal_separator=','` reads them as numbers (it does not read thousands points: "1.234,50")."""
    con = _connect(memory_mb)
    texts = [name for name, kind in facts["columns"] if kind == "VARCHAR"][:PREVIEW_COLUMNS]
    if not texts:
        return {}
    from_ = from_clause(source, facts.get("type_candidates", False))
    cells = ", ".join(f"left({_ident(name)}, 40)" for name in texts)
    sample = con.sql(f"SELECT {cells} FROM {from_} LIMIT {DECIMAL_SAMPLE}").fetchall()
    found = []
    for i, name in enumerate(texts):
        values = [row[i] for row in sample if row[i] is not None and row[i].strip()]
        if values and all(_DECIMAL_COMMA.fullmatch(v.strip()) for v in values):
            found.append([name, values[0]])
    if not found:
        return {}
    separated = from_clause(source, facts.get("type_candidates", False), decimal_separator=",")
    retyped = dict(zip(*_names_and_types(con, separated), strict=False))
    numeric = ("DOUBLE", "FLOAT", "BIGINT", "INTEGER", "HUGEINT")
    return {"decimal_comma": [[n, v, str(retyped.get(n, "")).startswith(numeric)] for n, v in found]}


def _names_and_types(con, from_: str) -> tuple[list[str], list]:
    try:
        relation = con.sql("SELECT * FROM " + from_)
    except Exception:  # the other reading fails: only the REPLACE way is offered
        return [], []
    return list(relation.columns), list(relation.types)


def _depth(kind, limit: int = DEEPEST_PREVIEW + 1) -> int:
    """Levels of nesting of a DuckDB type, counted up to `limit` (a type 500 deep is not walked)."""
    if limit <= 0 or getattr(kind, "id", "") not in _NESTED:
        return 0
    return 1 + max((_depth(child, limit - 1) for _, child in kind.children), default=0)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _cut(text: str) -> str:
    return text if len(text) <= NAME_CHARS else text[: NAME_CHARS - 1] + "…"


def _exception_text(exc: Exception) -> str:
    """The exception as Python prints its last line (`_duckdb.InvalidInputException: …`, with the
    lines DuckDB adds), or a refusal's own sentence; bounded."""
    if isinstance(exc, Unreadable):
        return str(exc)
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"
