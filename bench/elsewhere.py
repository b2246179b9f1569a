"""Processes of a bench that stand for other machines: the client timing the acks, and the fake
Slack Web API and Messages API the bot's turns call.

Why not threads of the bench process: a client sharing an interpreter lock with the fakes times its
own waits for them — and only `datathread serve`'s turns make fake traffic, the bare app's baseline
does not. Each runs in a session of its own, so Linux (autogroups) schedules it as its own group, like
a caller elsewhere. The fakes also get the lowest CPU priority: in production Slack and Anthropic
spend their own machines' CPU, not the bot host's, so on a 2-core bench host they should take what
the bot leaves rather than half of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path

from bench.harness import answers_by_thread, recording_slack

_SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or locks forked along


def _own_session(*, lowest_priority: bool = False) -> None:
    from core.isolation import die_with_parent

    os.setsid()  # its own scheduling group — and out of the bench's process group, so:
    die_with_parent()
    if lowest_priority:
        os.nice(19)
        with contextlib.suppress(OSError):  # the group's weight, where autogroups are on
            Path("/proc/self/autogroup").write_text("19")


def _ready() -> bool:
    return True


@contextlib.contextmanager
def load_generator() -> Iterator[ProcessPoolExecutor]:
    """The process that sends events and times the acks (`send` runs a coroutine there), started
    before anything is timed."""
    with ProcessPoolExecutor(max_workers=1, mp_context=_SPAWN, initializer=_own_session) as pool:
        pool.submit(_ready).result()
        yield pool


async def send(pool: ProcessPoolExecutor, load, *args, **kwargs):
    """`await load(*args, **kwargs)` in the load generator's process (`load`: a module-level
    coroutine function); its return value."""
    return await asyncio.get_running_loop().run_in_executor(pool, _call, load, args, kwargs)


def _call(load, args: tuple, kwargs: dict):
    return asyncio.run(load(*args, **kwargs))


def _serve_fakes(conn: Connection) -> None:
    from tests.fakes.anthropic_api import FakeAnthropic

    _own_session(lowest_priority=True)
    fake, api = FakeAnthropic().start(), recording_slack()
    try:
        conn.send((fake.url, api.url))
        while conn.recv() == "answers":
            conn.send(answers_by_thread(api))
    except EOFError:  # the bench went away
        pass
    finally:
        fake.stop()
        api.stop()


class FakeServices:
    """The fake Messages API (answers at once) and the recording Slack Web API, in their own process."""

    def __enter__(self) -> FakeServices:
        self._conn, child = _SPAWN.Pipe()
        self._process = _SPAWN.Process(target=_serve_fakes, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self.model_url, self.slack_url = self._conn.recv()
        return self

    def answers(self) -> dict[str, int]:
        """How many final answers each thread got so far (`bench.harness.answers_by_thread`)."""
        self._conn.send("answers")
        return self._conn.recv()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
