"""How a table name in a query resolves: to a CTE, to the system catalog, or to a base table.

The SQL policy checks base tables against the allowlist, so treating a base table as a CTE is a bypass.
The rules here follow what DuckDB and BigQuery actually do (each pinned by a test in
tests/core/test_policy_sql.py against a real DuckDB), and where in doubt a name is a base table — a
wrongly refused query costs a retry, a wrongly allowed one leaks a table:

- a WITH's CTEs are visible in the body of the query it belongs to, including every UNION branch;
- inside CTE number i only CTEs 0..i-1 of the same WITH are visible (no forward references) — its own
  name is not, so `WITH flights AS (SELECT * FROM flights)` reads the base table;
- in a WITH RECURSIVE, CTE i also sees itself, but only from its recursive term: the last branch of a
  UNION [ALL] that is the whole CTE body. The anchor (`WITH RECURSIVE flights AS (SELECT * FROM flights
  UNION ALL …)`), a body that is not a UNION, or a UNION nested in a subquery read the base table;
- an inner WITH shadows an outer one; a table alias or a sibling derived table never names a table.

sqlglot's own scope builder (`sqlglot.optimizer.scope`) resolves the anchor of a recursive CTE to the
CTE itself, which is exactly the reported bypass, so the walk is done here on the parsed tree.
"""

from __future__ import annotations

from sqlglot import exp

# DuckDB's built-in catalog views, reachable without a schema (main and pg_catalog are on the search
# path) or through the system catalog; information_schema views only through that schema.
DUCKDB_MAIN_VIEWS = frozenset({
    "duckdb_columns", "duckdb_constraints", "duckdb_databases", "duckdb_indexes", "duckdb_logs",
    "duckdb_schemas", "duckdb_tables", "duckdb_types", "duckdb_views", "pragma_database_list",
    "sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema",
})  # fmt: skip
DUCKDB_CATALOG_SCHEMAS = frozenset({"information_schema", "pg_catalog"})
DUCKDB_CATALOGS = frozenset({"system", "temp"})


def is_cte_reference(table: exp.Table, *, case_sensitive: bool) -> bool:
    """True if this unqualified table name resolves to a CTE visible at its place in the query.

    ``case_sensitive`` for BigQuery, where a name differing in case might be another table: comparing
    exactly can only make a CTE look like a table (refused), never the reverse.
    """
    if table.args.get("db") or table.args.get("catalog") or not isinstance(table.this, exp.Identifier):
        return False
    key = table.name if case_sensitive else table.name.lower()

    def named(cte: exp.Expression) -> bool:
        alias = cte.alias_or_name
        return (alias if case_sensitive else alias.lower()) == key

    child, node = table, table.parent
    while node is not None:
        if isinstance(node, exp.CTE) and isinstance(node.parent, exp.With):
            with_ = node.parent
            index = next(i for i, c in enumerate(with_.expressions) if c is node)
            if any(named(c) for c in with_.expressions[:index]):
                return True
            if named(node) and with_.args.get("recursive") and _in_recursive_term(table, node):
                return True
            # the query owning this WITH: its CTEs were just checked, carry on above it
            child, node = with_.parent, with_.parent.parent if with_.parent is not None else None
            continue
        with_ = node.args.get("with_")
        if isinstance(with_, exp.With) and child is not with_ and any(named(c) for c in with_.expressions):
            return True
        child, node = node, node.parent
    return False


def _in_recursive_term(table: exp.Table, cte: exp.CTE) -> bool:
    """Whether ``table`` sits in the last branch of the UNION that is the whole body of ``cte``."""
    body = cte.this
    while isinstance(body, exp.Subquery) and not body.alias:
        body = body.this
    if not isinstance(body, exp.Union):  # EXCEPT / INTERSECT / a plain SELECT do not recurse
        return False
    recursive_term = body.expression
    node = table
    while node is not None and node is not body:
        if node is recursive_term:
            return True
        node = node.parent
    return False


def is_duckdb_catalog_view(parts: list[str]) -> bool:
    """True if DuckDB resolves these name parts (catalog, schema, name; lower case) to its own metadata:
    views that list every table and column of every attached database, whatever the allowlist says."""
    *qualifiers, name = parts
    if any(q in DUCKDB_CATALOG_SCHEMAS for q in qualifiers):
        return True
    if len(qualifiers) == 2 and qualifiers[0] in DUCKDB_CATALOGS:
        return True
    if len(qualifiers) == 1 and qualifiers[0] in DUCKDB_CATALOGS:
        return True  # system.x / temp.x (catalog.table in the default schema)
    return name in DUCKDB_MAIN_VIEWS or (name.startswith("pg_") and qualifiers in ([], ["main"]))
