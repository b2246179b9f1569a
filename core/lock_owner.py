"""Who holds a session lock: an owner token that names the process, so that a turn waiting for a thread
can tell a holder that died (SIGKILL, the OOM killer, a crash) from one that is busy, and take the lock
at once instead of waiting out its TTL. Before, the thread's next question after a crash and a restart
waited the whole DATATHREAD_LOCK_TTL (60 s) behind a process that no longer existed.

Only a holder on this machine and in this PID namespace is ever judged: its pid is looked up in /proc
and its start time compared, so a pid reused by a later process does not keep a dead holder alive. A
holder anywhere else (another host, another container, a system without /proc, a token of an older
version) is never judged dead: its lock expires after its TTL, as before.
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path


def new_owner() -> str:
    """A fresh token for one holding of a lock: random, plus where and which process when knowable."""
    token = uuid.uuid4().hex
    place, pid = _place(), os.getpid()
    try:
        started = _started(pid)
    except OSError:
        started = None
    return f"{token}.{place}.{pid}.{started}" if place and started else token


def holder_died(owner: str) -> bool:
    """Whether the process that took the lock with `owner` is known to have ended (see the module).
    Only a pid that is gone, a zombie, or a pid a later process took counts: anything unsure (a /proc
    that hides other users' processes, no descriptor left to look) is a live holder."""
    parts = owner.split(".")
    if len(parts) != 4 or not parts[2].isdigit() or parts[1] != _place():
        return False
    try:
        return _started(int(parts[2])) != parts[3]
    except OSError:
        return False


@functools.cache  # a process's boot and PID namespace never change (every waiter asks ~20 times a second)
def _place() -> str | None:
    """This boot of this machine and this PID namespace: where a pid means one process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid")
        if os.readlink("/proc/self") != str(os.getpid()):  # a /proc of another PID namespace
            return None
    except OSError:
        return None
    return f"{boot.replace('-', '')}-{ns.st_dev:x}-{ns.st_ino:x}"


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks after boot), or None when it is gone or a zombie; any
    other failure to look is raised (OSError), never taken for a death."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]
