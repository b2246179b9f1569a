"""What every surface shares: the app state (settings, runner, the core) and the `Surface` protocol
that `bot/server.py` lists. A surface owns its platform client and helpers; nothing is looked up by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from starlette.routing import Route

from bot.files import FileLinks
from core.analyst import Analyst
from core.config import Settings
from core.runner import Runner
from core.thread import Threads


class Surface(Protocol):
    """A chat surface or HTTP feature: its routes, and what it starts and stops with the app."""

    def routes(self) -> list[Route]: ...

    async def start(self) -> None:
        """After the core is built: register job handlers, start loops."""

    async def stop(self) -> None:
        """After the runner drained: close clients, stop loops."""


@dataclass
class AppState:
    """What request handlers share: the settings, the core and the runner (no globals)."""

    settings: Settings
    runner: Runner
    analyst: Analyst | None = None
    ready: bool = False
    links: FileLinks = field(init=False)

    def __post_init__(self) -> None:
        self.links = FileLinks(self.settings, read=self._read_file, kept_secret=self._kept_secret)

    @property
    def threads(self) -> Threads:
        """The core's thread seam (the app has started, so the core exists)."""
        if self.analyst is None:
            raise RuntimeError("the core is not started yet")
        return self.analyst.threads

    async def _read_file(self, session_id: str, path: str) -> bytes:
        return await self.threads.read_file(session_id, path)

    async def _kept_secret(self, name: str) -> bytes:
        return await self.threads.kept_secret(name)
