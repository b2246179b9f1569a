"""macOS Seatbelt: the per-step sandbox profile, and applying it to the forked step child.

The profile is deny-by-default: no network, reads only of the runtime, the system's libraries and
(for warehouse steps) the warehouse, reads and writes only of the session's workspace. The bot's
home, its state and other sessions' workspaces are denied even when they sit under an allowed path
(later rules win in SBPL). It is applied with `sandbox_init` from libsystem_sandbox in the child the
fork server made for the step, before any model code runs.

Fork safety: the fork server preloads only the data stack with matplotlib's Agg backend (no
Objective-C frameworks), so forking it is as safe on macOS as on Linux; `OBJC_DISABLE_INITIALIZE_FORK_SAFETY`
is never set. Not exercised by this repository's CI (no macOS runner): only the profile text is tested.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

SYSTEM_READ = ("/usr/lib", "/usr/share", "/System", "/Library/Frameworks", "/private/var/db/timezone", "/dev")


def available() -> bool:
    """True on macOS with libsandbox present."""
    return sys.platform == "darwin" and bool(
        ctypes.util.find_library("sandbox") or ctypes.util.find_library("System")
    )


def _quote(path: str) -> str:
    return '"' + os.path.realpath(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def profile(*, workspace: str, read: list[str], deny: list[str]) -> str:
    """The SBPL profile text for one step (`deny` wins over `read`, never over the workspace)."""
    lines = [
        "(version 1)",
        "(deny default)",
        "(deny network*)",
        "(allow process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow sysctl-read)",
        '(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))',
        '(allow file-read* file-write-data (literal "/dev/null") (literal "/dev/zero"))',
        '(allow file-read* (literal "/dev/urandom") (literal "/dev/random"))',
        "(allow file-read-metadata)",
    ]
    readable = [*SYSTEM_READ, *read]
    lines.append(
        "(allow file-read* process-exec " + " ".join(f"(subpath {_quote(p)})" for p in readable) + ")"
    )
    if deny:
        lines.append("(deny file-read* file-write* " + " ".join(f"(subpath {_quote(p)})" for p in deny) + ")")
    lines.append(f"(allow file-read* file-write* (subpath {_quote(workspace)}))")
    return "\n".join(lines) + "\n"


def apply(text: str) -> None:
    """Enter the profile for the rest of this process's life (and its children). Raises OSError."""
    lib = ctypes.CDLL(ctypes.util.find_library("sandbox") or ctypes.util.find_library("System"))
    error = ctypes.c_char_p()
    if lib.sandbox_init(text.encode(), 0, ctypes.byref(error)) != 0:
        message = error.value.decode() if error.value else "sandbox_init failed"
        raise OSError(message)
