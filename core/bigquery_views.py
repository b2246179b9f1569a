"""Authorized views: the tables a query reaches through views it names, which the allowlist may not list.

A data team shares curated data as views in one dataset (`bill.reporting.v_sales`) over base tables in
another (`bill.raw.sales`) that people may not read — BigQuery's "authorized views". The dry run's
`referencedTables` are the tables the job accesses, which for a view are its base tables. So with
DATATHREAD_BIGQUERY_DATASETS=bill.reporting every question about the view was refused: "Table
bill.raw.sales is not allowed here".

What this can and cannot show. Nothing BigQuery says tells whether a table was read through a view or
directly: `referencedTables` is one flat list. A table outside the allowlist is accepted only as the base
table of an allowed view the SQL names, and that is an inference, so it is hedged three ways:
- the SQL itself was parsed and checked against the allowlist first (`check_sql`), and an outside
  table whose name appears anywhere in the SQL text (any quoting or case, or under a wildcard written
  there) is refused outright — a name the parser missed is almost always still in the text, and a
  view named in a branch that reads nothing cannot then vouch for it;
- views are followed (views of views, materialized views, a few levels) only until every outside table
  is accounted for, by the names their definitions give as `check_sql` reports them, case kept
  (BigQuery's dataset and table names are case-sensitive: `raw.SALES` is not `raw.sales`); a
  definition that does not parse, a view that cannot be read, or a check cut short by its time limit
  accepts nothing;
- after the job, its own `referencedTables` must fit the same accepted set (a view redefined between
  the dry run and the run), or its result is withheld.
What remains trusted: a view's definition is fixed by whoever may write in its (allowed) dataset.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable

from core.bigquery_client import bounded, off_loop
from core.policy import TableAllowlist, check_sql

VIEW_DEPTH = 3  # views of views followed this deep
VIEW_CALL_S = 10.0  # one tables.get, retries included
MAX_VIEWS = 20  # tables.get calls one query may make here
CHECK_S = 20.0  # the whole check; past it, nothing more is accepted and its thread stops calling
_NAME_END = r"(?![\w$-])"


class ViewCheck:
    """The outside-table check of one warehouse, with view definitions cached for `ttl` seconds (one
    tables.get per view a query names was made on every query, serially)."""

    def __init__(self, client, ttl: float):
        self.client, self.ttl = client, ttl
        self._definitions: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self._lock = threading.Lock()

    async def unaccounted(
        self,
        sql: str,
        tables: Iterable[str],
        outside: list[str],
        allow: TableAllowlist,
        *,
        dataset: str | None,
    ) -> list[str]:
        """Those of `outside` (names as BigQuery gave them) not shown to be read through an allowed view
        among `tables` (the SQL's own, as `check_sql` reported them); blocking calls in a thread that
        stops calling when this gives up."""
        stop = threading.Event()
        try:
            return await off_loop(
                self._unaccounted,
                sql,
                list(tables),
                outside,
                allow,
                dataset,
                stop,
                deadline_s=CHECK_S,
            )
        finally:
            stop.set()

    def _unaccounted(self, sql, tables, outside, allow, dataset, stop) -> list[str]:
        if named := [name for name in outside if named_in(sql, name, dataset)]:
            return named  # the SQL names it: no view vouches for what the parser may have missed
        left = set(outside)
        todo = [(name, 0) for name in tables if allow.allows(name)]
        seen: set[str] = set()
        while todo and left and len(seen) < MAX_VIEWS and not stop.is_set():
            name, depth = todo.pop(0)
            if name in seen or depth > VIEW_DEPTH or "*" in name:
                continue
            seen.add(name)
            definition = self._definition(name, stop)
            if definition is None:
                continue
            for base in _tables_of(*definition):
                left -= {r for r in left if _covers(base, r)}
                todo.append((base, depth + 1))
        return [name for name in outside if name in left or stop.is_set()]

    def _definition(self, name: str, stop: threading.Event) -> tuple[str, str] | None:
        """(SQL, project) of view `name`, or None: not a view, or unreadable (not cached)."""
        with self._lock:
            hit = self._definitions.get(name)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        retry = bounded(VIEW_CALL_S)
        try:
            table = self.client.get_table(
                name,
                retry=retry.with_predicate(lambda exc: not stop.is_set() and retry._predicate(exc)),
                timeout=VIEW_CALL_S,
            )
        except Exception:  # cannot tell: what it would have admitted stays refused
            return None
        definition = None
        if table.table_type == "VIEW" and table.view_query and not table.view_use_legacy_sql:
            definition = (table.view_query, table.project)
        elif table.table_type == "MATERIALIZED_VIEW" and table.mview_query:  # standard SQL only
            definition = (table.mview_query, table.project)
        with self._lock:
            self._definitions[name] = (time.monotonic() + self.ttl, definition)
        return definition


def named_in(sql: str, name: str, dataset: str | None) -> bool:
    """Whether table `name` (project.dataset.table) is written in `sql` — as `dataset.table` with or
    without a project, in any quoting or case, bare in the default `dataset`, or under a wildcard."""
    project, ds, table = name.lower().split(".", 2)
    text = _plain(sql).lower()
    in_default = (dataset or "").lower() in (f"{project}.{ds}", ds)
    if re.search(rf"(?<![\w$-]){re.escape(f'{ds}.{table}')}{_NAME_END}", text):
        return True  # a project before it or not
    if in_default and re.search(rf"(?<![\w$.-]){re.escape(table)}{_NAME_END}", text):
        return True
    for found in re.finditer(r"(?<![\w$.-])([\w$-]+(?:\.[\w$-]+)*)\*", text):
        segs = found.group(1).split(".")
        if len(segs) >= 2 and f"{ds}.{table}".startswith(".".join(segs[-2:])):
            return True
        if len(segs) == 1 and in_default and table.startswith(segs[0]):
            return True
    return False


def _plain(sql: str) -> str:
    """`sql` with identifiers unquoted and no space around dots, to find names in it."""
    return re.sub(r"\s*\.\s*", ".", sql.replace("`", ""))


def _covers(base: str, referenced: str) -> bool:
    """Whether a table a definition reads (`p.d.events_*` a wildcard) is BigQuery's `referenced`."""
    return referenced.startswith(base[:-1]) if base.endswith("*") else referenced == base


def _tables_of(definition: str, project: str) -> set[str]:
    """The tables a view's definition reads, as written there (unqualified projects: the view's own)."""
    verdict = check_sql(definition, dialect="bigquery", allowlist=TableAllowlist(), default_project=project)
    return set(verdict.tables) if verdict.allowed else set()


def late_tables(job, allow: TableAllowlist, accepted: Iterable[str]) -> list[str]:
    """Tables the finished job read that are neither allowed nor accepted at the dry run."""
    names = [f"{r.project}.{r.dataset_id}.{r.table_id}" for r in job.referenced_tables or []]
    return [name for name in names if not allow.allows(name) and name not in set(accepted)]
