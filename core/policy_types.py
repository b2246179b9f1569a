"""The policy's shared types: a `Verdict` on one piece of model-written code, and the `TableAllowlist`
that decides which tables a query may read. Used by both policies and by warehouses and access control.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Verdict:
    """Outcome of a policy check; ``reason`` is written for the model so it can fix its next attempt."""

    allowed: bool
    reason: str = ""
    tables: tuple[str, ...] = ()
    kind: str = ""


@dataclass(frozen=True)
class TableAllowlist:
    """Which tables a query may read, as case-insensitive fnmatch patterns; empty means allow all.

    ``*`` matches across dots, so ``proj.*`` allows every dataset of ``proj``.
    """

    patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        raw = (self.patterns,) if isinstance(self.patterns, str) else self.patterns
        cleaned = tuple(p.strip().lower() for p in raw if p and p.strip())
        object.__setattr__(self, "patterns", cleaned)

    @property
    def allow_all(self) -> bool:
        """True when no patterns are configured, so every table (and project-level metadata) is allowed."""
        return not self.patterns

    def allows(self, ref: str) -> bool:
        """Whether one fully-qualified table name may be read."""
        return self.allow_all or any(fnmatchcase(ref.lower(), p) for p in self.patterns)

    def allows_prefix(self, prefix: str) -> bool:
        """Whether *every* table whose name starts with ``prefix`` is allowed.

        Used for BigQuery wildcard tables (``proj.ds.events_*``) and dataset INFORMATION_SCHEMA
        (``proj.ds.``), which expose many tables at once: a pattern qualifies only if it ends in ``*`` and
        its head matches some prefix of ``prefix`` (so ``proj.ds.*`` or ``proj.ds.events_*`` do).
        """
        if self.allow_all:
            return True
        low = prefix.lower()
        return any(
            p.endswith("*") and any(fnmatchcase(low[:k], p[:-1]) for k in range(len(low) + 1))
            for p in self.patterns
        )
