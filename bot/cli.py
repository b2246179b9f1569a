"""The `datathread` command line: chat, ask, serve, slack, doctor, audit, forget, export, teams-package.

Each command reads settings once, builds the core, and hands it to a surface.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from bot.cli_arguments import output_option
from bot.cli_common import (
    app,
    check_output_file,
    check_sandbox,
    checked_or_exit,
    die,
    err,
    log_level_option,
    names_a_folder,
    run_app,
    settings_or_exit,
    setup_log,
    start_analyst,
    warn_local_links,
    writing,
)
from bot.cli_schedule import app as schedule_app
from bot.surface_settings import require_socket_tokens, slack_half_configured, teams_half_configured
from bot.terminal_controls import printable
from bot.terminal_files import shared_or_exit
from core.config import ConfigError, Settings, require_model

if TYPE_CHECKING:
    from bot.terminal import WaitingStatus
    from core.events import SharedFile

app.add_typer(schedule_app, name="schedule")


@app.command()
def chat(
    session: str = typer.Option(
        None, "--session", help="Resume this session (its key or id); a new name starts one under that name."
    ),
    log_level: str = log_level_option(),
) -> None:
    """Talk to datathread in the terminal (one session; --session ID resumes one). `help` lists what it can do."""
    from bot.terminal_chat import run_chat

    settings = settings_or_exit()
    setup_log(settings, log_level)
    run_chat(settings, session, start_analyst)


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question (`help` lists what datathread can do)."),
    session: str = typer.Option(
        None,
        "--session",
        help="Continue this session (its key or id); a new name starts one under that name.",
    ),
    file: list[Path] = typer.Option(
        [], "--file", "-f", help="A CSV, TSV, Parquet, JSON or Excel file to ask about (repeatable)."
    ),
    log_level: str = log_level_option(),
) -> None:
    """One turn: print the answer and the paths of attached files. Exit 1 if the turn fails."""
    if not question.strip() and not file:  # it printed chat's help, with chat's keys, and exit code 0
        die('The question is empty: ask one, e.g. datathread ask "How many flights left JFK in 2013?"')
    settings = settings_or_exit()
    files = shared_or_exit(file, settings)  # a path that is no file to share: exit 2
    no_model = _without_model(settings, question, asks=bool(files))
    setup_log(settings, log_level)
    from bot.terminal import WaitingStatus
    from bot.terminal_chat import run_interruptibly

    # Ctrl-C, SIGTERM (`timeout`) or a closed terminal stop the turn as in chat: the question stays in
    # the session's history and the audit (they ended the process at once, and it was gone).
    status = WaitingStatus()
    key = [session or ""]  # the session's key once known, for the line under a stopped turn
    answered: list[bool] = []

    async def one_turn() -> None:
        answered.append(await _ask(settings, question, files, key, status, no_model=no_model))

    with asyncio.Runner() as runner:
        try:
            run_interruptibly(runner, one_turn())
        finally:
            if not answered and status.failed is not None:  # stopped mid-turn: the core's sentence
                with contextlib.suppress(OSError):  # the terminal may be gone
                    if status.answer is not None:  # stopped while it was being kept: it was given
                        _print_answer(status.answer, [])
                    err.print(f"error: {status.failed.message}", markup=False)
                    err.print(f"session: {key[0]}")
    if not answered:
        raise typer.Exit(130)
    raise typer.Exit(0 if answered[0] else 1)


def _without_model(settings: Settings, question: str, *, asks: bool = False) -> str:
    """'' when the model is configured; else why not, for `help` (answered without the model, as in
    chat, so it needs no key); any other question (`asks`: files shared make any text one) ends here
    with that sentence, before the core loads."""
    try:
        require_model(settings)
        return ""
    except ConfigError as exc:
        from core.help import is_local

        if asks or not is_local(question):
            die(str(exc))
        return str(exc)


async def _ask(
    settings: Settings,
    question: str,
    files: tuple[SharedFile, ...],
    session: list[str],
    status: WaitingStatus,
    *,
    no_model: str = "",
) -> bool:
    """One turn in the session `session[0]` names (a new one when empty); sets `session[0]` to its key."""
    from bot.terminal import FAULT_HINT, format_footer
    from bot.terminal_chat import session_key
    from bot.terminal_images import save_for_user
    from core.asked_when import host_zone
    from core.events import IncomingMessage

    analyst = await start_analyst(settings, no_model=no_model)
    try:
        key = await session_key(analyst, settings, session[0] or None, err.print)
        session[0] = key[0]
        outcome = await analyst.handle(
            IncomingMessage(
                text=question, surface="terminal", thread_key=key, user_tz=host_zone(), files=files
            ),
            status,
        )
        saved = []
        for a in outcome.artifacts:
            try:
                data = await analyst.threads.read_artifact(a)
            except (OSError, ValueError) as exc:  # gone, or a CSV that cannot be made spreadsheet-safe
                err.print(printable(f"not saved: {a.path} ({exc})"), markup=False)
                continue
            saved.append(save_for_user(data, settings.home, a.session_id, a.path, os.environ))
    finally:
        await analyst.close()
    # An answer given, then not kept (the session store failed as the turn ended), is still printed,
    # before the error: the person had it, and `ask` printed only the error, 45 s later.
    if outcome.ok or status.answer is not None:
        _print_answer(outcome.answer if outcome.ok else status.answer or "", saved)
    for note in status.notes:  # a shared file not read: under the answer, on stderr as the receipt
        err.print(printable(note), markup=False, highlight=False)
    if not outcome.ok:
        said = f" (error id {outcome.error_id})" if outcome.error_id else ""  # a refusal has none
        err.print(f"error: {printable(outcome.error)}{said}", markup=False)
        if outcome.fault:
            err.print(FAULT_HINT, markup=False)
        err.print(f"session: {key[0]}")
        return False
    footer = format_footer(status.finished) if status.finished is not None else ""
    if footer:  # the receipt, as under every answer; on stderr, as the session is
        err.print(footer, markup=False, highlight=False)
    err.print(f"session: {key[0]}")
    return True


def _print_answer(answer: str, files: list) -> None:
    """The answer and the paths of its files on stdout. Plain writes: rich would wrap long file paths
    at the terminal width. The model's text, never its control characters: an escape sequence in an
    answer would clear the screen or retitle the window (chat shows the same text through `printable`)."""
    sys.stdout.write(printable(answer.rstrip()) + "\n")
    sys.stdout.writelines(f"{printable(str(path))}\n" for path in files)
    sys.stdout.flush()  # before the receipt on stderr: `2>&1 | less` showed the receipt above the answer


@app.command()
def doctor() -> None:
    """Report which parts are configured and reachable, and which sandbox protections are active."""
    from bot.doctor import run_doctor

    settings = settings_or_exit()
    raise typer.Exit(asyncio.run(run_doctor(settings, Console())))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(3000, "--port", min=0, max=65535, help="Port to listen on."),
    log_level: str = log_level_option("INFO"),
) -> None:
    """Serve Slack (/slack/events), Teams (/api/messages) and /healthz over HTTP."""
    from bot.serve_process import listen_problem

    settings = settings_or_exit()
    settings.isolation = settings.isolation or "strict"  # a shared service refuses unisolated steps
    # What a user can get wrong and this process can check at once, before seconds of imports (Slack,
    # Teams, the core) and the app's start-up: a missing key, a port in use, a host not of this machine.
    checked_or_exit(settings, require_model)
    if problem := slack_half_configured(settings) or teams_half_configured(settings):
        die(problem)
    warn_local_links(settings)
    if problem := listen_problem(host, port):
        die(problem)
    check_sandbox(settings)  # a back end this host lacks: one sentence now, not a worker's traceback
    setup_log(settings, log_level)
    # before the app's imports (~2 s): its first words are "checking SLACK_BOT_TOKEN…", not silence
    identity: dict = {}  # what that check's auth.test said: who the bot is, for the app
    if problem := asyncio.run(_start_problem(settings, slack_token=True, identity=identity)):
        die(problem)
    from bot.serve_process import serve as run_server
    from bot.server import create_app, hurry, stopping

    try:  # a bad Teams setting: one sentence, not a traceback
        asgi = create_app(settings, freeze_heap=True, slack_identity=identity or None)
    except ConfigError as exc:
        die(str(exc))
    run_server(
        asgi,
        host=host,
        port=port,
        log_level=log_level.lower(),
        on_stop=lambda: stopping(asgi),
        on_hurry=lambda: hurry(asgi),
    )


async def _start_problem(
    settings: Settings, *, slack_token: bool = False, identity: dict | None = None
) -> str | None:
    """What the app's start-up would fail on, as a sentence, before uvicorn starts it: there, an
    unreachable Redis, a BigQuery warehouse without credentials or a full DATATHREAD_HOME was a
    25-line traceback. With `slack_token` (serve), a bot token Slack rejects too: it showed up only at
    the first mention."""
    from core.sessions import StoreUnavailable, open_store

    if slack_token and settings.slack_bot_token:
        from bot.slack_identity import bot_token_problem

        if problem := await bot_token_problem(settings, lambda line: err.print(line, markup=False), identity):
            return problem
    try:
        if settings.warehouse == "bigquery":
            from core.bigquery_client import resolve_config

            resolve_config(settings)
        else:  # built here, once: on a full disk its sentence, not uvicorn's start-up traceback
            from core.warehouse import build_demo_database

            build_demo_database(settings.demo_warehouse)
        store = await open_store(settings)
    except (ConfigError, StoreUnavailable) as exc:
        return str(exc)
    await store.close()
    return None


@app.command()
def slack(
    socket: bool = typer.Option(False, "--socket", help="Use Socket Mode (no public URL needed)."),
    log_level: str = log_level_option(),
) -> None:
    """Run the Slack app over Socket Mode."""
    if not socket:
        die("Use `datathread slack --socket`, or `datathread serve` for HTTP events.")
    settings = settings_or_exit()
    # a missing token or key is said first, not after Socket Mode's imports, the sandbox and the demo data
    checked_or_exit(settings, require_socket_tokens, require_model)
    from bot.slack_socket import SlackUnreachable, run_socket_mode

    setup_log(settings, log_level)
    check_sandbox(settings)
    if problem := asyncio.run(_start_problem(settings)):
        die(problem)
    try:
        asyncio.run(run_socket_mode(settings, err))
    except ConfigError as exc:
        die(str(exc))
    except SlackUnreachable as exc:
        die(str(exc), code=1)
    except KeyboardInterrupt:
        err.print("Slack: stopped.")


# `audit` registers here, after `slack`, as --help lists it; `forget` after it, whose ids it takes
from bot import cli_audit, cli_forget  # noqa: E402, F401


@app.command()
def export(
    session_id: str = typer.Argument(..., help="The session id (or terminal --session key) to export."),
    output: str = output_option(
        None,
        "Notebook path, or a folder for the default name (default: SESSION_ID.ipynb here); - for stdout.",
    ),
) -> None:
    """Export a thread as a runnable Jupyter notebook."""
    from bot.export import export_session, where_to

    settings = settings_or_exit()
    file, folder = where_to(output)  # a str: `out/` (a folder) and `out` (a file) differ by the slash
    if path := asyncio.run(export_session(settings, session_id, file, folder)):
        Console(soft_wrap=True).print(str(path), markup=False, highlight=False)


PACKAGE = "datathread-teams.zip"


@app.command("teams-package")
def teams_package(
    output: str = output_option(PACKAGE, f"Zip to write (a folder, `DIR/`, gets {PACKAGE} in it)."),
    app_version: str | None = typer.Option(
        None,
        "--app-version",
        help="The app's version, e.g. 1.0.1: higher than the uploaded one, to update it.",
    ),
) -> None:
    """Zip the Teams app package (manifest with MICROSOFT_APP_ID + icons) for sideloading."""
    from bot.teams_package import build_package

    settings = settings_or_exit()
    target = Path(output) / PACKAGE if names_a_folder(output) else Path(output)  # as `export -o DIR/`
    check_output_file(target)
    try:
        with writing(target):
            path = build_package(settings, target, app_version=app_version)
    except ConfigError as exc:
        die(str(exc))
    warn_local_links(settings, always=True)
    Console().print(str(path))


from bot import cli_eval, cli_verified  # noqa: E402, F401  (each registers its commands on `app`)


def _replace_what_cannot_be_shown() -> None:
    """stdout only: Python's stderr already writes what it cannot encode as backslash escapes."""
    with contextlib.suppress(AttributeError, ValueError):  # not a text stream we may reconfigure
        sys.stdout.reconfigure(errors="replace")


def main() -> None:
    """The console script. A reader that stops early (`datathread audit | head -1`) closes the pipe, and
    the next write to stdout fails. That is no failure of the command: the reader took what it wanted.
    So the command ends quietly with the code it had — 0 for a listing cut short, a failure's own code
    for a failure — never 1 for the pipe alone. (coreutils die of SIGPIPE there, 141, which `set -o
    pipefail` counts as a failed pipeline; click and Python exit 1, a failure's code with nothing said,
    which a script could not tell from a real one.) It shows two ways: a write inside the command (more
    output than stdout's buffer), which click ends with exit 1 after putting a quiet wrapper in place of
    sys.stdout; or output still buffered when the command ends, flushed here (at the interpreter's exit
    it printed "Exception ignored … BrokenPipeError"). Either way stdout is then pointed at devnull,
    leaving the last flush at exit nothing to fail on. Once for every command.
    https://docs.python.org/3/library/signal.html#note-on-sigpipe

    A terminal or pipe whose encoding lacks a character of an answer (`PYTHONIOENCODING=latin-1`, an
    old `LANG=C` Python) shows it as `?`: the write raised UnicodeEncodeError, a traceback after the
    answer was made, and chat could not print its own banner."""
    _replace_what_cannot_be_shown()
    stdout = sys.stdout
    try:
        try:
            run_app(app)
        finally:
            sys.stdout.flush()
    except BrokenPipeError as exc:  # the command ended; its last output met the closed pipe
        _quiet_stdout()
        ended = exc.__context__  # the command's own exit, which the failed flush replaced
        sys.exit(ended.code if isinstance(ended, SystemExit) else 0)
    except SystemExit as exc:
        if exc.code == 1 and sys.stdout is not stdout:  # click's exit for the closed pipe, mid-command
            _quiet_stdout()
            sys.exit(0)
        raise


def _quiet_stdout() -> None:
    """stdout to devnull: what is still buffered for the gone reader is dropped without a word."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), (sys.__stdout__ or sys.stdout).fileno())


if __name__ == "__main__":
    main()
