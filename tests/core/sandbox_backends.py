"""The isolation back ends a test process can run here, shared by the isolation and hostile suites.

Host root gets today's design; an ordinary user gets user namespaces, the same with namespaces
refused (a seccomp filter in the fork server makes `unshare` fail, so the probe falls to Landlock),
Landlock named directly, and the no-isolation fallback.
"""

from __future__ import annotations

import pytest

from core import isolation
from core.sandbox_local import LocalSandbox

BACKENDS = ["root"] if isolation.host_root() else ["userns", "refused", "landlock", "none"]
EXPECTED = {"root": "root", "userns": "userns", "refused": "landlock", "landlock": "landlock", "none": "none"}


def sandbox_options(backend: str) -> dict:
    """LocalSandbox keyword arguments that select `backend` (or simulate a refusing host)."""
    if backend == "refused":
        return {"isolation_policy": "best", "refuse_namespaces": True}
    return {"isolation_policy": backend}


async def start_sandbox(backend: str, **kwargs) -> LocalSandbox:
    """A started LocalSandbox on `backend`; the test is skipped, with the sandbox's own sentence, where
    this host does not offer it (e.g. a kernel without user namespaces)."""
    sb = LocalSandbox(**kwargs, **sandbox_options(backend))
    try:
        await sb.start()
    except RuntimeError as exc:
        await sb.close()
        pytest.skip(str(exc))
    return sb


def holds(protections: dict[str, str], protection: str) -> bool:
    """Whether a back end claims `protection`; where it does not, its report must say OFF."""
    state = protections.get(protection, "")
    assert state.startswith(("on", "OFF")), (protection, state)
    return state.startswith("on")
