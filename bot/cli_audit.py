"""`datathread audit`: the command line of the audit trail (bot/audit.py writes it). Registered on the
shared app by bot/cli.py, where `--help` lists it after `slack`."""

from __future__ import annotations

import asyncio
from enum import StrEnum

import typer

from bot.cli_common import app, die, err, settings_or_exit

MAX_HOURS = 876_600  # 100 years: further back than any record, and `inf` or 1e308 meant "since ever", unsaid


class AuditFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


@app.command()
def audit(
    session: str = typer.Option(
        None, "--session", help="Only this session: its id (as listed here) or a chat/ask --session key."
    ),
    user: str = typer.Option(
        None, "--user", help="Only turns of this user id, as listed here (Slack U…; local in the terminal)."
    ),
    channel: str = typer.Option(None, "--channel", help="Only turns of this channel or conversation id."),
    since_hours: float = typer.Option(None, "--since-hours", help="Only turns of the last N hours."),
    fmt: AuditFormat = typer.Option(AuditFormat.jsonl, "--format", help="jsonl (one turn a line) or csv."),
    limit: int = typer.Option(
        1000, "--limit", min=1, help="At most this many turns, the newest (any larger number: all of them)."
    ),
) -> None:
    """List recorded turns and steps (who, where, question, SQL/code, rows, outcome) as JSON lines or CSV."""
    from bot.audit import print_audit
    from core.sessions import StoreUnavailable, store_place

    # -1 and 0 listed nothing, or everything, unsaid; so did inf and 1e308 (nan fails both comparisons)
    if since_hours is not None and not 0 < since_hours <= MAX_HOURS:
        die(
            f"--since-hours takes a number of hours back from now, more than 0 and at most {MAX_HOURS:,} "
            "(100 years), e.g. 24."
        )
    settings = settings_or_exit()
    try:
        matched = asyncio.run(
            print_audit(
                settings,
                session=session,
                user=user,
                channel=channel,
                since_hours=since_hours,
                fmt=fmt.value,
                limit=limit,
            )
        )
    except StoreUnavailable as exc:  # a Redis that is down or wants a password: its sentence, no traceback
        die(str(exc))
    if not matched:  # said on stderr: stdout stays what a pipe reads (nothing, or the CSV header)
        filtered = session or user or channel or since_hours  # where it looked: run in another folder
        # than the one chatted in, "No recorded turns yet." read as if there were none anywhere
        where = store_place(settings)
        err.print(
            f"No recorded turns in {where}{' match these filters' if filtered else ' yet'}.", markup=False
        )
