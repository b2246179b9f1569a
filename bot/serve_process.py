"""The `datathread serve` process: uvicorn, with what stopping means for this app.

Why a subclass of uvicorn's server rather than `uvicorn.run`:
- A second Ctrl-C makes uvicorn skip the app's shutdown (its "force quit": open connections are not
  waited for). The app's shutdown then ran anyway, as a task cancelled while the event loop closed,
  and a task it awaited (the scheduler loop) raised that cancellation as an ERROR traceback. Here the
  second Ctrl-C still drops the connections at once, and the app's own shutdown (bounded: running
  turns get their finishing time, the threads of the rest are told) runs as after one Ctrl-C.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("datathread.server")


class Server(uvicorn.Server):
    """uvicorn's server, shutting the app down after a second Ctrl-C too."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT and not self.force_exit:
            log.warning("Ctrl-C again: stopping without waiting for open connections.")
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        if self.force_exit:  # uvicorn skipped the app's shutdown: the app still closes what it opened
            await self.lifespan.shutdown()


def serve(app, *, host: str, port: int, log_level: str) -> None:
    """Serve `app` until a stop signal, ending as `uvicorn.run` does: the signals uvicorn caught are
    raised again once it has stopped (a Ctrl-C ends here quietly), and exit code 3 when it never started."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    server = Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # the Ctrl-C uvicorn raised again once stopped
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
