"""Reading a data file the bot placed in a workspace: its rows, columns and first rows, told from
inside the sandbox. One path for every file that comes from outside — an S3 object `load_file`
copied (core/tools_s3.py) and a file a person shared with their question (core/file_intake.py).

The bytes are untrusted (anyone may upload a crafted workbook or CSV), so they are parsed only by a
step in the session's sandbox, never in the bot process: `core/file_reading.py` reads the file in
one step (an Excel workbook converted to Parquet first, a CSV that is not UTF-8 copied to one that
is) and prints its facts as JSON; here they become the model's words. Everything in them came from
the file — column and sheet names, values, DuckDB's error that quotes a line — so all of it is
shown marked: names and values as JSON strings, with every invisible control or format character
(bidi overrides, zero-width and tag characters) escaped, and a line break never more than `\\n`.
The file's name reaches the step's code as a Python literal, however it is spelled.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import unicodedata
from dataclasses import dataclass

from core.file_reading import TYPE_CANDIDATES, from_clause
from core.sandbox import Sandbox, StepRequest, StepResult
from core.wording import counted, error_line, step_error

UNREAD_CHARS = 800
REPORT_BYTES = 100_000  # the step's JSON, at most (100 names and 100 values of 100 characters, 4 bytes each)
COLUMNS_BYTES = 1_200  # of the "Columns:" line
ROW_BYTES = 400  # of a preview row's line
CELL_CHARS = 60  # of a preview value, after its escapes
NAME_CHARS = 120
# Not characters of a line: controls, format characters (U+202E, U+200B, the U+E00xx tags),
# surrogates, private use, unassigned; and line and paragraph separators, which some readers break on.
_SHOWN_ESCAPED = ("C", "Zl", "Zp")

_TYPE = re.compile(r"[A-Za-z0-9_ (),\[\]]+")
ENCODINGS = ("Windows-1252", "Latin-1", "UTF-16")  # what core/file_reading.py may report

_REPORT = """
from core.file_reading import report
report({name!r}, {kind!r}, {copy_to!r}, {memory_mb!r}, {read_s!r})
"""


@dataclass(frozen=True)
class Description:
    """What a step said about one workspace file: what to query it as, and what it holds."""

    name: str  # the file to query: the Parquet file a workbook became, a CSV's UTF-8 copy, else the file
    text: str = ""  # for the model: "Rows: 4", "Columns: "region" VARCHAR, …", the first rows
    unread: str = ""  # why it could not be read, for the model (bounded); "" when it was
    excel_failed: bool = False  # `unread` is the Excel conversion's
    source: str = ""  # what to put after FROM, when it is more than the name (a CSV read without BIGNUM)
    reason: str = ""  # why it could not be read, in a sentence for the person ("" : `unread_line` is shown)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.unread

    @property
    def unread_line(self) -> str:
        """Why it could not be read, in one line (the exception's first)."""
        return error_line(self.unread) or self.unread[:200]

    @property
    def query_from(self) -> str:
        return self.source or "'" + self.name.replace("'", "''") + "'"


def converted_name(name: str, kind: str) -> str:
    """Where a workbook's Parquet file, or a CSV's UTF-8 copy, goes: "" for kinds never converted."""
    stem = name.rsplit(".", 1)[0]
    return {"xlsx": f"{stem}.parquet", "csv": f"{stem}.utf8.csv", "tsv": f"{stem}.utf8.tsv"}.get(kind, "")


async def describe_file(
    sandbox: Sandbox, step: StepRequest, name: str, kind: str, *, file_s: float = 0
) -> Description:
    """Convert (Excel, a CSV not in UTF-8) and describe the workspace file `name` of kind `kind` in one
    sandbox step under `step`'s session and limits. `file_s` is the time a file is given (default: the
    step's limit): a workbook of more than that reads is refused at once, and a step given less (what
    was left of a message's time for its files) says so when it runs out. Never raises for the
    file's own faults: those are `unread`; a step stopped at its time limit is `timed_out`."""
    file_s = file_s or step.timeout_s
    copy_to = converted_name(name, kind)
    code = _REPORT.format(name=name, kind=kind, copy_to=copy_to, memory_mb=step.memory_mb, read_s=file_s)
    request = dataclasses.replace(step, kind="python", code=code, save_as=None, output_bytes=REPORT_BYTES)
    started = time.monotonic()
    result = await sandbox.run(request)
    if not result.ok:
        return _not_run(name, result, step.timeout_s, time.monotonic() - started, file_s)
    facts = _facts(result.output)
    if facts is None:
        return Description(
            name, unread="The file's description came back unreadable.", excel_failed=kind == "xlsx"
        )
    if isinstance(facts.get("error"), str):
        excel, unread = facts.get("stage") == "excel", _bounded(facts["error"])
        reason = unread if facts.get("for_people") is True else ""  # a refusal the reader wrote for them
        return Description(name, unread=unread, excel_failed=excel, reason=reason)
    queried = copy_to if facts.get("converted") and copy_to else name
    source = from_clause(queried, True) if facts.get("type_candidates") else ""
    return Description(queried, text=description_text(facts, queried), source=source)


def _not_run(name: str, result: StepResult, limit_s: float, ran_s: float, file_s: float) -> Description:
    """A step that failed as a step: stopped at its time limit (a file's, or the rest of its
    message's), killed (memory), or refused."""
    if result.killed and ran_s >= limit_s and limit_s < file_s:
        return Description(
            name,
            unread=f"Reading it was stopped after {limit_s:.2g} s, all that was left of the time for "
            "reading this message's files. It is in the workspace: a query on it may well work.",
            reason=f"Reading it was stopped after {limit_s:.2g} s, all that was left of the time I "
            "have for reading one message's files.",
            timed_out=True,
        )
    if result.killed and ran_s >= limit_s:
        return Description(
            name,
            unread=f"Reading it was stopped after {limit_s:g} s, the time a file is given to be read. "
            "It is in the workspace, but a query on it may take as long.",
            reason=f"Reading it took longer than the {limit_s:g} seconds I give a file.",
            timed_out=True,
        )
    reason = "Reading it took more memory than I have for that." if result.killed else ""
    return Description(name, unread=_failure(result), reason=reason)


def _facts(output: str) -> dict | None:
    """The report's JSON line, or None. The last that is one: a note the step runner adds after a
    step's output (a Parquet column it made portable) comes after it."""
    for line in reversed(output.strip().splitlines()):
        try:
            facts = json.loads(line)
        except ValueError:
            continue
        if isinstance(facts, dict):
            return facts
    return None


def description_text(facts: dict, queried: str) -> str:
    """The model's lines about a file read (not indented: the block indents them)."""
    lines = _conversion_lines(facts)
    lines.append(f"Rows: {_int(facts.get('rows'))}")
    columns = [f"{quoted(str(n))} {_plain_type(t)}" for n, t in _pairs(facts.get("columns"))]
    more = _int(facts.get("more_columns"))
    lines.append("Columns: " + _joined(columns, COLUMNS_BYTES, more))
    lines += _decimal_comma_lines(facts, queried)
    nested = [quoted(str(n)) for n in _list(facts.get("too_nested"))]
    preview = [row for row in _list(facts.get("preview")) if isinstance(row, list)]
    if preview:
        shown = [quoted(str(n)) for n in _list(facts.get("preview_columns"))]
        lines.append(
            f"First rows, as JSON strings, of {', '.join(shown)}:"
            if nested or more
            else "First rows, as JSON strings:"
        )
        lines += ["  " + _row(row) for row in preview]
    if nested:
        lines.append(f"Not shown, nested too deep to preview: {', '.join(nested)}.")
    return "\n".join(lines)


def _conversion_lines(facts: dict) -> list[str]:
    lines = []
    if isinstance(facts.get("sheet"), str):
        others = [quoted(str(s)) for s in _list(facts.get("other_sheets"))]
        if n := _int(facts.get("more_sheets")):
            others.append(f"and {counted(n, 'more sheet')}")
        lines.append(
            f"Converted its first sheet, {quoted(facts['sheet'])}"
            + (f"; not the others: {', '.join(others)}." if others else " (its only one).")
        )
        header = [_int(r) for r in _list(facts.get("header_rows"))]
        if len(header) == 2 and (header[0] > 1 or header[1] > header[0]):
            first, last = header
            rows = f"row {first}" if last <= first else f"rows {first}-{last}"
            joined = ", joined into one name per column" if last > first else ""
            above = "; the rows above it (a title) were left out" if first > 1 else ""
            lines.append(f"Its header is {rows} of the sheet{joined}{above}.")
        if text := [quoted(str(n)) for n in _list(facts.get("text_columns"))]:
            lines.append(f"Columns that mix numbers and text were made text: {', '.join(text)}.")
    if facts.get("encoding") in ENCODINGS:
        lines.append(f"It is in {facts['encoding']}, not UTF-8: the copy to query is UTF-8.")
    if facts.get("type_candidates"):
        lines.append(
            "It holds a number over a thousand digits long, which DuckDB's usual reading takes minutes "
            f"to type (as BIGNUM): it was read with auto_type_candidates={list(TYPE_CANDIDATES)}; "
            "read it the same way."
        )
    return lines


def _decimal_comma_lines(facts: dict, queried: str) -> list[str]:
    lines = []
    for entry in _list(facts.get("decimal_comma")):
        if not (isinstance(entry, list) and len(entry) == 3):
            continue
        name, sample, separator_reads = entry
        column = quoted(str(name))
        how = (
            f"read_csv('{queried}', decimal_separator=',') reads it as numbers"
            if separator_reads is True
            else f"CAST(replace(replace({column}, '.', ''), ',', '.') AS DOUBLE) makes them numbers"
        )
        lines.append(f"{column} is text of numbers with a decimal comma (e.g. {quoted(str(sample))}): {how}.")
    return lines


def quoted(text: str, limit: int = NAME_CHARS) -> str:
    """Text from a file, for the model: a JSON string on one line, cut at `limit` characters, with
    every control, format or other invisible character escaped (`\\u202e`, not a reversed line)."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return _escaped(json.dumps(cut, ensure_ascii=False))


def escaped_lines(text: str) -> list[str]:
    """Multi-line text from a file (an error quoting a line of it), one line of ours per "\\n", each
    with its invisible characters escaped: a lone "\\r" or U+2028 starts no line of its own."""
    return [_escaped(line) for line in text.split("\n")]


def _escaped(text: str) -> str:
    return "".join(_escape(c) if unicodedata.category(c).startswith(_SHOWN_ESCAPED) else c for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    if code > 0xFFFF:  # a JSON string's escape: the surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _row(values: list) -> str:
    cells = ["null" if v is None else quoted(str(v), CELL_CHARS) for v in values]
    return _joined(cells, ROW_BYTES, 0, open_="[", close="]")


def _joined(items: list[str], budget: int, more: int, *, open_: str = "", close: str = "") -> str:
    """Items joined with ", " within `budget` bytes; those left out are counted."""
    kept: list[str] = []
    used = len(open_) + len(close)
    for item in items:
        if used + len(item.encode()) + 2 > budget:
            break
        kept.append(item)
        used += len(item.encode()) + 2
    left = len(items) - len(kept) + more
    tail = f" … and {counted(left, 'more column')}" if left and not open_ else (" …" if left else "")
    return open_ + ", ".join(kept) + close + tail


def _plain_type(kind) -> str:
    """A DuckDB type as it is (`DECIMAL(18,3)`, `BIGINT[]`), or quoted when a struct's field names
    (from the file) put anything else in it."""
    text = str(kind)[:60]
    return text if _TYPE.fullmatch(text) else quoted(text, 60)


def _pairs(value) -> list[tuple]:
    return [tuple(p) for p in _list(value) if isinstance(p, list) and len(p) == 2]


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _bounded(text: str) -> str:
    said = text.strip() or "unknown error"
    return said if len(said) <= UNREAD_CHARS else said[: UNREAD_CHARS - 1] + "…"


def _failure(result: StepResult) -> str:
    """The step's error without its traceback: the exception and the lines it goes on with (DuckDB's
    say what it read and what to try), bounded."""
    return _bounded(step_error(result.error))
