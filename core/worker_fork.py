"""Turn-worker processes forked from one template that has already imported the worker's program.

Why: a turn worker started as `python -m bot.turn_worker` spent ~3 s of CPU importing the SDKs and
the surfaces (`anthropic` alone is 1,373 pydantic models) before building anything — at every start,
every restart after a crash, and once per worker. Here the standard library's fork server
(`multiprocessing` "forkserver": one fresh interpreter, started once per web process, that imports
the program and then forks a child per request) pays that once: a worker or a restarted worker costs a
fork, and the workers share the imported modules' memory copy-on-write.

The child is the same program as before — its `main()` with its protocol on stdin/stdout — so the
worker code does not know how it was started. The template is a fresh interpreter (never a fork of
the web process, whose threads and sockets a fork would copy); it runs with this process's
environment as it was when the first worker started. It exits when this process does, and a worker
whose template has gone dies with it (`die_with_parent`), so a killed web process leaves no worker.

The library's rule for its fork server: the web process's main module must be safe to import (it is
imported in the template as `__mp_main__`, once, so that objects defined there can be unpickled).
Every entry point here is — the `datathread` script, `python -m bench`, pytest.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection

NAME = b"turn-worker"  # the workers' process name (`ps -o comm`, /proc/PID/comm): the template's argv is the library's


def _child(module: str, stdin: Connection, stdout: Connection) -> None:
    """In the forked child: its own process group (the terminal's Ctrl-C is the web process's), the
    pipes as fds 0 and 1, a name of its own, then the program's `main()`."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # ignored in the template: _start_template
    # The library hands every child the write end of the template's "a client is alive" pipe (so a
    # child could fork through the template in turn). A worker holding it would keep the template
    # alive after the web process has died, and the template would keep the worker alive in turn
    # (its parent-death signal fires when the template exits): a worker needs no template of its own.
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    sys.stdin.close()  # the library's /dev/null stand-in: its fd must not be closed later, on fd 0
    os.dup2(stdin.fileno(), 0)
    os.dup2(stdout.fileno(), 1)
    stdin.close()
    stdout.close()
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's stdin, for its whole life
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(15, NAME)  # PR_SET_NAME
    importlib.import_module(module).main()


class ForkedWorker:
    """One worker process, with what the runner uses of an asyncio subprocess: `pid`, `stdin` (a
    writer), `stdout` (a reader), `returncode`, `wait()` and `kill()`."""

    def __init__(self, process, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader) -> None:
        self._process = process
        self.pid: int = process.pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._ended = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(process.sentinel, self._reap)

    def _reap(self) -> None:
        """The template reports the child's exit status on the sentinel (the child is its, not ours):
        -N for a signal, as asyncio's subprocesses say it."""
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._process.sentinel)
        self._process.join(0)
        self.returncode = self._process.exitcode if self._process.exitcode is not None else 255
        with contextlib.suppress(ValueError):
            self._process.close()
        if not self._ended.done():
            self._ended.set_result(self.returncode)

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, 9)


async def start_worker(module: str, *, limit: int) -> ForkedWorker:
    """Fork a worker running `module`'s `main()` from the template (started, importing `module`, on
    the first call). The start blocks on the template's first import: off the event loop."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", module, "core.heap_freeze"])
    _start_template()
    child_stdin, parent_stdin = context.Pipe(duplex=False)
    parent_stdout, child_stdout = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(module, child_stdin, child_stdout), name="turn-worker")
    try:
        await asyncio.to_thread(process.start)
    finally:
        child_stdin.close()
        child_stdout.close()
    # Not one of the library's children: at exit it would join them, and a worker ends only when
    # told. Ours end with the template, which ends with this process.
    multiprocessing.process._children.discard(process)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    read_end = _own_file(parent_stdout, "rb")
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), read_end)
    write_end = _own_file(parent_stdin, "wb")
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, write_end)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return ForkedWorker(process, writer, reader)


def _start_template() -> None:
    """Start the template (if it is not running) with Ctrl-C and SIGTERM ignored in it.

    It shares the web process's process group, so a Ctrl-C in the terminal reaches it too, and so
    does the SIGTERM `timeout`, systemd and `docker stop` send the whole group. The library ignores
    SIGINT in it only once its imports are done: a Ctrl-C during those seconds of `serve`'s start
    killed it with a KeyboardInterrupt traceback, and the web process's start failed with an EOFError
    traceback of its own. A SIGTERM ended it at once, and the workers with it (they die with their
    template): the answers being written were lost, and their threads' locks stayed taken until the
    TTL, so a question asked again after the restart waited that long. The template ends when this
    process does (it needs neither signal), and an ignored signal is what an exec keeps (a blocked one
    is not: the library's spawn clears the mask). So both are ignored here for the moment of the spawn
    — one arriving in those milliseconds is lost to this process too; the next one works. Signal
    handlers can only be set in the main thread; elsewhere the library starts the template as before."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _own_file(end: Connection, mode: str):
    """A pipe end as a file object for the event loop (the Connection gives its descriptor up)."""
    fd = os.dup(end.fileno())
    end.close()
    return os.fdopen(fd, mode, buffering=0)
