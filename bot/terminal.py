"""The terminal surface: renders turn events with rich (live status per step with the time it has
been waiting, Markdown answer, charts inline where the terminal can draw them).

In `datathread chat` on a terminal the text shows as Claude writes it: a live Markdown view of the
current model call's text (its last screenful), redrawn at most `TEXT_REDRAW_S` apart. The view is
transient: text before a step gives way to the step's status line, and the finished answer is printed
once, whole, so the scrollback holds exactly what a non-live run prints."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.status import Status
from rich.text import Text

from bot.terminal_controls import printable
from bot.terminal_images import image_protocol, inline_image, save_for_user
from bot.terminal_markdown import AnswerMarkdown
from bot.transcript import Change, Transcript
from bot.transcript import brief as transcript_brief
from core.events import (
    AnswerDelta,
    AnswerReady,
    ArtifactReady,
    StepStarted,
    Thinking,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnNote,
    Waiting,
)
from core.receipt import receipt_line
from core.wording import counted


def brief(text: str, limit: int = 90) -> str:
    """SQL or code on one status line."""
    return transcript_brief(text, limit)


def format_footer(event: TurnFinished) -> str:
    """One line under the answer: its receipt (or steps, rows and time), then tokens; empty for an
    answer that asked Claude nothing and ran nothing (`help`, the table list): "0 steps · 0 tokens"
    under it was noise."""
    s = event.stats
    tokens = f"{s.input_tokens + s.output_tokens:,} tokens ({s.cache_read_tokens:,} cached)"
    if event.receipt is not None:
        return f"{receipt_line(event.receipt)} · {tokens}"
    if not (s.model_calls or s.steps):
        return ""
    parts = [counted(s.steps, "step")]
    if s.rows:
        parts.append(counted(s.rows, "row"))
    return " · ".join([*parts, f"{s.duration_s:.1f} s", tokens])


# Under a failure the model's set-up caused (`ModelFault`: key, model, endpoint, account), in the
# terminal only: whoever reads it there can fix the set-up; in a Slack or Teams thread they cannot.
FAULT_HINT = "`datathread doctor` checks the model's key, name and endpoint."


class Elapsed:
    """A status line that shows how long it has been showing (re-rendered by the spinner, ~12×/s)."""

    def __init__(self, markup: str):
        self.markup = markup
        self.since = time.monotonic()

    def __rich__(self) -> Text:
        return Text.from_markup(f"{self.markup} [dim]{time.monotonic() - self.since:.0f}s[/]")


ReadArtifact = Callable[[ArtifactReady], Awaitable[bytes]]
TEXT_REDRAW_S = 0.1
SAVING = "Saving the answer…"  # `ask`'s status between the answer ready and the turn's end


class TerminalRenderer:
    """An EventSink for a terminal: a spinner while working, a line per step, the answer as Markdown.

    With `read` and `home`, attached files are copied where the user can open them and PNG charts are
    drawn inline on terminals that can (see bot/terminal_images.py)."""

    def __init__(
        self,
        console: Console,
        workspace_root: Path,
        *,
        live: bool = True,
        read: ReadArtifact | None = None,
        home: Path | None = None,
        env: Mapping[str, str] = os.environ,
    ):
        self.console = console
        self.workspace_root = workspace_root
        self.live = live and console.is_terminal
        self.status: Status | None = None
        self.files: list[Path] = []
        self.read, self.home, self.env = read, home, env
        self.transcript = Transcript()
        self.writing: Live | None = None  # the live view of the text being written
        self.written, self.call, self.drawn_at = "", 0, 0.0

    def _set_status(self, text: str) -> None:
        if not self.live:
            return
        text = printable(text)
        self._stop_writing()
        if self.status is None:
            self.status = self.console.status(Elapsed(text))
            self.status.start()
        else:
            self.status.update(Elapsed(text))

    def pause(self) -> None:
        """Stop the spinner so a prompt can be answered."""
        self._stop()

    def _stop(self) -> None:
        self._stop_writing()
        if self.status is not None:
            with contextlib.suppress(Exception):
                self.status.stop()
            self.status = None

    def _write(self, delta: AnswerDelta) -> None:
        """Show the text of the current call so far (a new call starts a new text)."""
        if not self.live:
            return
        if delta.call != self.call:
            self.written, self.call = "", delta.call
        self.written += delta.text
        if self.writing is None:
            self._stop()
            self.writing = Live(console=self.console, auto_refresh=False, transient=True)
            self.writing.start()
        elif time.monotonic() - self.drawn_at < TEXT_REDRAW_S:
            return
        lines = self.written.splitlines()[-max(self.console.height - 2, 1) :]
        self.writing.update(AnswerMarkdown(printable("\n".join(lines))), refresh=True)
        self.drawn_at = time.monotonic()

    def _stop_writing(self) -> None:
        if self.writing is not None:
            with contextlib.suppress(Exception):
                self.writing.stop()
            self.writing = None

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, AnswerDelta):
            self._write(event)
            return
        if isinstance(event, Waiting):  # a line that stays, and the time waited on the status line
            self._print(f"[yellow]{escape(event.text)}[/]")
            self._set_status(f"[dim]{escape(event.text)}[/]")
            return
        change = self.transcript.apply(event)
        t = self.transcript
        if change is Change.THINKING:
            self._set_status(f"[dim]{escape(brief(event.text))}[/]")  # type: ignore[union-attr]
        elif change is Change.STEP and t.last is not None and t.last.status == "running":
            self._set_status(f"{escape(t.last.title)} [dim]{escape(brief(t.last.detail))}[/]")
        elif change is Change.STEP and t.last is not None:
            mark = "[green]✓[/]" if t.last.status == "done" else "[red]✗[/]"
            self._print(f"{mark} [bold]{escape(t.last.title)}[/] {escape(t.last.outcome)}")
        elif change is Change.ARTIFACT:
            await self._attachment(event)  # type: ignore[arg-type]
        elif isinstance(event, AnswerReady):
            self._stop()
            self._print_answer(event.text)
        elif isinstance(event, TurnFailed):
            self._stop()
            error_id = f" [dim](error id {event.error_id})[/]" if event.error_id else ""
            self.console.print(f"[red]✗ {escape(printable(event.message))}[/]{error_id}")
            if event.fault:
                self.console.print(f"[dim]{escape(FAULT_HINT)}[/]")
        elif change is Change.FINISHED:
            self._stop()
            for note in t.notes:  # below the answer, as Slack and Teams show them: a file not read
                self._print(f"[yellow]{escape(note)}[/]", whole=True)
            if footer := format_footer(event):  # type: ignore[arg-type]
                self.console.print(f"[dim]{escape(footer)}[/]")

    def _print_answer(self, text: str) -> None:
        """The answer as Markdown. rich pads each line of it to the console's width: on a terminal
        that is invisible, but `datathread chat < questions > answers.txt` wrote every line padded
        with spaces to 80 columns, so output that is not a terminal is printed without them."""
        answer = AnswerMarkdown(printable(text))
        if self.console.is_terminal:
            self.console.print(answer)
            return
        with self.console.capture() as captured:
            self.console.print(answer)
        lines = "\n".join(line.rstrip() for line in captured.get().split("\n"))
        self.console.print(lines, markup=False, highlight=False, emoji=False, soft_wrap=True, end="")

    async def _attachment(self, event: ArtifactReady) -> None:
        path = self.workspace_root / event.session_id / event.path
        if self.read is None or self.home is None:
            self.files.append(path)
            self._print(f"[cyan]📎 {escape(event.title)}[/] → {escape(str(path))}", whole=True)
            if event.described:
                self._print(f"  [dim]{escape(event.alt_text)}[/]")
            return
        try:
            data = await self.read(event)
        except (OSError, ValueError) as exc:  # gone, or a CSV that cannot be made spreadsheet-safe
            self._print(f"[yellow]📎 {escape(event.title)}: not saved ({escape(str(exc))})[/]")
            return
        path = save_for_user(data, self.home, event.session_id, event.path, self.env)
        self.files.append(path)
        self._print(f"[cyan]📎 {escape(event.title)}[/] → {escape(str(path))}", whole=True)
        protocol = image_protocol(self.env) if self.console.is_terminal else None
        if protocol and path.suffix.lower() == ".png":
            self._stop()  # the escape must not interleave with the spinner's redraws
            self.console.file.write(inline_image(data, protocol, name=path.name))
            self.console.file.flush()
        elif event.described:  # not drawn: what it shows, in words, under its path
            self._print(f"  [dim]{escape(event.alt_text)}[/]")

    def _print(self, text: str, *, whole: bool = False) -> None:
        """`whole`: one line however long (soft wrap: the terminal folds it for the eye, a copy gets it
        whole) — a file's path was cut by a real line break at 80 columns, and could not be pasted."""
        text = printable(text)
        console = self.status.console if self.status is not None else self.console
        console.print(text, soft_wrap=whole)


class WaitingStatus:
    """An EventSink for `ask`: only a transient status line on stderr with the time waited (when stderr
    is a terminal), so scripts reading stdout get the answer alone."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.status: Status | None = None
        self.finished: TurnFinished | None = None  # for the receipt `ask` prints under the answer
        self.failed: TurnFailed | None = None  # for a stopped `ask`, whose own printing never runs
        self.answer: str | None = None  # the answer given, printed even if keeping it fails
        self.notes: list[str] = []  # the core's sentences for the person (a shared file not read)

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, TurnFinished):
            self.finished = event
        elif isinstance(event, TurnFailed):
            self.failed = event
        elif isinstance(event, AnswerReady):
            self.answer = event.text
        elif isinstance(event, TurnNote):
            self.notes.append(event.text)
        elif isinstance(event, Waiting):  # said even when stderr is no terminal: a wait is no hang
            self.console.print(event.text, markup=False, highlight=False)
        if not self.console.is_terminal:
            return
        if isinstance(event, AnswerReady) and self.status is not None:  # printed once the turn has
            self.status.update(Elapsed(f"[dim]{SAVING}[/]"))  # ended: a blank line looked like a hang
        elif isinstance(event, Thinking | StepStarted | Waiting):
            text = event.title if isinstance(event, StepStarted) else event.text
            if self.status is None:
                self.status = self.console.status(Elapsed(f"[dim]{escape(text)}[/]"))
                self.status.start()
            else:
                self.status.update(Elapsed(f"[dim]{escape(text)}[/]"))
        elif isinstance(event, TurnFailed | TurnFinished) and self.status is not None:
            self.status.stop()
            self.status = None
