"""The isolation back ends a test process can run here, shared by the isolation and hostile suites.

Host root gets today's design; an ordinary user gets user namespaces, the same with namespaces
refused (a seccomp filter in the fork server makes `unshare` fail, so the probe falls to Landlock),
Landlock named directly, and the no-isolation fallback.
"""

from __future__ import annotations

from core import isolation

BACKENDS = ["root"] if isolation.host_root() else ["userns", "refused", "landlock", "none"]
EXPECTED = {"root": "root", "userns": "userns", "refused": "landlock", "landlock": "landlock", "none": "none"}


def sandbox_options(backend: str) -> dict:
    """LocalSandbox keyword arguments that select `backend` (or simulate a refusing host)."""
    if backend == "refused":
        return {"isolation_policy": "best", "refuse_namespaces": True}
    return {"isolation_policy": backend}


def holds(protections: dict[str, str], protection: str) -> bool:
    """Whether a back end claims `protection`; where it does not, its report must say OFF."""
    state = protections.get(protection, "")
    assert state.startswith(("on", "OFF")), (protection, state)
    return state.startswith("on")
