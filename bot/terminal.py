"""The terminal surface: renders turn events with rich (live status per step with the time it has
been waiting, Markdown answer, charts inline where the terminal can draw them)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown
from rich.status import Status
from rich.text import Text

from bot.terminal_images import image_protocol, inline_image, save_for_user
from core.events import (
    AnswerReady,
    ArtifactReady,
    StepFinished,
    StepStarted,
    Thinking,
    TurnEvent,
    TurnFailed,
    TurnFinished,
)


def brief(text: str, limit: int = 90) -> str:
    """First meaningful line of SQL or code, cut to fit one status line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = " ".join(lines)[:limit]
    return first + ("…" if len(" ".join(lines)) > limit else "")


def format_footer(event: TurnFinished) -> str:
    """One line of what the turn cost: steps, rows, time, tokens."""
    s = event.stats
    parts = [f"{s.steps} step{'s' * (s.steps != 1)}"]
    if s.rows:
        parts.append(f"{s.rows:,} rows")
    parts.append(f"{s.duration_s:.1f}s")
    parts.append(f"{s.input_tokens + s.output_tokens:,} tokens ({s.cache_read_tokens:,} cached)")
    return " · ".join(parts)


class Elapsed:
    """A status line that shows how long it has been showing (re-rendered by the spinner, ~12×/s)."""

    def __init__(self, markup: str):
        self.markup = markup
        self.since = time.monotonic()

    def __rich__(self) -> Text:
        return Text.from_markup(f"{self.markup} [dim]{time.monotonic() - self.since:.0f}s[/]")


ReadArtifact = Callable[[ArtifactReady], Awaitable[bytes]]


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

    def _set_status(self, text: str) -> None:
        if not self.live:
            return
        if self.status is None:
            self.status = self.console.status(Elapsed(text))
            self.status.start()
        else:
            self.status.update(Elapsed(text))

    def pause(self) -> None:
        """Stop the spinner so a prompt can be answered."""
        self._stop()

    def _stop(self) -> None:
        if self.status is not None:
            with contextlib.suppress(Exception):
                self.status.stop()
            self.status = None

    async def __call__(self, event: TurnEvent) -> None:
        if isinstance(event, Thinking):
            self._set_status(f"[dim]{event.text}[/]")
        elif isinstance(event, StepStarted):
            self._set_status(f"{event.title} [dim]{brief(event.detail)}[/]")
        elif isinstance(event, StepFinished):
            r = event.record
            mark = "[green]✓[/]" if r.ok else "[red]✗[/]"
            self._print(f"{mark} [bold]{r.tool}[/] {r.summary}")
        elif isinstance(event, ArtifactReady):
            await self._attachment(event)
        elif isinstance(event, AnswerReady):
            self._stop()
            self.console.print(Markdown(event.text))
        elif isinstance(event, TurnFailed):
            self._stop()
            self.console.print(f"[red]✗ {event.message}[/] [dim](error id {event.error_id})[/]")
        elif isinstance(event, TurnFinished):
            self._stop()
            self.console.print(f"[dim]{format_footer(event)}[/]")

    async def _attachment(self, event: ArtifactReady) -> None:
        path = self.workspace_root / event.session_id / event.path
        if self.read is None or self.home is None:
            self.files.append(path)
            self._print(f"[cyan]📎 {event.title}[/] → {path}")
            return
        data = await self.read(event)
        path = save_for_user(data, self.home, event.session_id, event.path, self.env)
        self.files.append(path)
        self._print(f"[cyan]📎 {event.title}[/] → {path}")
        protocol = image_protocol(self.env) if self.console.is_terminal else None
        if protocol and path.suffix.lower() == ".png":
            self._stop()  # the escape must not interleave with the spinner's redraws
            self.console.file.write(inline_image(data, protocol, name=path.name))
            self.console.file.flush()

    def _print(self, text: str) -> None:
        if self.status is not None:
            self.status.console.print(text)
        else:
            self.console.print(text)


class WaitingStatus:
    """An EventSink for `ask`: only a transient status line on stderr with the time waited (when stderr
    is a terminal), so scripts reading stdout get the answer alone."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.status: Status | None = None

    async def __call__(self, event: TurnEvent) -> None:
        if not self.console.is_terminal:
            return
        if isinstance(event, Thinking | StepStarted):
            text = event.text if isinstance(event, Thinking) else event.title
            if self.status is None:
                self.status = self.console.status(Elapsed(f"[dim]{text}[/]"))
                self.status.start()
            else:
                self.status.update(Elapsed(f"[dim]{text}[/]"))
        elif isinstance(event, AnswerReady | TurnFailed | TurnFinished) and self.status is not None:
            self.status.stop()
            self.status = None
