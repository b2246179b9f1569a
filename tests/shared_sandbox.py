"""One started sandbox fork server per test process, lent to every in-process core a test builds.

Starting a fork server (a fresh interpreter importing pandas, matplotlib and DuckDB) costs seconds;
most tests only need *a* started sandbox, not their own. `SandboxLender.build` stands in for
`core.sandbox_factory.build_sandbox_and_warehouse` during a test: when the settings ask for exactly
what the shared fork server gives — the local sandbox on the demo warehouse, the same masked files
(or ones in the temp root it hides whole), quota and isolation policy, a home under this process's
temp root (which the shared server hides whole, so it hides at least what the test's own server
would) — the test gets the shared server, its `home/workspaces` pointing at the shared workspaces;
anything else gets its own server, as before. Between tests the workspaces are emptied, so no test
sees another's files.

The fork server's asyncio subprocess lives on a loop of its own in a background thread: each test
has its own event loop, and a child process must stay with the loop that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
from pathlib import Path

from core.config import Settings
from core.sandbox import Sandbox
from core.warehouse import DuckDBWarehouse, Warehouse

ISOLATION_POLICY = "best"  # what Settings.isolation=None means for the local sandbox


class _BackgroundLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="shared-sandbox", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class LentSandbox:
    """The shared LocalSandbox as one test sees it: everything delegated, except that `close()`
    leaves the fork server running for the next test and a dead one is restarted on its own loop."""

    def __init__(self, lender: SandboxLender) -> None:
        self._lender = lender
        self._sandbox = lender.sandbox

    def __getattr__(self, name: str):
        return getattr(self._sandbox, name)

    async def start(self) -> None:
        await asyncio.wrap_future(self._lender.ensure_started())

    async def run(self, request):
        await self.start()
        return await self._sandbox.run(request)

    async def close(self) -> None:
        """The lender empties the workspaces after the test; the fork server stays up."""


class SandboxLender:
    """Owns the shared fork server of this test process (started on first use)."""

    def __init__(self, root: Path, demo: Path) -> None:
        from core.sandbox_local import LocalSandbox

        self.root = root.resolve()  # every test's tmp_path (so every test home) is under it
        self.workspaces = self.root / "shared-sandbox" / "workspaces"
        self.workspaces.mkdir(parents=True, exist_ok=True)
        self.demo = demo
        self.masked = self._masked(Settings.model_construct(google_application_credentials=None))
        self.sandbox = LocalSandbox(
            workspaces=self.workspaces,
            warehouse=demo,
            masked=self.masked,
            hidden=[self.root],
            isolation_policy=ISOLATION_POLICY,
        )
        self._loop: _BackgroundLoop | None = None
        self.lent = False

    @staticmethod
    def _masked(settings: Settings) -> list[str]:
        from core.sandbox_factory import secret_files

        return sorted(str(Path(p).resolve()) for p in secret_files(settings))

    def ensure_started(self):
        """A concurrent future that is done once the fork server is up (started here if it is not)."""
        if self._loop is None:
            self._loop = _BackgroundLoop()
        return asyncio.run_coroutine_threadsafe(self.sandbox.start(), self._loop.loop)

    def fits(self, settings: Settings) -> bool:
        """Whether the shared fork server gives these settings what their own one would."""
        if settings.sandbox != "local" or settings.warehouse != "duckdb":
            return False
        if (settings.isolation or ISOLATION_POLICY) != ISOLATION_POLICY:
            return False
        if settings.workspace_mb * 2**20 != self.sandbox.workspace_bytes:
            return False
        # A secret file the test's own server would mask is masked here too, or lies in a folder this
        # server hides whole (a CLI test's `.env` in its own cwd under tmp_path): never less hidden.
        if not all(m in self.masked or self.root in Path(m).parents for m in self._masked(settings)):
            return False
        home = settings.home.resolve()
        if self.root not in home.parents:
            return False
        demo = home / "warehouse" / "nycflights13.duckdb"
        if not demo.exists() or not os.path.samefile(demo, self.demo):
            return False
        workspaces = home / "workspaces"  # what settings.workspaces_dir names, before resolving
        return workspaces.is_symlink() and workspaces.resolve() == self.workspaces or not workspaces.exists()

    async def build(self, settings: Settings) -> tuple[Sandbox, Warehouse]:
        workspaces = settings.home.resolve() / "workspaces"
        if not workspaces.is_symlink():
            workspaces.symlink_to(self.workspaces, target_is_directory=True)
        lent = LentSandbox(self)
        await lent.start()
        self.lent = True
        home_demo = settings.home.resolve() / "warehouse" / "nycflights13.duckdb"
        warehouse = DuckDBWarehouse(
            home_demo, lent, step_memory_mb=settings.step_memory_mb, step_file_mb=settings.step_file_mb
        )
        return lent, warehouse  # type: ignore[return-value]

    def after_test(self) -> None:
        """Empty the shared workspaces and forget per-session step locks (they belong to the test's
        event loop, which is closed now)."""
        if not self.lent:
            return
        self.lent = False
        self.sandbox._session_locks.clear()
        self.sandbox._session_waiters.clear()
        for entry in self.workspaces.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()

    def close(self) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(Exception):
            self._loop.run(self.sandbox.close(), timeout=30)
        self._loop.stop()
