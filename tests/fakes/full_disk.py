"""A full disk without root: a child process whose files may not grow past a size (RLIMIT_FSIZE),
with SIGXFSZ ignored so a write past it fails with EFBIG, as a write to a full disk fails with ENOSPC.

Works for root too (a read-only folder does not stop root, so tests that need "cannot write here"
use this), and touches only the child: the test process and its other threads write freely.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from collections.abc import Callable

PYTHON = sys.executable


def files_limited_to(size: int) -> Callable[[], None]:
    """A `preexec_fn`: in the child, no file grows past `size` bytes (an ignored signal stays ignored
    across exec, so the limit shows as EFBIG in whatever program the child runs)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return limit


def run_python(code: str, *, size: int, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` with this interpreter in a child whose files may not grow past `size` bytes."""
    return subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        preexec_fn=files_limited_to(size),
    )
