"""SQL policy: may this model-written SQL run?

Owns ``check_sql`` (``Verdict`` and ``TableAllowlist`` are core/policy_types.py's). A query passes
only if it is exactly one read-only statement, every table it reads is allowed, and it calls no function
that reaches files, settings, the environment or other systems. Pure functions; parsing is done by sqlglot
and, for DuckDB, the statement split/type is cross-checked with DuckDB's own parser (parse only, no
database) so a tokenizer disagreement cannot smuggle a second statement past sqlglot.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from core.policy_sql_rules import (  # noqa: F401 - DIALECTS is re-exported
    _ALLOWED,
    _BLOCKED_FUNCS,
    _BLOCKED_PREFIXES,
    _COMMAND_KINDS,
    _DETAIL,
    _DUCKDB_TYPES,
    _EXPLAIN,
    _GAP,
    _GENERATORS,
    _IDENT_PATH,
    _LEADING_KINDS,
    _NODE_KINDS,
    _NODE_NAMES,
    _PRAGMA_LISTINGS,
    _PRAGMA_READS,
    _PRAGMA_READS_WITH_TABLE,
    _WORKSPACE_READERS,
    DIALECTS,
    MAX_SQL_CHARS,
)
from core.policy_sql_scope import is_cte_reference
from core.policy_sql_tables import _check_ref, _Ctx, _listing, _normalise, _Ref, _Refusal
from core.policy_types import TableAllowlist, Verdict


def check_sql(
    sql: str,
    *,
    dialect: str,
    allowlist: TableAllowlist | None = None,
    default_project: str | None = None,
    default_dataset: str | None = None,
    workspace_files: bool = False,
) -> Verdict:
    """Decide whether model-written SQL may run, before it reaches the warehouse or session database.

    ``workspace_files`` (DuckDB only) is for ``run_sql`` over a session workspace: file reads with
    relative paths are allowed there and plain identifiers are not checked against the allowlist.
    BigQuery's ``Verdict.tables`` keep their dataset and table names as written (those are
    case-sensitive there; the project id is lower-cased); DuckDB's are lower case.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported dialect {dialect!r}; expected one of {DIALECTS}")
    if workspace_files and dialect != "duckdb":
        raise ValueError("workspace_files is only meaningful for the duckdb dialect")
    allow = (allowlist or TableAllowlist()).for_dialect(dialect)  # BigQuery's names keep their case
    ctx = _Ctx(dialect, allow, default_project, default_dataset, workspace_files)
    try:
        return _check(sql, ctx)
    except _Refusal as r:
        return Verdict(False, r.reason, (), f"refused:{r.kind}")


# BigQuery's legacy SQL: a `#legacySQL` first line, or tables as `[project:dataset.table]`. Said as what it
# is, with the standard-SQL name to write: "Expected table name but got '['" sent the model guessing.
LEGACY_MARK = re.compile(r"\s*#\s*legacysql\b", re.IGNORECASE)
LEGACY_TABLE = re.compile(r"\[([A-Za-z0-9_.-]+)[:.]([A-Za-z0-9_$.-]+)\]")


def _legacy_refusal(sql: str) -> str:
    said = "Legacy SQL isn't supported: write BigQuery standard SQL"
    if found := LEGACY_TABLE.search(sql):
        project, rest = found.groups()
        return f"{said}, with tables in backticks (`{project}.{rest}` for {found.group(0)})."
    return f"{said} (drop the #legacySQL line; tables in backticks, `project.dataset.table`)."


def _check(sql: str, ctx: _Ctx) -> Verdict:
    allowed = _ALLOWED[ctx.dialect]
    if not sql or not sql.strip():
        raise _Refusal("empty", f"{allowed}; the query is empty.")
    if len(sql) > MAX_SQL_CHARS:
        raise _Refusal("parse", f"{allowed}; the query is longer than {MAX_SQL_CHARS} characters.")
    if ctx.dialect == "bigquery" and LEGACY_MARK.match(sql):
        raise _Refusal("parse", _legacy_refusal(sql))
    try:
        parsed = sqlglot.parse(sql, read=ctx.dialect)
    except (SqlglotError, RecursionError, ValueError) as e:
        word = (sql.split() or [""])[0].upper()
        if word in _LEADING_KINDS:  # e.g. EXPORT DATABASE: say why, not where the parser gave up
            raise _statement_refusal(ctx, _LEADING_KINDS[word], word) from None
        if ctx.dialect == "bigquery" and LEGACY_TABLE.search(sql):
            raise _Refusal("parse", _legacy_refusal(sql)) from None
        raise _Refusal("parse", f"Could not parse the SQL ({ctx.dialect}): {_short_error(e)}") from None
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]
    if not statements:
        raise _Refusal("empty", f"{allowed}; the query contains no statement.")
    if len(statements) > 1:
        raise _Refusal("multi", f"{allowed}; found {len(statements)} statements — send one query per call.")
    verdict = _check_statement(statements[0], sql, ctx)
    if ctx.dialect == "duckdb":
        _duckdb_cross_check(sql, verdict.kind)
    return verdict


def _check_statement(root: exp.Expression, sql: str, ctx: _Ctx) -> Verdict:
    duck = ctx.dialect == "duckdb"
    while isinstance(root, exp.Subquery):
        root = root.this
    if isinstance(root, exp.Command):
        return _check_command(root, ctx)
    extra: list[_Ref] = []
    if isinstance(root, exp.Query | exp.Values):
        kind = "select"
    elif (
        duck
        and isinstance(root, exp.Describe | exp.Summarize)
        and isinstance(root.this, exp.Table | exp.Query)
    ):
        kind = root.key
    elif duck and isinstance(root, exp.Show) and str(root.this).upper() in ("TABLES", "ALL TABLES"):
        kind, extra = "show", [_listing(f"SHOW {str(root.this).upper()}", ctx)]
    elif duck and isinstance(root, exp.Pragma):
        kind, extra = "pragma", _pragma_refs(root, ctx)
    elif duck and isinstance(root, exp.Describe | exp.Summarize | exp.Show):
        raise _Refusal(
            "statement",
            f"{_ALLOWED['duckdb']}; {root.key.upper()} takes a table name or a "
            "SELECT query (SHOW only as SHOW TABLES).",
        )
    else:
        kind = _NODE_KINDS.get(type(root), "statement")
        known = type(root) in _NODE_KINDS
        what = _NODE_NAMES.get(root.key, root.key.upper()) if known else (sql.split() or ["?"])[0].upper()
        raise _statement_refusal(ctx, kind, what)
    for node in root.walk():
        node_kind = _NODE_KINDS.get(type(node))
        if node is not root and node_kind:
            what = _NODE_NAMES.get(node.key, node.key.upper())
            raise _statement_refusal(ctx, node_kind, what)
    refs = extra + _table_refs(root, ctx)
    for ref in refs:
        _check_ref(ref, ctx)
    return Verdict(True, "", tuple(sorted({r.name for r in refs if r.scope != "listing"})), kind)


def _check_command(cmd: exp.Command, ctx: _Ctx) -> Verdict:
    word = str(cmd.this).upper()
    text = cmd.expression.name if isinstance(cmd.expression, exp.Expression) else str(cmd.expression or "")
    if word == "EXPLAIN" and ctx.dialect == "duckdb":
        inner_sql = text[_EXPLAIN.match(text).end() :]
        inner = _check(inner_sql, ctx)
        if inner.kind != "select":
            raise _Refusal("statement", f"{_ALLOWED['duckdb']}; EXPLAIN only works on a SELECT query.")
        return Verdict(True, "", inner.tables, "explain")
    raise _statement_refusal(ctx, _COMMAND_KINDS.get(word, "statement"), word)


def _statement_refusal(ctx: _Ctx, kind: str, what: str) -> _Refusal:
    if ctx.dialect == "bigquery" and what in ("SET", "BEGIN"):
        kind = "script"  # in BigQuery these start scripts, not settings/transactions
    elif what == "BEGIN":
        kind = "transaction"
    detail = _DETAIL.get(kind, _DETAIL["statement"]).format(what=what)
    return _Refusal(kind, f"{_ALLOWED[ctx.dialect]}; {detail}.")


def _pragma_refs(pragma: exp.Pragma, ctx: _Ctx) -> list[_Ref]:
    body = pragma.this
    if isinstance(body, exp.Column) and body.name.lower() in _PRAGMA_READS:
        listing = body.name.lower() in _PRAGMA_LISTINGS
        return [_listing(f"PRAGMA {body.name.lower()}", ctx)] if listing else []
    if isinstance(body, exp.Anonymous) and body.name.lower() in _PRAGMA_READS_WITH_TABLE:
        args = body.expressions
        if len(args) == 1 and isinstance(args[0], exp.Column):
            return [_normalise([p.name for p in args[0].parts], ctx)]
        if len(args) == 1 and isinstance(args[0], exp.Literal) and _IDENT_PATH.match(args[0].name):
            return [_normalise(args[0].name.split("."), ctx)]
    raise _Refusal(
        "setting", f"{_ALLOWED['duckdb']}; only PRAGMA table_info('table') and PRAGMA show_tables read."
    )


def _table_refs(root: exp.Expression, ctx: _Ctx) -> list[_Ref]:
    refs: list[_Ref] = []
    readers: set[int] = set()
    for table in root.find_all(exp.Table):
        if isinstance(table.this, exp.Func):
            ref = _table_function(table.this, ctx)
            if ref:
                readers.add(id(table.this))
                refs.extend(ref)
        elif isinstance(table.this, exp.Identifier | exp.Dot):
            if not is_cte_reference(table, case_sensitive=ctx.dialect == "bigquery"):
                refs.append(_normalise([p.name for p in table.parts], ctx))
        else:
            raise _Refusal("table", f"Unsupported table reference `{table.sql(ctx.dialect)}`; name a table.")
    for func in root.find_all(exp.Func):
        name = _func_name(func)
        if id(func) not in readers and (
            name in _BLOCKED_FUNCS or name.startswith(_BLOCKED_PREFIXES) or name.endswith("_scan")
        ):
            raise _Refusal("function", _function_msg(name, ctx))
        if ctx.dialect == "bigquery" and "." in name and name.split(".")[0] not in _BIGQUERY_NAMESPACES:
            raise _Refusal(
                "function",
                f"Function {name}() is not available: AI., ML., user and remote functions can call models "
                "or services billed apart from the query's bytes (past every cap); compute it in SQL or "
                "Python instead.",
            )
    return refs


# BigQuery's own dotted functions that only compute (SAFE. and NET. parse as functions of their own).
_BIGQUERY_NAMESPACES = frozenset({"hll_count", "keys", "aead", "deterministic_encrypt", "kll_quantiles"})


def _table_function(func: exp.Func, ctx: _Ctx) -> list[_Ref]:
    """Vet a function used as a table; returns file refs for workspace readers, [] for generators."""
    name = _func_name(func)
    if name in _GENERATORS:
        return []
    if not (ctx.workspace and name in _WORKSPACE_READERS):
        raise _Refusal("function", _function_msg(name, ctx))
    this = func.args.get("this")
    positional = ([this] if isinstance(this, exp.Expression) else []) + list(func.expressions)
    first = positional[0] if positional else None
    items = first.expressions if isinstance(first, exp.Array) else [first]
    if not items or not all(_is_string(i) for i in items):
        raise _Refusal(
            "path",
            f"{name}() needs the file path as its first argument, as a string literal "
            "(or a list of them), e.g. read_parquet('data.parquet').",
        )
    return [_normalise([i.name], ctx, force_path=True) for i in items]


def _is_string(node: exp.Expression | None) -> bool:
    return isinstance(node, exp.RawString) or (isinstance(node, exp.Literal) and node.is_string)


def _function_msg(name: str, ctx: _Ctx) -> str:
    tip = (
        "use read_parquet/read_csv/read_json with a relative workspace path, or session tables"
        if ctx.workspace
        else "query the allowed warehouse tables instead"
    )
    return f"Function {name}() is not available: it reads files, settings or external systems; {tip}."


def _func_name(func: exp.Func) -> str:
    name = func.name if isinstance(func, exp.Anonymous | exp.AnonymousAggFunc) else func.sql_name()
    if isinstance(func.parent, exp.Dot) and func.parent.expression is func:
        name = f"{func.parent.this.name}.{name}"
    return name.lower()


def _duckdb_cross_check(sql: str, kind: str) -> None:
    """Re-split with DuckDB's own parser; refuse if it sees more statements or a different type."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise _Refusal("parse", f"Could not parse the SQL (duckdb): {_short_error(e)}") from None
    if len(statements) != 1:
        raise _Refusal("multi", f"{_ALLOWED['duckdb']}; DuckDB sees {len(statements)} statements.")
    found = statements[0].type.name
    if found != _DUCKDB_TYPES.get(kind):
        raise _Refusal("statement", f"{_ALLOWED['duckdb']}; DuckDB reads this as a {found} statement.")


def _short_error(err: BaseException) -> str:
    if isinstance(err, ParseError) and err.errors:
        e = err.errors[0]
        msg = f"{e.get('description')} (line {e.get('line')}, col {e.get('col')})"
    else:
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    msg = re.sub(r"\x1b\[[0-9;]*m", "", msg)
    msg = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", r"'\1'", msg)
    return msg if len(msg) <= 200 else msg[:197] + "…"
