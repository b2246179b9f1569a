"""The policy's shared types: a `Verdict` on one piece of model-written code, and the `TableAllowlist`
that decides which tables a query may read. Used by both policies and by warehouses and access control.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

_WILDCARD = "*?["


@dataclass(frozen=True)
class Verdict:
    """Outcome of a policy check; ``reason`` is written for the model so it can fix its next attempt."""

    allowed: bool
    reason: str = ""
    tables: tuple[str, ...] = ()
    kind: str = ""


@dataclass(frozen=True)
class TableAllowlist:
    """Which tables a query may read, as fnmatch patterns kept as written; empty means allow all.

    ``*`` matches across dots, so ``proj.*`` allows every dataset of ``proj``. How names compare is the
    warehouse's: DuckDB's identifiers are case-insensitive, so by default every letter is folded;
    BigQuery's dataset and table names are case-sensitive (``bill.reporting`` is not ``bill.REPORTING``)
    and its project ids lower case, so with ``case_sensitive`` only the project part is folded —
    folded everywhere, ``proj.Analytics`` was listed, described and checked as ``proj.analytics``,
    which BigQuery answers "not found", and ``bill.reporting`` admitted a distinct ``bill.REPORTING``.
    Use ``for_dialect`` to get the comparison a warehouse's names need.
    """

    patterns: tuple[str, ...] = ()
    case_sensitive: bool = False
    _folded: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        raw = (self.patterns,) if isinstance(self.patterns, str) else self.patterns
        cleaned = tuple(p.strip() for p in raw if p and p.strip())
        object.__setattr__(self, "patterns", cleaned)
        object.__setattr__(self, "_folded", tuple(self._fold(p, pattern=True) for p in cleaned))

    def for_dialect(self, dialect: str) -> TableAllowlist:
        """This allowlist compared as `dialect`'s names compare: case-sensitive for BigQuery only."""
        exact = dialect == "bigquery"
        return self if exact == self.case_sensitive else replace(self, case_sensitive=exact)

    @property
    def allow_all(self) -> bool:
        """True when no patterns are configured, so every table (and project-level metadata) is allowed."""
        return not self.patterns

    def allows(self, ref: str) -> bool:
        """Whether one fully-qualified table name may be read."""
        name = self._fold(ref)
        return self.allow_all or any(fnmatchcase(name, p) for p in self._folded)

    def allows_prefix(self, prefix: str) -> bool:
        """Whether *every* table whose name starts with ``prefix`` is allowed.

        Used for BigQuery wildcard tables (``proj.ds.events_*``) and dataset INFORMATION_SCHEMA
        (``proj.ds.``), which expose many tables at once: a pattern qualifies only if it ends in ``*`` and
        its head matches some prefix of ``prefix`` (so ``proj.ds.*`` or ``proj.ds.events_*`` do).
        """
        if self.allow_all:
            return True
        low = self._fold(prefix)
        return any(
            p.endswith("*") and any(fnmatchcase(low[:k], p[:-1]) for k in range(len(low) + 1))
            for p in self._folded
        )

    def allows_some(self, prefix: str) -> bool:
        """Whether some table whose name starts with ``prefix`` (``proj.ds.``) may be allowed: a pattern
        names a table there or its wildcard reaches into it. Which datasets a listing opens."""
        low = self._fold(prefix)
        return self.allow_all or any(fnmatchcase(low + "x", p) or p.startswith(low) for p in self._folded)

    def _fold(self, name: str, *, pattern: bool = False) -> str:
        """`name` as compared: all lower case, or (case-sensitive) its project part only — of a pattern,
        only where that part is a plain name, since `*` there may stand for a dataset too."""
        if not self.case_sensitive:
            return name.lower()
        head, dot, rest = name.partition(".")
        if pattern and any(c in head for c in _WILDCARD):
            return name
        return head.lower() + dot + rest
