"""Reading a data file the bot placed in a workspace: its rows, columns and first rows, told from
inside the sandbox. One path for every file that comes from outside — an S3 object `load_file`
copied (core/tools_s3.py) and a file a person shared with their question (core/file_intake.py).

The bytes are untrusted (anyone may upload a crafted workbook or CSV), so they are parsed only by a
step in the session's sandbox, never in the bot process: DuckDB reads CSV, TSV, Parquet and JSON by
the file's extension; an Excel workbook, which DuckDB cannot read, is first converted to Parquet
by pandas (openpyxl) in a step of its own. The file's name reaches the step's code as a Python
literal, however it is spelled.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from core.sandbox import Sandbox, StepRequest, StepResult
from core.wording import error_line, step_error

PREVIEW_ROWS = 5
UNREAD_CHARS = 800

_DESCRIBE = """
import duckdb
name = {name!r}
con = duckdb.connect()
source = "'" + name.replace("'", "''") + "'"
rel = con.sql("SELECT * FROM " + source)
print("Rows:", con.sql("SELECT count(*) FROM " + source).fetchall()[0][0])
print("Columns:", ", ".join(f"{{c}} {{t}}" for c, t in zip(rel.columns, rel.types)))
print(rel.limit({rows}))
"""
# The first sheet becomes the Parquet file; the others are named, so the model can say they were left.
_EXCEL = """
import pandas as pd
book = pd.ExcelFile({src!r})
book.parse(book.sheet_names[0]).to_parquet({dst!r}, index=False)
if len(book.sheet_names) > 1:
    print("Converted its first sheet,", repr(book.sheet_names[0]) + "; not the others:", ", ".join(map(repr, book.sheet_names[1:])))
"""


@dataclass(frozen=True)
class Description:
    """What a step said about one workspace file: what to query it as, and what it holds."""

    name: str  # the file to query: the Parquet file an Excel workbook became, else the file itself
    text: str = ""  # "Rows: 4", "Columns: region VARCHAR, …" and the first rows, as the step printed them
    unread: str = ""  # why it could not be read (the step's error, bounded); "" when it was
    excel_failed: bool = False  # `unread` is the Excel conversion's

    @property
    def ok(self) -> bool:
        return not self.unread

    @property
    def unread_line(self) -> str:
        """Why it could not be read, in one line (the exception's first)."""
        return error_line(self.unread) or self.unread[:200]


async def describe_file(sandbox: Sandbox, step: StepRequest, name: str, kind: str) -> Description:
    """Convert (Excel) and describe the workspace file `name` of kind `kind`, each in a sandbox step
    run under `step`'s session and limits. Never raises for the file's own faults: those are `unread`."""
    said = ""
    if kind == "xlsx":
        parquet = f"{name.rsplit('.', 1)[0]}.parquet"
        converted = await sandbox.run(_python(step, _EXCEL.format(src=name, dst=parquet)))
        if not converted.ok:
            return Description(name, unread=_failure(converted), excel_failed=True)
        name, said = parquet, converted.output.strip()
    described = await sandbox.run(_python(step, _DESCRIBE.format(name=name, rows=PREVIEW_ROWS)))
    if not described.ok:
        return Description(name, unread=_failure(described))
    return Description(name, text="\n".join(t for t in (said, described.output.rstrip()) if t))


def _python(step: StepRequest, code: str) -> StepRequest:
    return dataclasses.replace(step, kind="python", code=code, save_as=None)


def _failure(result: StepResult) -> str:
    """The step's error without its traceback: the exception and the lines it goes on with (DuckDB's
    say what it read and what to try), bounded."""
    said = step_error(result.error).strip() or "unknown error"
    return said if len(said) <= UNREAD_CHARS else said[: UNREAD_CHARS - 1] + "…"
