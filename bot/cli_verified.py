"""`datathread verified list|show|remove`: the verified queries and the corrections people recorded.

Verified queries come from 👍 votes, admins' ✅ verify and the curated `verified_queries.yaml` next to the
table notes; corrections from the replies to "what was wrong?" after a 👎 (core/verified.py).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from bot.cli_common import app, die, settings_or_exit
from bot.terminal_controls import printable
from core.config import ConfigError, Settings
from core.wording import counted

if TYPE_CHECKING:  # imported where used: every other command starts without the SQL parser
    from core.verified import VerifiedLibrary

verified_app = typer.Typer(help="Verified queries and corrections.", no_args_is_help=False)
app.add_typer(verified_app, name="verified")


async def _with_library(settings: Settings, work):
    """`work(library)` over the store, or — where no state home exists yet — an empty store of its own:
    listing what was verified made an empty home (and a database) in whatever folder it ran in."""
    from core.sessions import StoreUnavailable, open_store, store_exists
    from core.store_sqlite import SqliteStore
    from core.verified import VerifiedLibrary, curated_path, load_curated

    dialect = "bigquery" if settings.warehouse == "bigquery" else "duckdb"
    with tempfile.TemporaryDirectory(prefix="datathread-verified-") as scratch:
        try:
            curated = load_curated(curated_path(settings.table_notes), dialect)
            exists = store_exists(settings)
            store = await open_store(settings) if exists else SqliteStore(Path(scratch) / "empty.sqlite3")
        except (ConfigError, StoreUnavailable) as exc:
            die(str(exc))
        try:
            return await work(VerifiedLibrary(store, dialect=dialect, curated=curated))
        finally:
            await store.close()


def _when(at: float | None) -> str:
    """UTC, as stored; "—" for a curated entry that gives no date (its file's time is no such date). A
    date without a time (a curated `verified_on: 2026-03-02`) is shown as the date: "00:00" was none."""
    if not at:
        return "—"
    shown = time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))
    return shown.removesuffix(" 00:00")


def _title(entries: list, *, corrections_only: bool) -> str:
    """ "1 verified query and 2 corrections", through `counted` (it said "1 verified queries and corrections")."""
    from core.verified import Correction

    fixes = sum(isinstance(e, Correction) for e in entries)
    if corrections_only:
        return counted(fixes, "correction")
    queries = counted(len(entries) - fixes, "verified query", "verified queries")
    return f"{queries} and {counted(fixes, 'correction')}"


@verified_app.callback(invoke_without_command=True)
def verified_default(ctx: typer.Context) -> None:
    """List verified queries and corrections (same as `datathread verified list`)."""
    if ctx.invoked_subcommand is None:
        list_entries(corrections=False, as_json=False)


@verified_app.command("list")
def list_entries(
    corrections: bool = typer.Option(False, "--corrections", help="Only the corrections."),
    as_json: bool = typer.Option(False, "--json", help="A JSON list (for scripts) instead of a table."),
) -> None:
    """Verified queries (id, question, tables, who, when, source) and corrections."""
    from rich.table import Table

    from core.verified import Correction, VerifiedQuery

    async def work(library: VerifiedLibrary):
        return await library.entries()

    entries = asyncio.run(_with_library(settings_or_exit(), work))
    if corrections:
        entries = [e for e in entries if isinstance(e, Correction)]
    if as_json:  # a list, as `schedule list --json`: `[]` when there are none (JSON lines printed nothing)
        typer.echo(json.dumps([asdict(entry) for entry in entries], indent=2))
        return
    if not entries:  # a sentence, as `schedule list` and `audit` say it (it was an empty table)
        what = "corrections" if corrections else "verified queries or corrections"
        typer.echo(f"No {what} yet: 👍 on a good answer saves one (docs/VERIFIED.md).")
        return
    table = Table(title=_title(entries, corrections_only=corrections))
    # The id is what `show` and `remove` take: never cut ("v-d7df3316…") or folded. The rest wrap, and
    # a word too long for its column folds rather than losing its end to an ellipsis.
    table.add_column("id", no_wrap=True, min_width=max((len(e.id) for e in entries), default=2))
    for column in ("kind", "question", "tables / correction", "by", "when"):
        table.add_column(column, overflow="fold")
    for e in entries:  # people's words: never markup ("[/]" ended the listing), never terminal controls
        if isinstance(e, VerifiedQuery):
            table.add_row(
                e.id,
                f"verified ({e.source})",
                plain(e.question),
                plain(", ".join(e.tables)),
                plain(e.verified_by),
                _when(e.verified_at),
            )
        else:
            table.add_row(
                e.id, "[yellow]correction[/]", plain(e.question), plain(e.text), plain(e.by), _when(e.at)
            )
    Console().print(table)


@verified_app.command("show")
def show(entry_id: str = typer.Argument(..., help="The id from `datathread verified list`.")) -> None:
    """One verified query or correction, with its SQL."""
    from rich.syntax import Syntax

    from core.verified import VerifiedQuery

    async def work(library: VerifiedLibrary):
        return await library.get(entry_id)

    entry = asyncio.run(_with_library(settings_or_exit(), work))
    if entry is None:
        die(f"There is no verified query or correction with id {entry_id}.")  # bad input: 2, as schedule's
    console = Console()
    console.print(plain(entry.question, style="bold"))  # people's words: no markup, no terminal controls
    if isinstance(entry, VerifiedQuery):
        on = f" on {_when(entry.verified_at)}" if entry.verified_at else ""
        console.print(plain(f"verified by {entry.verified_by} ({entry.source}){on}"))
        turn = f" · turn {entry.turn_id}" if entry.turn_id else ""
        console.print(plain(f"tables: {', '.join(entry.tables) or '—'}{turn}"))
    else:
        console.print(plain(f"correction by {entry.by} on {_when(entry.at)} · turn {entry.turn_id}"))
        console.print(plain(entry.text, style="yellow"))
    if entry.sql:
        console.print(Syntax(printable(entry.sql), "sql", word_wrap=True))


@verified_app.command("remove")
def remove(entry_id: str = typer.Argument(..., help="The id from `datathread verified list`.")) -> None:
    """Remove a verified query or correction (curated ones: edit their file)."""

    async def work(library: VerifiedLibrary):
        try:
            return await library.remove(entry_id)
        except ValueError as exc:
            die(str(exc))

    if not asyncio.run(_with_library(settings_or_exit(), work)):
        die(f"There is no verified query or correction with id {entry_id}.")  # bad input: 2, as schedule's
    Console().print(f"removed {entry_id}")


def plain(text: str, style: str = "") -> Text:
    """Stored text (a question, a correction, a name) as it was typed: no rich markup, controls as `?`."""
    return Text(printable(text), style=style)
