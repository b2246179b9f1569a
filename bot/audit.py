"""`datathread audit`: the turn and step records as JSON lines or CSV, secrets redacted.

Questions and SQL are untrusted text: in CSV every cell is made spreadsheet-safe (`core/csv_cells.py`),
so a question like `=HYPERLINK(…)` is shown, not run, when someone opens the export, and its control
characters print as `?` (`bot/terminal_controls.py`): an escape sequence in a question or an answer
drove the terminal of whoever ran `audit --format csv` or `cat` its file. JSON lines escape them.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from datetime import UTC, datetime

from bot.terminal_controls import printable
from core.config import Settings
from core.csv_cells import neutralise_cell
from core.redact import Redactor
from core.sessions import open_store, resolve_session_id, store_exists

CSV_FIELDS = (
    "turn_id",
    "started",
    "surface",
    "team_id",
    "channel_id",
    "user_id",
    "session_id",
    "ok",
    "question",
    "step",
    "tool",
    "input",
    "rows",
    "bytes_scanned",
    "duration_s",
    "step_ok",
    "feedback",
    # appended, so a sheet or script reading the columns above by position still works: why a turn
    # failed, the id the person was shown (and the log line's), and what people said was wrong
    "error",
    "error_id",
    "corrections",
    # then what the turn spent: the step's bytes billed, the turn's model calls and tokens
    "bytes_billed",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)
SPENT = ("model_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def audit_rows(turns: list[dict]) -> list[dict]:
    """One flat row per step (a turn without steps still gets one row), for CSV; the turn's own columns
    (question, outcome, error, feedback, corrections) repeat on each of its steps' rows, so a filter on
    one column keeps whole turns."""
    rows = []
    for turn in turns:
        steps = turn.get("steps") or [{}]
        for step in steps:
            rows.append(
                {
                    "turn_id": turn.get("turn_id"),
                    "started": _utc(turn.get("started")),
                    "surface": turn.get("surface"),
                    "team_id": turn.get("team_id"),
                    "channel_id": turn.get("channel_id"),
                    "user_id": turn.get("user_id"),
                    "session_id": turn.get("session_id"),
                    "ok": turn.get("ok"),
                    "question": turn.get("question"),
                    "step": step.get("step_id", ""),
                    "tool": step.get("tool", ""),
                    "input": json.dumps(step.get("input", "")) if step else "",
                    "rows": step.get("rows", ""),
                    "bytes_scanned": step.get("bytes_scanned", ""),
                    "duration_s": step.get("duration_s", ""),
                    "step_ok": step.get("ok", ""),
                    "feedback": json.dumps(turn.get("feedback") or {}),
                    "error": turn.get("error") or "",
                    "error_id": turn.get("error_id") or "",
                    "corrections": json.dumps(turn.get("corrections") or []),
                    "bytes_billed": step.get("bytes_billed", ""),
                    **{key: (turn.get("stats") or {}).get(key, "") for key in SPENT},
                }
            )
    return rows


def _cell(value: object) -> object:
    safe = neutralise_cell(value)
    return printable(safe) if isinstance(safe, str) else safe


def _utc(epoch: float | None) -> str:
    """A spreadsheet shows `1795740852.56` as a number nobody reads: the CSV gets `YYYY-MM-DD
    HH:MM:SS` in UTC, which Excel, Sheets and pandas all parse as a time (ISO's `T…Z` stays text in
    Excel). The JSON lines keep the epoch, as stored."""
    if not isinstance(epoch, int | float):
        return ""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


async def print_audit(
    settings: Settings,
    *,
    session: str | None,
    user: str | None,
    channel: str | None,
    since_hours: float | None,
    fmt: str,
    limit: int,
    out=None,
) -> int:
    """Write matching turn records to `out` (stdout); returns how many turns matched. A DATATHREAD_HOME
    that does not exist has none, and is not made by looking (it was: an empty state home in whatever
    folder `audit` ran in)."""
    out = out or sys.stdout
    turns: list[dict] = []
    if store_exists(settings):
        store = await open_store(settings)
        try:
            since = time.time() - since_hours * 3600 if since_hours else None
            if session:  # a full session id or a terminal `--session` key
                session = await resolve_session_id(store, session)
            turns = await store.list_turns(
                session_id=session, user_id=user, channel_id=channel, since=since, limit=limit
            )
        finally:
            await store.close()
    turns = Redactor(settings.secret_values()).data(turns)
    if fmt == "csv":
        csv.writer(out).writerow(CSV_FIELDS)  # the header as ever; every cell below quoted: a spreadsheet
        # whose list separator is ";" split an unquoted "x;=HYPERLINK(…)" into a cell starting with "="
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, quoting=csv.QUOTE_ALL)
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in audit_rows(turns))
    else:
        for turn in turns:
            out.write(json.dumps(turn, default=str) + "\n")
    return len(turns)
