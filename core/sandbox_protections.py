"""What the fork server's protections mean to the operator: one line at its start saying how many are
on, a warning naming those OFF and what can be done about them, and, under DATATHREAD_ISOLATION=strict
on a host that cannot isolate steps, the reason every step is refused.

Kept apart from core/sandbox_local.py, which runs the fork server and its steps: the fork server finds
the protections (core/isolation_backends.py); how they are reported, and what the policy makes of
them, changes here.
"""

from __future__ import annotations

import logging

from core import isolation_backends

log = logging.getLogger("core.sandbox_local")  # the sandbox's own lines, under the name they always had


def log_report(backend: str, protections: dict[str, str], policy: str) -> None:
    """At the fork server's start: how many protections are on (INFO), the whole report (DEBUG), and
    why steps are refused or which protections are OFF and what to do about it."""
    off = {k: v for k, v in protections.items() if not v.startswith("on")}
    # one short line at INFO (serve's terminal); the whole report (~1.5 KB on one line) at DEBUG
    on = sum(state.startswith("on") for state in protections.values())
    log.info(
        "sandbox ready, isolation back end %r: %d of %d protections on",
        backend,
        on,
        len(protections),
    )
    log.debug("sandbox protections: %s", protections)
    if refused := refused_reason(protections, policy):
        log.error("%s", refused)
    elif off:
        log.warning(
            "sandbox protections OFF on this host: %s (%s)",
            "; ".join(f"{k}: {v.split('— ', 1)[-1]}" for k, v in off.items()),
            off_advice(policy),
        )


def off_advice(policy: str) -> str:
    """What the operator can do about what is OFF. `serve` runs strict already, and strict asks only
    for network and filesystem isolation: advising it there, for a uid or cgroup row, misled."""
    required = " and ".join(isolation_backends.REQUIRED_FOR_STRICT)
    if policy != "strict":
        return f"set DATATHREAD_ISOLATION=strict to refuse steps without {required} isolation"
    return f"DATATHREAD_ISOLATION=strict needs only {required} isolation, which is on; docs/SECURITY.md says what each OFF row means"


def refused_reason(protections: dict[str, str], policy: str) -> str:
    """Why steps are refused (strict policy on a host that cannot isolate them), or ''."""
    missing = isolation_backends.unsatisfied_by(protections)
    if policy != "strict" or not missing or not protections:
        return ""
    return (
        f"Refused: DATATHREAD_ISOLATION=strict and this host gives the sandbox no {' or '.join(missing)} "
        "isolation (see `datathread doctor`). Steps do not run until it does, or set "
        "DATATHREAD_ISOLATION=best to accept that."
    )
