"""`datathread schedule add|list|pause|resume|remove|run-now`: scheduled answers from the terminal.

Contract (docs/SCHEDULES.md): `add` prints the new id; `list --json` prints a JSON list with at least
`id`, `cron`, `tz`, `channel`, `question`, `paused`, `next_run`; `run-now ID` runs one occurrence at once
and posts it where the schedule says. Bad input — a bad cron expression, an unknown time zone, an
unknown id — ends with one sentence and exit code 2 (like a bad setting); a run that fails exits 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.console import Console

from bot.cli_common import (
    check_sandbox,
    checked_or_exit,
    die,
    err,
    log_level_option,
    settings_or_exit,
    setup_log,
)
from bot.surface_settings import POSTING_SETTINGS, SURFACE_NAMES, poster_problem
from bot.terminal_controls import printable

if TYPE_CHECKING:  # imported when a command runs: `datathread --help` need not load the core
    from core.config import Settings
    from core.schedules_store import ScheduleBook

app = typer.Typer(
    help="Scheduled answers: post a question's answer on a cron schedule.", no_args_is_help=True
)
T = TypeVar("T")
ID_HELP = "The schedule's id, as `add` printed it and `list` shows it."


def _settings() -> Settings:
    return settings_or_exit()


def _fail(message: str, code: int = 2):
    die(message, code)


def _with_book(settings: Settings, work: Callable[[ScheduleBook], Awaitable[T]]) -> T:
    """Open the store, run `work` on the schedule book, close; bad input → one sentence, exit 2."""
    from core.schedules import ScheduleError, UnknownSchedule
    from core.schedules_store import ScheduleBook
    from core.sessions import StoreUnavailable, open_store

    async def main() -> T:
        store = await open_store(settings)
        try:
            return await work(ScheduleBook.from_settings(store, settings))
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except (ScheduleError, UnknownSchedule, StoreUnavailable) as exc:
        _fail(str(exc))


@app.command("add")
def add(
    question: str = typer.Argument(..., help="The question to answer on every run."),
    cron: str = typer.Option(..., "--cron", help="Five-field cron expression, e.g. '0 9 * * mon'."),
    tz: str = typer.Option(None, "--tz", help="IANA time zone (default DATATHREAD_DEFAULT_TZ)."),
    surface: str = typer.Option(..., "--surface", help="slack or teams."),
    channel: str = typer.Option(..., "--channel", help="Slack channel id, or Teams channel/conversation id."),
    thread: str = typer.Option("", "--thread", help="Post every run in this thread (default: a new one)."),
    owner: str = typer.Option("", "--owner", help="Run under this user's identity and access."),
    team: str = typer.Option("", "--team", help="Slack team id or Teams tenant id."),
    sql: str = typer.Option("", "--sql", help="Verified SQL the runs should start from."),
) -> None:
    """Create a schedule; prints its id."""
    from core.schedules import check_verified_sql, new_schedule

    settings = _settings()
    if tz is not None and not tz.strip():  # an unset $TZ in a script: it became UTC without a word
        _fail(
            "--tz is empty: give an IANA time zone such as Europe/Berlin, or leave it out for DATATHREAD_DEFAULT_TZ."
        )

    async def work(book: ScheduleBook) -> str:
        verified = check_verified_sql(sql, dialect=settings.warehouse)
        schedule = new_schedule(
            cron=cron,
            tz=tz or settings.default_tz,
            surface=surface,
            channel=channel,
            question=question,
            now=book.now(),
            owner=owner,
            team_id=team,
            thread=thread,
            sql=verified,
        )
        await book.add(schedule, by="terminal", trusted=True)
        # a Slack member's organization is Slack's to say, at each run (bot/schedule_slack.py)
        slack_member = schedule.surface == "slack" and schedule.owner.startswith(("U", "W"))
        return schedule, book.owner_refused(schedule, placed_later=slack_member)

    schedule, refused = _with_book(settings, work)
    sys.stdout.write(schedule.id + "\n")
    where = schedule.surface  # as stored: `--surface Slack` is slack
    if poster_problem(settings, where):  # created all the same: the runs may be posted from elsewhere
        err.print(
            f"warning: {SURFACE_NAMES.get(where, where)} is not configured here: the process that runs "
            f"schedules (serve, slack --socket) needs {POSTING_SETTINGS.get(where, 'its settings')} to post this one.",
            markup=False,
        )
    if refused:  # the terminal is trusted, its runs are not: the first would pause the schedule
        err.print(
            f"warning: the access settings do not let {schedule.owner or 'a schedule without --owner'} ask in "
            f"{schedule.channel}, so its first run will pause it: give --owner someone they allow.",
            markup=False,
        )


@app.command("list")
def list_schedules(
    as_json: bool = typer.Option(False, "--json", help="A JSON list (for scripts)."),
    channel: str = typer.Option(None, "--channel", help="Only the schedules posting to this channel id."),
    owner: str = typer.Option(None, "--owner", help="Only the schedules run as this user id."),
) -> None:
    """Every schedule of the workspace (the admin listing), or those of one channel or owner."""
    from core.schedules_store import to_listing

    settings = _settings()

    async def work(book: ScheduleBook) -> list[dict]:
        now = book.now()
        return [to_listing(s, now) for s in await book.list(channel=channel, owner=owner)]

    rows = _with_book(settings, work)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    if not rows and (channel or owner):  # "No schedules yet" when there were some, for another channel
        Console().print("No schedules match: `datathread schedule list` shows them all.")
        return
    Console().print(listing_table(rows) if rows else "No schedules yet: `datathread schedule add --help`.")


def listing_table(rows: list[dict]):
    """The schedules as a table that reads at 80 columns: eight columns each cut to "2026-1…",
    "Europ…" and "quest…" there. Now five, with what belongs together stacked in one cell (when: the
    cron above its zone; where: the surface above the channel), the next run as a short date and time,
    and only the question — the one long text — wrapping; the id is never cut (every other
    subcommand takes it whole)."""
    from rich import box
    from rich.table import Column, Table
    from rich.text import Text

    ids = Column("id", no_wrap=True, min_width=max(len(r["id"]) for r in rows))
    table = Table(
        ids,
        Column("next run", no_wrap=True),
        Column("when", min_width=max(len(r["tz"]) for r in rows)),  # a zone is a word: whole
        Column("where", overflow="fold"),  # a Teams id has no spaces to wrap at
        Column("question", ratio=1, min_width=16),
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    for r in rows:
        question = r["question"] + (f"\n(paused: {r['paused_reason']})" if r["paused"] else "")
        table.add_row(
            r["id"],
            _short_time(r["next_run"]) if r["next_run"] else "paused",
            f"{r['cron']}\n{r['tz']}",
            f"{r['surface']}\n{r['channel']}" + (f"\nthread {r['thread']}" if r["thread"] else ""),
            Text(printable(question)),  # people's words: "[red]" stays as typed, terminal controls as `?`
        )
    return table


def _short_time(stamp: str) -> str:
    """'2026-11-30T09:00:00+01:00' → '2026-11-30\n09:00' (the zone is in the next column)."""
    return stamp[:10] + "\n" + stamp[11:16]


@app.command("pause")
def pause(schedule_id: str = typer.Argument(..., metavar="ID", help=ID_HELP)) -> None:
    """Stop running a schedule until it is resumed."""

    async def work(book: ScheduleBook):  # once: a second pause was "Paused" again and a second audit event
        schedule = await book.get(schedule_id)
        return (schedule, False) if schedule.paused else (await book.pause(schedule_id, by="terminal"), True)

    schedule, changed = _with_book(_settings(), work)
    Console().print(
        f"Paused {schedule.id}."
        if changed
        else f"{schedule.id} is already paused ({schedule.paused_reason})."
    )


@app.command("resume")
def resume(schedule_id: str = typer.Argument(..., metavar="ID", help=ID_HELP)) -> None:
    """Run a paused schedule again from its next occurrence (missed ones are not replayed)."""
    from core.schedules import iso

    async def work(book: ScheduleBook):
        schedule = await book.get(schedule_id)
        changed = schedule.paused
        if changed:  # resuming a running one wrote a "resumed" event and cleared its failure count
            schedule = await book.resume(schedule_id, by="terminal")
        return schedule, schedule.next_run(book.now()), changed

    schedule, upcoming, changed = _with_book(_settings(), work)
    said = f"Resumed {schedule.id}" if changed else f"{schedule.id} is not paused"
    Console().print(f"{said}; next run {iso(upcoming)}.")


@app.command("remove")
def remove(schedule_id: str = typer.Argument(..., metavar="ID", help=ID_HELP)) -> None:
    """Delete a schedule."""
    schedule = _with_book(_settings(), lambda book: book.remove(schedule_id, by="terminal"))
    Console().print(f"Removed {schedule.id}.")


@app.command("run-now")
def run_now(
    schedule_id: str = typer.Argument(..., metavar="ID", help=ID_HELP),
    log_level: str = log_level_option(),
) -> None:
    """Run one occurrence now and post it where the schedule says; exit 1 if the run failed."""
    from core.config import require_model
    from core.schedules import ScheduleError, UnknownSchedule
    from core.sessions import StoreUnavailable

    settings = _settings()
    setup_log(settings, log_level)  # a failed run's records go to the log file (and stderr if asked)
    # Everything a user can get wrong, before the sandbox and the model start: the id, then the settings.
    schedule = _with_book(settings, lambda book: book.get(schedule_id))
    checked_or_exit(settings, require_model)
    if problem := poster_problem(settings, schedule.surface):
        _fail(problem)
    check_sandbox(settings)
    from bot.schedule_jobs import run_once  # the Slack, Teams and core stack: seconds, after the checks

    try:
        result = asyncio.run(run_once(settings, schedule_id))
    except (ScheduleError, UnknownSchedule, StoreUnavailable) as exc:
        _fail(str(exc))
    if not result.ok:
        from core.schedules_run import reason_words

        paused = (
            f"; the schedule is now paused (`datathread schedule resume {schedule_id}`)"
            if result.paused
            else ""
        )
        _fail(f"The run failed: {reason_words(result.error)}{paused}.", code=1)
    Console().print(f"Posted the run of {schedule_id} (turn {result.turn_id}).")
