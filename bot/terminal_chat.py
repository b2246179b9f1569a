"""`datathread chat`: the prompt loop, and Ctrl-C that stops an answer instead of the program.

The prompt is read synchronously between turns and each turn runs on one long-lived event loop. While
a turn runs, the first Ctrl-C cancels it: the running sandbox step is killed, the core saves the
question with a valid history and an audit record, and the prompt comes back. A second Ctrl-C while
it is still stopping quits (said when the stop lasts more than a moment). At the prompt, Ctrl-C clears
the line, as in Python's REPL and ipython (it quit, taking a half-typed question with it); Ctrl-D,
`exit` or `quit` quits (those two words are what people type first; sending them to Claude would cost
a model call). `help` is answered by the core. `/file PATH` shares a file with the next question
(bot/terminal_files.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import select
import signal
import sys
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from rich.console import Console
from rich.text import Text

from bot.stop_signals import loop_signal_handlers
from bot.terminal_files import file_control
from core.asked_when import host_zone
from core.config import Settings
from core.events import IncomingMessage, SharedFile
from core.help import is_local
from core.sessions import StoreUnavailable, store_place

PROMPT = "[bold green]› [/]"
CONTINUATION_PROMPT = "[dim]… [/]"
PASTE_GAP_S = 0.05  # lines waiting this soon after Enter were pasted, not typed
QUIT_WORDS = {"exit", "quit", "/exit", "/quit", ":q"}
CLEARED = "[dim]Ctrl-D or exit quits.[/]"  # under a line Ctrl-C cleared: one who pressed it to quit
# A stop usually ends within a moment, and the prompt is back, where Ctrl-C clears the line: "Press
# Ctrl-C again to quit" said at once sent people to a prompt that did not quit. Said when it lasts.
STOP_HINT_S = 1.0
STILL_STOPPING = "[yellow]Still stopping…[/] [dim]Press Ctrl-C again to quit.[/]"


def run_chat(settings: Settings, session: str | None, start_analyst) -> None:
    """The conversation: `start_analyst(settings)` is the CLI's coroutine that builds the core."""
    console = Console()
    with asyncio.Runner() as runner:
        analyst = runner.run(start_analyst(settings))
        key = runner.run(session_key(analyst, settings, session, console.print))
        console.print(  # the key, as everywhere else: chat/ask --session, export and audit all take it
            f"[bold]datathread[/] — session [cyan]{key[0]}[/]. Ask about the data, or type "
            "[bold]help[/]; Ctrl-C stops an answer or clears the line, [bold]exit[/] or Ctrl-D quits."
        )
        quit_early = False
        try:
            _converse(runner, console, analyst, settings, key)
        except KeyboardInterrupt:  # a second Ctrl-C while a turn was stopping
            quit_early = True
        finally:
            with contextlib.suppress(BaseException):
                run_interruptibly(runner, asyncio.wait_for(analyst.close(), 10))
    console.print(f"[dim]Resume with: datathread chat --session {key[0]}[/]")
    if quit_early:
        raise SystemExit(130)


async def session_key(analyst, settings: Settings, session: str | None, say) -> tuple[str, ...]:
    """The thread key of `--session`: the session it names, by key or full id; a new one when none is
    given. A name with no session yet starts one under that name (the way to name a conversation),
    but `say`s so: a mistyped key, or another folder's DATATHREAD_HOME, silently began an empty one."""
    if not session:
        return (uuid.uuid4().hex[:12],)
    try:
        key = await analyst.threads.terminal_key(session)
    except StoreUnavailable as exc:  # the turn will say so too; the session goes on under that name
        say(f"Could not look up session {session}: {exc}", markup=False, soft_wrap=True)
        return (session,)
    if key is not None:
        return key
    say(
        f"No session {session} in {store_place(settings)} yet: starting a new one with that name.",
        markup=False,
        soft_wrap=True,
    )
    return (session,)


def _converse(runner: asyncio.Runner, console: Console, analyst, settings: Settings, key: tuple) -> None:
    from bot.terminal import TerminalRenderer

    pending: list[SharedFile] = []  # shared with `/file PATH`, for the next question
    while True:
        try:
            question = read_question(console)
        except EOFError:
            console.print()
            return
        except KeyboardInterrupt:  # the line typed so far (and a paste's lines read so far) is dropped
            console.print()
            console.print(CLEARED)
            continue
        if not question.strip():
            continue
        if question.strip().lower() in QUIT_WORDS:
            return
        if (said := file_control(question, pending, settings)) is not None:
            console.print(said, markup=False, highlight=False, soft_wrap=True)  # and the chat goes on
            continue
        files = () if is_local(question) else tuple(pending)  # `help` leaves them for the question
        pending = pending if is_local(question) else []
        renderer = TerminalRenderer(
            console, settings.workspaces_dir, read=analyst.threads.read_artifact, home=settings.home
        )
        message = IncomingMessage(
            text=question.strip(), surface="terminal", thread_key=key, user_tz=host_zone(), files=files
        )
        turn = analyst.handle(message, renderer, confirm=terminal_confirmer(console, renderer))

        hint: list[asyncio.TimerHandle] = []

        def stopping(renderer=renderer, hint=hint) -> None:
            renderer.pause()
            console.print("[yellow]Stopping…[/]")
            hint.append(runner.get_loop().call_later(STOP_HINT_S, console.print, STILL_STOPPING))

        try:
            finished = run_interruptibly(runner, turn, stopping)
        finally:
            for handle in hint:
                handle.cancel()
        # Stopped: the core has said so in the turn's own words ("… Ask again to carry on."), as it does
        # in a Slack or Teams thread; this line only where the turn ended before the core could.
        if not finished and renderer.transcript.failure is None:
            renderer.pause()
            console.print("[yellow]Stopped.[/] [dim]The question is kept in this session's history.[/]")


def read_question(console: Console) -> str:
    """The prompt. On a terminal through readline: arrow keys edit the line and recall earlier
    questions (a stopped one included) instead of arriving as `^[[D` in the question; elsewhere (a
    pipe, a test) as any line read.

    A question pasted over several lines is one question: readline hands back the first line and the
    rest is already waiting on the terminal (no person types the next line within `PASTE_GAP_S` of
    pressing Enter), so those lines are read on continuation prompts and joined. Otherwise each line
    of a pasted SQL query or list became a question of its own, each a model call. Not for a pipe:
    there every line is a question (scripts and tests feed `chat` that way)."""
    if not (console.is_terminal and sys.stdin.isatty()):
        return console.input(PROMPT)
    lines = [_read_line(console, PROMPT)]
    while _pasted_more():
        lines.append(_read_line(console, CONTINUATION_PROMPT))
    return "\n".join(lines)


def _pasted_more() -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], PASTE_GAP_S)
    return bool(ready)


def _read_line(console: Console, prompt: str) -> str:
    """One line through readline. The prompt goes to `input()` itself, its colour codes marked as
    taking no room (\\001…\\002), so readline knows where the line starts; printed before `input("")`
    instead, it would be drawn over on every redraw (recalling a question, Ctrl-L). libedit (macOS)
    does not know the markers: plain."""
    import readline  # importing it is what turns on line editing and history for input()

    if "libedit" in (readline.__doc__ or ""):
        return input(Text.from_markup(prompt).plain)
    with console.capture() as drawn:
        console.print(prompt, end="")
    return input(re.sub(r"(\x1b\[[0-9;]*m)", "\x01\\1\x02", drawn.get()))


def run_interruptibly(
    runner: asyncio.Runner, coro: Coroutine[Any, Any, Any], on_stop: Callable[[], None] | None = None
) -> bool:
    """Run `coro` on the runner's loop; the first Ctrl-C cancels it (`on_stop` says so at once; returns
    False once it has wound down), a second one raises KeyboardInterrupt. True when it finished by itself.

    Ctrl-C is counted through the loop's signal handler (`bot/stop_signals.py`), which sees every press:
    two quick presses on a busy machine were one. A press while the stopped turn still winds down is
    the second press.

    A closed terminal (SIGHUP) or a SIGTERM (`timeout`, a logout) stops `coro` the same way, lets it wind
    down, then ends the process (SystemExit 128 + the signal): they killed it at once, and the question
    asked was gone from the session's history."""
    loop = runner.get_loop()
    task = loop.create_task(coro)
    interrupts = 0
    ended_by: int | None = None

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt  # a loop callback's KeyboardInterrupt leaves run_until_complete
        task.cancel()
        if on_stop is not None:
            on_stop()

    def on_end(signum: int) -> None:
        nonlocal ended_by
        if ended_by is None:
            ended_by = signum
            task.cancel()

    handlers = {
        signal.SIGINT: on_sigint,
        signal.SIGTERM: functools.partial(on_end, signal.SIGTERM),
        signal.SIGHUP: functools.partial(on_end, signal.SIGHUP),
    }
    with loop_signal_handlers(loop, handlers):
        try:
            loop.run_until_complete(task)
            finished = interrupts == 0 and ended_by is None
        except asyncio.CancelledError:
            finished = False
    if ended_by is not None:
        raise SystemExit(128 + ended_by)
    return finished


def terminal_confirmer(console: Console, renderer):
    """Ask at the prompt before an expensive query runs; anything but yes means no."""

    async def confirm(request) -> bool:
        renderer.pause()
        yes = request.yes or "Run it"
        answer = await asyncio.to_thread(console.input, f"[yellow]{request.prompt}[/] {yes}? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    return confirm
