"""What the local sandbox would enforce on this host, probed without blocking the caller.

`isolation_backends.preview` forks throw-away children, which is only safe before the calling process
has any thread. `start_preview` forks one child at once, which runs the probe and reports over a pipe;
the caller may then start threads (`datathread doctor`'s reachability checks) and await the report,
so the probe costs no wall time of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable

from core import isolation_backends


def start_preview(policy: str, *, masked: list[str], timeout_s: float) -> Awaitable[dict[str, str]]:
    """Fork the probe now (call before any thread exists); await the result for its report, as
    `IsolationReport.as_dict()` gives it, or one OFF row saying why there is none."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: probe, report, exit without running any of the parent's clean-up
        code = 0
        try:
            os.close(read_end)
            report = isolation_backends.preview(policy, masked=masked).as_dict()
            with os.fdopen(write_end, "wb") as out:
                out.write(json.dumps(report).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    return _report(pid, read_end, timeout_s)


async def _report(pid: int, read_end: int, timeout_s: float) -> dict[str, str]:
    """The child's report; never waits longer than `timeout_s` (a stuck probe is killed)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb")
    )
    try:
        async with asyncio.timeout(timeout_s):
            data = await reader.read()
        return json.loads(data) if data else {"back end": "OFF — the sandbox probe failed on this host"}
    except TimeoutError:
        return {"back end": f"OFF — the sandbox probe did not finish within {timeout_s:g} s"}
    finally:
        transport.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # exited already (or stuck): either way, reap it now
        await asyncio.to_thread(os.waitpid, pid, 0)
