"""The terminal surface: renders turn events with rich (live status per step, Markdown answer)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown
from rich.status import Status

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


class TerminalRenderer:
    """An EventSink for a terminal: a spinner while working, a line per step, the answer as Markdown."""

    def __init__(self, console: Console, workspace_root: Path, *, live: bool = True):
        self.console = console
        self.workspace_root = workspace_root
        self.live = live and console.is_terminal
        self.status: Status | None = None
        self.files: list[Path] = []

    def _set_status(self, text: str) -> None:
        if not self.live:
            return
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

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
            path = self.workspace_root / event.session_id / event.path
            self.files.append(path)
            self._print(f"[cyan]📎 {event.title}[/] → {path}")
        elif isinstance(event, AnswerReady):
            self._stop()
            self.console.print(Markdown(event.text))
        elif isinstance(event, TurnFailed):
            self._stop()
            self.console.print(f"[red]✗ {event.message}[/] [dim](error id {event.error_id})[/]")
        elif isinstance(event, TurnFinished):
            self._stop()
            self.console.print(f"[dim]{format_footer(event)}[/]")

    def _print(self, text: str) -> None:
        if self.status is not None:
            self.status.console.print(text)
        else:
            self.console.print(text)
