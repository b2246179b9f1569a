"""A turn worker of `datathread serve`: its `main()`, forked from a template that imported this module
once (`core/worker_fork.py`, started by `core/runner_workers.py`).

It builds the same app as the web process around a `LocalRunner` — same surfaces, so the same job
handlers — starts the core once (its own fork server; no scheduler loop: the web process ticks), says
`ready` on its protocol pipe and runs jobs until the parent closes its stdin. The protocol pipe is a
copy of the original stdout; stdout itself then points at stderr, so library chatter cannot corrupt it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from bot.log_setup import drop_endpoint_notices, setup_logging
from bot.server import create_app
from core.config import ConfigError, load_settings
from core.runner import LocalRunner
from core.runner_redis import RedisJobs
from core.runner_worker import HURRY_SIGNAL, Worker, die_with_parent
from core.sessions import StoreUnavailable

NICE = 10


async def _stdin() -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**24)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    return reader


async def run(first: dict, out) -> None:
    settings = load_settings(
        _env_file=None, **{**first["settings"], "scheduler_loop": False, "turn_workers": 0}
    )
    setup_logging(settings, first.get("log_level"))
    drop_endpoint_notices()  # the web process has said them
    runner = LocalRunner(max_concurrent=4 * settings.max_concurrent_turns)
    app = create_app(settings, runner=runner, freeze_heap=True)
    async with app.router.lifespan_context(app):
        state = app.state.datathread
        worker = Worker(
            runner,
            out,
            slots=4 * settings.max_concurrent_turns,
            finish_s=first["finish_s"],
            grace_s=first["grace_s"],
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(HURRY_SIGNAL, worker.hurry)
        try:
            worker.send({"ready": True, "protections": state.analyst.protections()})
            stdin = await _stdin()
            if first.get("redis") and settings.redis_url:
                jobs = RedisJobs(settings.redis_url)
                try:
                    await worker.serve_redis(
                        jobs, first["consumer"], stdin, lost_after_s=first["lost_after_s"]
                    )
                finally:
                    await jobs.close()
            else:
                await worker.serve_pipe(stdin)
        finally:
            _ignore_hurry(loop)


def _ignore_hurry(loop: asyncio.AbstractEventLoop) -> None:
    """Back to ignoring `HURRY_SIGNAL` before the loop goes: closing it would reset the signal to its
    default action, and a second Ctrl-C while this process finishes exiting would kill it (blocked
    meanwhile, so none lands between the two calls)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {HURRY_SIGNAL})
    try:
        loop.remove_signal_handler(HURRY_SIGNAL)
        signal.signal(HURRY_SIGNAL, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {HURRY_SIGNAL})


def _first_line() -> bytes:
    """The settings line, read byte by byte: a buffered read could swallow the first job with it."""
    chunks = []
    while (byte := os.read(0, 1)) and byte != b"\n":
        chunks.append(byte)
    return b"".join(chunks)


def main() -> None:
    die_with_parent()
    # Turns are throughput; acks are latency. Under a burst the kernel runs the web process first: the
    # worker shares the web process's session (its autogroup, where nice values compare). Its fork
    # server and steps inherit the nice value, but each starts a session of its own (a scheduling group
    # at nice 0 under autogroups), so against the web process they weigh as much as it does.
    os.nice(NICE)
    # A background process group of the terminal's session: with `stty tostop` its first log line
    # would stop it (SIGTTOU). Ignored, the write goes through, as the web process's own lines do.
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    line = _first_line()
    if not line:
        sys.exit(0)
    try:
        asyncio.run(run(json.loads(line), out))
    except (ConfigError, StoreUnavailable) as exc:  # e.g. Redis down at a restart: the parent retries
        sys.stderr.write(f"turn worker: {exc}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
