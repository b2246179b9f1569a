"""`datathread forget`: delete everything datathread keeps about one thread, person, channel or
workspace before its time is up (core/forget.py says what goes and why; docs/OPERATIONS.md, "Deleting
data", what is kept where). Says what it will delete and asks first (`--yes` for scripts), then says
what it deleted. Registered on the shared app by bot/cli.py, after `audit`, whose ids it takes.
"""

from __future__ import annotations

import asyncio
import logging

import typer
from rich.console import Console

from bot.cli_common import app, die, err, log_level_option, settings_or_exit, setup_log
from bot.log_setup import SIZE_BACKUPS
from core.config import Settings
from core.wording import counted

log = logging.getLogger("datathread.forget")

# what went, in the order it is said
SAID = (
    ("history", "thread history", "thread histories"),
    ("metadata", "thread's metadata", "threads' metadata"),
    ("turn records", "turn record", None),
    ("workspaces", "workspace", None),
    (
        "workspaces queued",
        "Modal workspace queued for the hourly sweep",
        "Modal workspaces queued for the hourly sweep",
    ),
    ("attachment folders", "attachment folder", None),
    ("files in the bucket", "file in the files bucket", "files in the files bucket"),
    ("schedules", "schedule", None),
    ("verified queries and corrections", "verified query or correction", "verified queries and corrections"),
    ("cached look-ups", "cached look-up", None),
)


@app.command()
def forget(
    thread: str = typer.Option(
        None, "--thread", help="This thread: its session id as `audit` lists it, or a chat/ask --session key."
    ),
    user: str = typer.Option(None, "--user", help="This person's user id, as `audit` lists it (Slack U…)."),
    channel: str = typer.Option(None, "--channel", help="Every thread of this channel or conversation id."),
    team: str = typer.Option(
        None, "--team", help="Every thread of this Slack workspace (T…) or Teams tenant."
    ),
    shared_threads: bool = typer.Option(
        False,
        "--shared-threads",
        help="With --user: also delete the threads they shared with others (history and files), not only "
        "their turn records there.",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before deleting."),
    log_level: str = log_level_option(),
) -> None:
    """Delete what is kept about a thread, person, channel or workspace: history, turn records, files,
    schedules, verified queries, cached look-ups. Not the logs."""
    given = {"--thread": thread, "--user": user, "--channel": channel, "--team": team}
    named = [flag for flag, value in given.items() if value is not None]
    if len(named) != 1:
        die("Name exactly one of --thread, --user, --channel or --team: what to forget.")
    if [v for v in given.values() if v is not None][0].strip() == "":
        die(f"{named[0]} needs an id; `datathread audit` lists them.")
    if shared_threads and user is None:
        die("--shared-threads goes with --user: it says what to do with the threads they shared.")
    settings = settings_or_exit()
    which = dict(thread=thread, user=user, channel=channel, team=team)
    code = asyncio.run(_forget(settings, which, shared_threads, yes, log_level))
    raise typer.Exit(code)


async def _forget(settings: Settings, which: dict, shared: bool, yes: bool, level: str | None) -> int:
    from core.forget import NothingToForget, carry_out, plan_forget
    from core.sessions import StoreUnavailable, open_store, store_exists, store_place

    if not store_exists(settings):
        die(f"Nothing is kept in {store_place(settings)}: no state there yet.")
    setup_log(settings, level)  # the file the sentences point to; warnings there, not on the terminal
    try:
        store = await open_store(settings)
    except StoreUnavailable as exc:
        die(str(exc))
    try:
        try:
            plan = await plan_forget(store, **which, delete_shared=shared)
        except NothingToForget as exc:
            die(str(exc))
        for line in _plan_lines(plan, settings):
            err.print(line, markup=False, highlight=False)
        if not yes and not typer.confirm("Delete it?", default=False, err=True):
            err.print("Nothing was deleted.")
            return 1
        deleted = await carry_out(store, settings, plan)
    except StoreUnavailable as exc:
        die(str(exc))
    finally:
        await store.close()
    return _said(deleted, settings)


def _plan_lines(plan, settings: Settings) -> list[str]:
    """What will go, before the question."""
    lines = [f"This deletes, for {plan.what}:"]
    if plan.sessions:
        whose = "only they took part in " if plan.user_id else ""
        lines.append(
            f"- {counted(len(plan.sessions), 'thread')} {whose}(history, metadata, turn records, workspace, "
            "attachment copies, files-bucket objects)"
        )
    if plan.user_id is not None:
        lines.append("- their turn records (questions, answers, SQL and code) in every thread")
    if plan.shared and plan.delete_shared:
        lines.append(
            f"- {counted(len(plan.shared), 'thread')} they shared with others, whole (--shared-threads)"
        )
    elif plan.shared:
        days = settings.history_ttl_days
        lines.append(
            f"- not the history of {counted(len(plan.shared), 'thread')} they shared with others ({', '.join(plan.shared[:5])}"
            f"{', …' if len(plan.shared) > 5 else ''}): their words there stay until it expires, within {days} days; "
            "--shared-threads deletes those threads too"
        )
    if plan.schedules:
        lines.append(f"- {counted(len(plan.schedules), 'schedule')}: {', '.join(plan.schedules)}")
    if plan.verified_entries:
        lines.append(
            f"- {counted(len(plan.verified_entries), 'verified query or correction', 'verified queries and corrections')}"
        )
    if plan.lookups:
        lines.append("- what Slack said of them (cached for a day)")
    lines.append(f"Not the logs: {log_note(settings)}.")
    return lines


def log_note(settings: Settings) -> str:
    """How long the log file keeps what it holds (bot/log_setup.py), from the settings."""
    where = "DATATHREAD_HOME/logs"
    if settings.log_days:
        return f"{where} keeps its records for {counted(settings.log_days, 'day')} (DATATHREAD_LOG_DAYS)"
    return f"{where} keeps {SIZE_BACKUPS + 1} files of 5 MB, however old (DATATHREAD_LOG_DAYS=0)"


def _said(deleted, settings: Settings) -> int:
    """Print what went (stdout: a script reads it), then what was left and why (stderr, naming the
    threads; the log has the same): 1 when anything was left, so a script runs the command again."""
    counts = deleted.counts
    went = [counted(counts[key], one, many) for key, one, many in SAID if counts[key]]
    Console(soft_wrap=True).print(
        f"Deleted: {', '.join(went) if went else 'nothing was left'}.", markup=False
    )
    left = []
    if deleted.busy:
        left.append(
            f"{counted(len(deleted.busy), 'thread')} had a turn running and "
            f"{'was' if len(deleted.busy) == 1 else 'were'} left ({_named(deleted.busy)})"
        )
    if deleted.bucket_left:
        left.append(
            f"{counted(len(deleted.bucket_left), 'thread')} kept whole, as the files bucket did not delete "
            f"{'its' if len(deleted.bucket_left) == 1 else 'their'} objects ({_named(deleted.bucket_left)}; "
            "the log says why)"
        )
    if deleted.stopped is not None:
        who = "Redis" if settings.redis_url else "The session database"
        left.append(
            f"{who} stopped answering after {deleted.done} of {counted(deleted.total, 'thread')} "
            f"({deleted.stopped})"
        )
    for line in left:
        log.warning("datathread forget: %s", line)
    if left:
        err.print(f"{'; '.join(left)}: run the same command again.", markup=False, highlight=False)
    return 1 if left else 0


def _named(session_ids: list[str]) -> str:
    return ", ".join(session_ids[:5]) + (f" and {len(session_ids) - 5} more" if len(session_ids) > 5 else "")
