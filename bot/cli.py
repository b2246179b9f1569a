"""The `datathread` command line: chat, ask, serve, slack, doctor, audit, export.

Each command reads settings once, builds the core, and hands it to a surface.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import typer
from rich.console import Console

from core.config import ConfigError, Settings, load_settings, require_model

app = typer.Typer(
    help="datathread — answers data questions in Slack, Teams and the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        _die(str(exc))


def _die(message: str, code: int = 2):
    err.print(f"[red]error:[/] {message}")
    raise typer.Exit(code)


def _setup_logging(settings: Settings, level: str = "WARNING") -> None:
    from core.redact import install_log_redaction

    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install_log_redaction(settings.secret_values())


async def _analyst(settings: Settings):
    from core.analyst import Analyst

    try:
        require_model(settings)
        return await Analyst.create(settings)
    except ConfigError as exc:
        _die(str(exc))
    except Exception as exc:  # a part failed to start: one sentence, not a traceback
        from core.sessions import StoreUnavailable

        if isinstance(exc, StoreUnavailable):
            _die(str(exc))
        raise


@app.command()
def chat(
    session: str = typer.Option(None, "--session", help="Resume this session id."),
    log_level: str = typer.Option("WARNING", "--log-level"),
) -> None:
    """Talk to datathread in the terminal (one session; --session ID resumes one)."""
    settings = _settings()
    _setup_logging(settings, log_level)
    asyncio.run(_chat(settings, session))


async def _chat(settings: Settings, session: str | None) -> None:
    from bot.terminal import TerminalRenderer
    from core.events import IncomingMessage

    console = Console()
    analyst = await _analyst(settings)
    key = (session,) if session else (_new_key(),)
    console.print(  # the key, as everywhere else: chat/ask --session, export and audit all take it
        f"[bold]datathread[/] — session [cyan]{key[0]}[/]. Ask about the data; Ctrl-D to quit."
    )
    try:
        while True:
            try:
                question = await asyncio.to_thread(console.input, "[bold green]› [/]")
            except (EOFError, KeyboardInterrupt):
                break
            if not question.strip():
                continue
            renderer = TerminalRenderer(console, settings.workspaces_dir)
            await analyst.handle(
                IncomingMessage(text=question.strip(), surface="terminal", thread_key=key),
                renderer,
                confirm=terminal_confirmer(console, renderer),
            )
    finally:
        await analyst.close()
    console.print(f"[dim]Resume with: datathread chat --session {key[0]}[/]")


def terminal_confirmer(console: Console, renderer):
    """Ask at the prompt before an expensive query runs; anything but yes means no."""

    async def confirm(request) -> bool:
        renderer.pause()
        answer = await asyncio.to_thread(console.input, f"[yellow]{request.prompt}[/] Run it? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    return confirm


def _new_key() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question."),
    session: str = typer.Option(None, "--session", help="Continue this session id."),
    log_level: str = typer.Option("WARNING", "--log-level"),
) -> None:
    """One turn: print the answer and the paths of attached files. Exit 1 if the turn fails."""
    settings = _settings()
    _setup_logging(settings, log_level)
    ok = asyncio.run(_ask(settings, question, session))
    raise typer.Exit(0 if ok else 1)


async def _ask(settings: Settings, question: str, session: str | None) -> bool:
    from bot.terminal import TerminalRenderer
    from core.events import IncomingMessage

    analyst = await _analyst(settings)
    key = (session or _new_key(),)
    renderer = TerminalRenderer(Console(stderr=True, quiet=True), settings.workspaces_dir, live=False)
    try:
        outcome = await analyst.handle(
            IncomingMessage(text=question, surface="terminal", thread_key=key), renderer
        )
    finally:
        await analyst.close()
    if not outcome.ok:
        err.print(f"error: {outcome.error} (error id {outcome.error_id})")
        err.print(f"session: {key[0]}")
        return False
    # Plain writes: rich would wrap long file paths at the terminal width.
    sys.stdout.write(outcome.answer.rstrip() + "\n")
    for artifact in outcome.artifacts:
        sys.stdout.write(str(settings.workspaces_dir / artifact.session_id / artifact.path) + "\n")
    err.print(f"session: {key[0]}")
    return True


@app.command()
def doctor() -> None:
    """Report which parts are configured and reachable, and which sandbox protections are active."""
    from bot.doctor import run_doctor

    settings = _settings()
    raise typer.Exit(asyncio.run(run_doctor(settings, Console())))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(3000, "--port"),
    log_level: str = typer.Option("INFO", "--log-level"),
) -> None:
    """Serve Slack (/slack/events), Teams (/api/messages) and /healthz over HTTP."""
    import uvicorn

    from bot.server import create_app

    settings = _settings()
    _setup_logging(settings, log_level)
    try:  # no model key or a bad Teams setting: one sentence, not a traceback
        require_model(settings)
        asgi = create_app(settings)
    except ConfigError as exc:
        _die(str(exc))
    uvicorn.run(asgi, host=host, port=port, log_level=log_level.lower(), lifespan="on")


@app.command()
def slack(
    socket: bool = typer.Option(False, "--socket", help="Use Socket Mode (no public URL needed)."),
) -> None:
    """Run the Slack app over Socket Mode."""
    if not socket:
        _die("Use `datathread slack --socket`, or `datathread serve` for HTTP events.")
    from bot.slack_socket import run_socket_mode

    settings = _settings()
    _setup_logging(settings, "INFO")
    try:
        asyncio.run(run_socket_mode(settings))
    except ConfigError as exc:
        _die(str(exc))


@app.command()
def audit(
    session: str = typer.Option(None, "--session"),
    user: str = typer.Option(None, "--user"),
    channel: str = typer.Option(None, "--channel"),
    since_hours: float = typer.Option(None, "--since-hours", help="Only turns of the last N hours."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or csv"),
    limit: int = typer.Option(1000, "--limit"),
) -> None:
    """List recorded turns and steps (who, where, question, SQL/code, rows, outcome) as JSON lines or CSV."""
    from bot.audit import print_audit

    settings = _settings()
    asyncio.run(
        print_audit(
            settings,
            session=session,
            user=user,
            channel=channel,
            since_hours=since_hours,
            fmt=fmt,
            limit=limit,
        )
    )


@app.command()
def export(
    session_id: str = typer.Argument(..., help="The session id (or terminal --session key) to export."),
    output: Path = typer.Option(None, "-o", "--output", help="Notebook path (.ipynb)."),
) -> None:
    """Export a thread as a runnable Jupyter notebook."""
    from bot.export import export_session

    settings = _settings()
    path = asyncio.run(export_session(settings, session_id, output))
    Console().print(str(path))


@app.command("teams-package")
def teams_package(
    output: Path = typer.Option(Path("datathread-teams.zip"), "-o", "--output", help="Zip to write."),
) -> None:
    """Zip the Teams app package (manifest with MICROSOFT_APP_ID + icons) for sideloading."""
    from bot.teams_package import build_package

    try:
        path = build_package(_settings(), output)
    except ConfigError as exc:
        _die(str(exc))
    Console().print(str(path))


if __name__ == "__main__":
    app()
