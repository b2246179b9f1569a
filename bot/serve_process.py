"""The `datathread serve` process: uvicorn, told two things about stopping that it cannot know itself.

Why a subclass of uvicorn's server rather than `uvicorn.run`:
- The app must hear of a stop signal when it arrives, not when uvicorn reaches the app's shutdown:
  from then on a turn worker that ends is no crash to log and restart (a worker killed by the same
  signal, or by an OOM killer meanwhile). The workers and their fork template ignore the SIGTERM sent
  to the process group (`timeout`, systemd, `docker stop`): the app stops them in order.
- A second Ctrl-C makes uvicorn skip the app's shutdown (its "force quit": open connections are not
  waited for). The app's shutdown then ran anyway, as a task cancelled while the event loop closed,
  and a task it awaited (the scheduler loop) raised that cancellation as an ERROR traceback. Here the
  second Ctrl-C still drops the connections at once, and the app's own shutdown (bounded: running
  turns get their finishing time, the threads of the rest are told) runs as after one Ctrl-C.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("datathread.server")


class Server(uvicorn.Server):
    """uvicorn's server, calling `on_stop` at the first stop signal and `on_hurry` at a second Ctrl-C,
    and shutting the app down after a second Ctrl-C too."""

    def __init__(
        self, config: uvicorn.Config, *, on_stop: Callable[[], None], on_hurry: Callable[[], None]
    ) -> None:
        super().__init__(config)
        self.on_stop = on_stop
        self.on_hurry = on_hurry

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # In a signal handler: `on_stop` and `on_hurry` only set flags and send signals.
        if not self.should_exit:
            self.on_stop()
        elif sig == signal.SIGINT and not self.force_exit:
            log.warning(
                "Ctrl-C again: stopping now, without waiting for open connections or running answers."
            )
            self.on_hurry()
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        # uvicorn skipped the app's shutdown (a second Ctrl-C before it got there): the app still closes
        # what it opened. Not when it had already run it (the second Ctrl-C came during it): "Waiting
        # for application shutdown" was then said, and done, twice.
        if self.force_exit and not self.lifespan.shutdown_event.is_set():
            await self.lifespan.shutdown()


def serve(
    app, *, host: str, port: int, log_level: str, on_stop: Callable[[], None], on_hurry: Callable[[], None]
) -> None:
    """Serve `app` until a stop signal, ending as `uvicorn.run` does: the signals uvicorn caught are
    raised again once it has stopped (a Ctrl-C ends here quietly), and exit code 3 when it never started."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    server = Server(config, on_stop=on_stop, on_hurry=on_hurry)
    with contextlib.suppress(KeyboardInterrupt):  # the Ctrl-C uvicorn raised again once stopped
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def listen_problem(host: str, port: int) -> str | None:
    """Why `serve` could not listen on host:port, in a sentence, or None — checked before the app
    starts: uvicorn binds only after the app's start-up (turn workers, the sandbox: seconds), then
    reported a taken port as an ERROR line among the start-up's, and a port above 65535 as two
    tracebacks. A port taken between this check and uvicorn's bind still fails there, as before."""
    if not host.strip():
        return "--host is empty (it would listen on every interface): give an address, e.g. 127.0.0.1"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError):
        return f"--host {host} is not a name or address this machine can resolve"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except PermissionError:
            return f"port {port} needs privileges this user lacks: use a port above 1023"
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use: stop what listens there or choose another --port"
            return f"--host {host} is not an address of this machine ({exc.strerror or exc})"
    return None
