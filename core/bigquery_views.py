"""Authorized views: the tables a query reaches through views it names, which the allowlist may not list.

A data team shares curated data as views in one dataset (`bill.reporting.v_sales`) over base tables in
another (`bill.raw.sales`) that people may not read — BigQuery's "authorized views". The dry run's
`referencedTables` are the tables the job accesses (the audit log's words: "the first N tables
accessed by the query job"), which for a view are its base tables — a view's underlying tables are
commonly found this way, from a `SELECT … FROM view LIMIT 0` job. So with
DATATHREAD_BIGQUERY_DATASETS=bill.reporting every question about the view was refused: "Table
bill.raw.sales is not allowed here". (Should BigQuery name the view itself too, it is allowed anyway.)

Accepting such a table is safe when it is reached through a view and only so: the SQL's own tables
were parsed and checked against the allowlist before the dry run (`check_sql`), so the query names only
allowed tables; a view's definition is fixed by whoever may write in the view's (allowed) dataset, and
BigQuery runs it as defined — the query reads the base table only through the view's columns and
filters. So a referenced table outside the allowlist is accepted only if it is one of the tables in the
definitions of the allowed views the SQL names (views of views followed a few levels), as parsed here;
anything else — a name the SQL parser missed, a definition that does not parse, a view that cannot be
read — is still refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.bigquery_client import bounded
from core.policy import TableAllowlist, check_sql

VIEW_DEPTH = 3  # views of views followed this deep
VIEW_CALL_S = 10.0  # one tables.get, retries included
MAX_VIEWS = 20  # tables.get calls one query may make here


def reached_through_views(client, named: Iterable[str], allow: TableAllowlist) -> set[str]:
    """Lower-case names of the tables the views among `named` (the allowed tables the SQL itself names)
    read, directly or through other views; blocking (tables.get, free). A view that cannot be read
    or whose definition does not parse adds nothing."""
    reached: set[str] = set()
    todo = [(name.lower(), 0) for name in named if allow.allows(name)]
    seen: set[str] = set()
    while todo and len(seen) < MAX_VIEWS:
        name, depth = todo.pop()
        if name in seen or depth > VIEW_DEPTH:
            continue
        seen.add(name)
        try:
            table = client.get_table(name, retry=bounded(VIEW_CALL_S), timeout=VIEW_CALL_S)
        except Exception:  # cannot tell: what it would have admitted stays refused
            continue
        if table.table_type != "VIEW" or not table.view_query or table.view_use_legacy_sql:
            continue
        for base in _tables_of(table.view_query, table.project):
            reached.add(base)
            todo.append((base, depth + 1))
    return reached


def _tables_of(definition: str, project: str) -> tuple[str, ...]:
    """The qualified tables a view's definition reads (unqualified projects: the view's own)."""
    verdict = check_sql(definition, dialect="bigquery", allowlist=TableAllowlist(), default_project=project)
    return tuple(t.lower() for t in verdict.tables) if verdict.allowed else ()
