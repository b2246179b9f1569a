"""The event loop's handlers for the signals that stop a command's work — Ctrl-C, SIGTERM (`timeout`,
a logout, systemd) and a closed terminal (SIGHUP) — for as long as that work runs, then what was there
before. Chat (`bot/terminal_chat.py`) and `eval` (`bot/cli_eval.py`) each decide what a signal does.

Through the loop, not `signal.signal`: the loop's handler sees every signal (one byte each through the
wakeup fd), where a plain handler runs once for any number that arrive before the interpreter gets to
it. A signal the process started with ignored (`nohup`, a background job) stays ignored: that is what
whoever started it asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def loop_signal_handlers(
    loop: asyncio.AbstractEventLoop, handlers: dict[signal.Signals, Callable[[], None]]
) -> Iterator[None]:
    """`handlers` on `loop` while the block runs (not for a signal that arrived ignored); afterwards each
    signal's handler is the one it had (SIGINT: usually Python's KeyboardInterrupt)."""
    previous = {}
    for sig, handler in handlers.items():
        if (before := signal.getsignal(sig)) != signal.SIG_IGN:
            previous[sig] = before
            loop.add_signal_handler(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            loop.remove_signal_handler(sig)
            if before is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, before)
