"""What every `datathread` command module shares: the Typer app, settings read once (a bad value ends
the command in one sentence), the error line, and logging set-up. Kept apart from bot/cli.py so the
command modules (cli_eval, cli_verified, cli_schedule) never import the module that imports them."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click  # typer 0.29 parses with its own copy of click

from bot.cli_arguments import ReadableArguments
from bot.log_setup import LOG_LEVEL_HELP, parse_level, setup_logging
from core.config import ConfigError, Settings, load_settings, require_model
from core.config_names import names_given, unknown_setting_warnings, unparsable_lines
from core.config_types import check_writable_dir

app = typer.Typer(
    cls=ReadableArguments,  # every argument read as text UTF-8 can encode, file names as given
    help="datathread — answers data questions in Slack, Teams and the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)


def settings_or_exit(**overrides: object) -> Settings:
    warn_unknown_settings(overrides.get("_env_file", Settings.model_config.get("env_file")))
    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        die(str(exc))


def warn_unknown_settings(env_file: object) -> None:
    """A misspelled DATATHREAD_* name (DATATHREAD_ISOLATON=strict) is named, not silently ignored; the
    command goes on, since a stray variable of another tool must not stop the bot. Before the settings
    are checked: a typo is often the reason a value is missing."""
    logging.getLogger("dotenv.main").setLevel(logging.ERROR)  # its own line, twice: said once here
    for message in unparsable_lines(env_file) + unknown_setting_warnings(names_given(env_file)):
        err.print(f"[yellow]warning:[/] {escape(message)}")


def die(message: str, code: int = 2):
    """One sentence on stderr, then exit. The sentence is plain text: one quoting a value ("[redacted]",
    a cron field in brackets) lost the bracketed part to rich's markup."""
    err.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def run_app(typer_app: typer.Typer) -> None:
    """Run `typer_app` (datathread's), with a mistyped command line said in one sentence like every
    other mistake (click drew a usage line, a hint and a box around the error: five lines for
    `--bogus`), exit code 2 as before. A bare command group still shows its help."""
    try:
        code = typer_app(standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "datathread"
        err.print(f"[red]error:[/] {escape(exc.format_message().rstrip('.'))}; `{where} --help` says more.")
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("Aborted.")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)  # what standalone mode exits with, from typer.Exit


def _version(value: bool) -> None:
    """The release (core/release.py): the version plus the commit, so two releases are told apart. A
    bad setting does not stop it: DATATHREAD_RELEASE is taken when the settings read, else left out."""
    if value:
        from core.release import release_id

        try:
            configured = load_settings().release
        except ConfigError:
            configured = ""
        typer.echo(f"datathread {release_id(configured)}")
        raise typer.Exit()


@app.callback()
def main(
    _: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """datathread — answers data questions in Slack, Teams and the terminal."""


def log_level_option(default: str | None = None):
    """`--log-level` for every command that takes one, defined once: a level in any case (`info`), or a
    usage error naming the choices. A copy without the callback (`eval`'s) passed `info` through to the
    logging set-up, which failed with a TypeError (and `bogus` with an AttributeError)."""
    return typer.Option(default, "--log-level", callback=parse_level, help=LOG_LEVEL_HELP)


def setup_log(settings: Settings, level: str | None = None) -> None:
    """Logs to DATATHREAD_HOME/logs/datathread.log; on stderr too at `level` (bot/log_setup.py)."""
    setup_logging(settings, level)


def checked_or_exit(settings: Settings, *checks: Callable[[Settings], None]) -> None:
    """Each check (`require_model`, …) in turn; the first ConfigError is its sentence and exit 2. Called
    before a command's heavy imports and start-up, so what a user got wrong is said at once."""
    try:
        for check in checks:
            check(settings)
    except ConfigError as exc:
        die(str(exc))


def check_sandbox(settings: Settings) -> None:
    """A sandbox that cannot start here, in one sentence and exit 2 before anything starts: Modal
    without credentials (it failed at the first step, in the Modal client), or DATATHREAD_ISOLATION
    naming a back end this host lacks (probed in throw-away children, as `doctor` does). Steps that
    would run unconfined (DATATHREAD_ISOLATION=none, or a host that allows no isolation) are warned of
    on stderr: the terminal is where the person who runs them is."""
    if settings.sandbox == "modal":
        from core.modal_credentials import missing_credentials

        if problem := missing_credentials(os.environ, Path.home()):
            die(problem)
        return
    if settings.isolation == "strict":  # steps without isolation are refused, and say so
        return
    from core.isolation_backends import preview
    from core.secret_files import secret_files

    # ~50 ms of probes in throw-away children; the log said it, but chat and ask show no log
    unavailable = preview(settings.isolation or "best", masked=secret_files(settings)).missing.get(
        "back end", ""
    )
    if unavailable.startswith("DATATHREAD_ISOLATION="):
        die(f"{unavailable}; see `datathread doctor` for what it allows.")
    if unavailable:
        err.print(
            "warning: steps run without a sandbox here: model-written code can read and change whatever "
            "you can (`datathread doctor` says why).",
            markup=False,
        )


def names_a_folder(raw: str) -> bool:
    """Whether `-o RAW` names a folder to put a command's default file in: one that exists, or a path
    ending in / (as `cp` reads them; a Path drops the slash, so `-o out/` wrote a file named `out`). A
    path this user cannot even look at (`/root/x`, a 300-byte name) is no folder: `check_output_file`
    then says why in its sentence (Path.is_dir raised PermissionError, ENAMETOOLONG)."""
    if raw.endswith(("/", os.sep)):
        return True
    try:
        return Path(raw).is_dir()
    except OSError:
        return False


def check_output_file(path: Path) -> None:
    """End the command in one sentence (exit 2) when a file cannot be written at `path` (`-o`, `--output`),
    before any work: `eval --output` used to ask every question first, then fail in a traceback."""
    try:  # `-o /root/x` as another user, a name over 255 bytes: stat fails, and Path.exists() raises that
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:
        die(f"{path} cannot be written: {(exc.strerror or str(exc)).lower()}")
    if is_dir:
        die(f"{path} is a directory: name a file inside it")
    if exists:  # written in place: opening it to append changes nothing, and proves it writable
        try:  # (without blocking: a FIFO with no reader would wait here for one)
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError:
            die(f"{path} is not writable by this user")
        return
    try:
        check_writable_dir(path.absolute().parent)
    except ValueError as exc:
        die(f"{path} cannot be written: its folder {path.absolute().parent} {exc}")


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A write that fails anyway (a full disk, /dev/full, a folder gone since the check) ends the command
    in one sentence, not a traceback."""
    try:
        yield
    except OSError as exc:
        die(f"could not write {path}: {exc.strerror or exc}")


def warn_local_links(settings, *, always: bool = False) -> None:
    """Teams' channel downloads (CSVs, notebooks, large charts) are links signed with
    DATATHREAD_PUBLIC_URL: left at its default they lead every colleague to their own machine, and
    only `teams-package` said so. `serve` says it too when Teams is configured."""
    from bot.teams_package import local_only

    if (always or settings.microsoft_app_id) and local_only(settings):
        err.print(
            f"warning: DATATHREAD_PUBLIC_URL is {settings.public_url}, which only this machine reaches: "
            "download links in Teams would point there; set it to the address Teams reaches the bot at.",
            markup=False,
        )


async def start_analyst(settings: Settings, *, no_model: str = ""):
    """The core for `chat` and `ask`; with `no_model` (why there is none), for answers without the model."""
    try:
        if not no_model:
            require_model(settings)
        check_sandbox(settings)
        from core.analyst import Analyst  # after the checks: a missing key is told without 2 s of imports
        from core.model import NoModel

        # The fork server starts with the first step: a rejected key or a question without steps
        # answers without waiting for it (about 2 s of start-up and imports).
        model = NoModel(no_model) if no_model else None
        return await Analyst.create(settings, model=model, start_sandbox=False)
    except ConfigError as exc:
        die(str(exc))
    except Exception as exc:  # a part failed to start: one sentence, not a traceback
        from core.sessions import StoreUnavailable

        if isinstance(exc, StoreUnavailable):
            die(str(exc))
        raise
