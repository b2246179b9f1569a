"""Blocking calls off the event loop in threads the process never waits for at exit.

Why not `asyncio.to_thread`: its threads are joined when the interpreter exits, so a blocking client
(boto3, the BigQuery REST client) stuck on a server that answers a byte every few seconds kept the
process alive long after Ctrl-C or SIGTERM had stopped the turn — minutes, once for ever. Here the
caller gives up at its deadline and the thread, a daemon, is simply left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T], *, name: str = "datathread-blocking") -> T:
    """Run blocking `fn` in a daemon thread and await its result (or exception)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not done.done():  # the caller may have given up (cancelled) meanwhile
            done.set_exception(error) if error else done.set_result(result)

    def work() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed after a timeout: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, daemon=True, name=name).start()
    return await done


class CallDeadline(TimeoutError):
    """The whole call took longer than its deadline (not a timeout the call raised itself)."""


async def within(fn: Callable[[], T], deadline_s: float, *, name: str = "datathread-blocking") -> T:
    """`in_daemon_thread(fn)`, given up after `deadline_s` (CallDeadline): a server that drips its answer
    never trips a client's per-read timeout, so the whole call needs one. A TimeoutError `fn` raises
    itself (a query job's own limit) comes through as it is."""
    call = asyncio.ensure_future(in_daemon_thread(fn, name=name))
    try:
        done, _ = await asyncio.wait({call}, timeout=deadline_s)
    finally:  # given up, or the caller cancelled: nobody will read its outcome
        if not call.done():
            call.cancel()
    if not done:
        raise CallDeadline(f"no answer within {deadline_s:g} s")
    return call.result()
