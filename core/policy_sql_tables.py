"""Which table a name in model-written SQL means, and whether the allowlist lets it be read.

The one place a reference is qualified (DuckDB's `schema.table` and workspace files, BigQuery's
`project.dataset.table`, wildcard tables, INFORMATION_SCHEMA views, catalog listings) and then checked
against the allowlist. Kept apart from core/policy_sql.py, which decides which statements and
functions may run and finds the references in them: a change to naming or to what the allowlist
covers happens here alone. Also holds the refusal both raise and the context of one check.
"""

from __future__ import annotations

from typing import NamedTuple

from core.policy_sql_rules import _DATASET_VIEWS, _FILE_EXTS, _GLOBAL_METADATA, path_problem
from core.policy_sql_scope import is_duckdb_catalog_view
from core.policy_types import TableAllowlist


class _Refusal(Exception):
    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind, self.reason = kind, reason


class _Ctx(NamedTuple):
    dialect: str
    allowlist: TableAllowlist
    project: str | None
    dataset: str | None
    workspace: bool


class _Ref(NamedTuple):
    name: str  # normalised reference reported in Verdict.tables
    scope: str  # "table": allows(name); "prefix"/"listing": allows_prefix(prefix); "global": allow-all
    # only; "forbidden": never (BigQuery project/region metadata); "path": workspace files only
    prefix: str = ""


def _listing(what: str, ctx: _Ctx) -> _Ref:
    """SHOW TABLES / PRAGMA show_tables list the default schema; their ALL / _expanded forms list every
    schema of every database, with columns: allowed only as far as the allowlist covers them."""
    if what.endswith(("ALL TABLES", "_expanded")):
        return _Ref(what, "global")
    schema = (ctx.dataset or "main").lower()
    return _Ref(what, "listing", f"{schema}.")


def _normalise(names: list[str], ctx: _Ctx, force_path: bool = False) -> _Ref:
    """Turn identifier parts into a normalised reference; the one place names are qualified."""
    if ctx.dialect == "bigquery":
        return _normalise_bigquery(names, ctx)
    lowered, joined = [n.lower() for n in names], ".".join(names)
    # DuckDB reads a file for a quoted name with a dot, and for `x.csv` / `a.b.parquet` unquoted.
    if (
        force_path
        or any(c in n for n in names for c in "/\\:~")
        or (len(names) == 1 and "." in joined)
        or ("." in joined and joined.rsplit(".", 1)[-1].lower() in _FILE_EXTS)
    ):
        return _Ref(joined, "path")
    if len(names) > 3 or not all(names):
        raise _Refusal("table", f"Unrecognised table name `{'.'.join(names)}`; use schema.table.")
    if not ctx.workspace and is_duckdb_catalog_view(lowered):
        return _Ref(".".join(lowered), "global")
    if len(lowered) == 1:
        lowered = [(ctx.dataset or "main").lower(), *lowered]
    return _Ref(".".join(lowered), "table")


def _normalise_bigquery(names: list[str], ctx: _Ctx) -> _Ref:
    """BigQuery's `project.dataset.table`, its dataset and table names as written: they are
    case-sensitive there (`Analytics` and `analytics` are two datasets), while project ids are lower
    case and INFORMATION_SCHEMA and its views are read in any case. Lower-cased whole, a CamelCase
    dataset was reported (and looked up) as a name BigQuery does not have."""
    segs = [s for n in names for s in n.split(".")]
    shown = ".".join(segs)
    if not all(segs) or any(c in s for s in segs[:-1] for c in "*?[]") or any(c in segs[-1] for c in "?[]"):
        raise _Refusal("table", f"Unrecognised table name `{shown}`; use project.dataset.table.")
    project = [ctx.project.lower()] if ctx.project else []
    default = _default_dataset(ctx)
    low = [s.lower() for s in segs]
    if "information_schema" in low:
        i = low.index("information_schema")
        prefix, view = segs[:i], low[i + 1 :]
        if len(view) != 1 or view[0] not in _DATASET_VIEWS or any(s.startswith("region-") for s in low[:i]):
            return _Ref(shown, "forbidden")
        if not prefix and default:
            prefix = default
        # `ds.INFORMATION_SCHEMA.X` is the dataset's; `proj.INFORMATION_SCHEMA.X` project-level
        if len(prefix) == 1 and [prefix[0].lower()] != project:
            prefix = project + prefix
        if len(prefix) != 2:
            return _Ref(shown, "forbidden")
        prefix = [prefix[0].lower(), prefix[1]]
        return _Ref(".".join([*prefix, "information_schema", view[0]]), "prefix", ".".join(prefix) + ".")
    if len(segs) == 1 and default:
        segs = default + segs
    if len(segs) == 2:
        segs = project + segs
    if len(segs) > 3:
        raise _Refusal("table", f"Unrecognised table name `{shown}`; use project.dataset.table.")
    if len(segs) == 3:
        segs = [segs[0].lower(), *segs[1:]]
    name = ".".join(segs)
    if "*" in segs[-1]:
        if segs[-1].count("*") != 1 or not name.endswith("*"):
            raise _Refusal(
                "table", f"Wildcard tables need a single trailing *, e.g. `proj.ds.events_*`: `{name}`."
            )
        return _Ref(name, "prefix", name[:-1])
    return _Ref(name, "table")


def _default_dataset(ctx: _Ctx) -> list[str]:
    """The default dataset's parts as configured (`proj.ds` or `ds`), its project lower case."""
    parts = ctx.dataset.split(".") if ctx.dataset else []
    return [parts[0].lower(), *parts[1:]] if len(parts) > 1 else parts


def _check_ref(ref: _Ref, ctx: _Ctx) -> None:
    al = ctx.allowlist
    if ref.scope == "path":
        if not ctx.workspace:
            raise _Refusal(
                "path",
                f"Reading files (`{ref.name}`) is not available here: this query runs on the "
                "warehouse's tables only. To combine a file with them, save the rows you need "
                "with save_as, then join that Parquet file with the file in run_sql.",
            )
        problem = path_problem(ref.name)
        if problem:
            raise _Refusal(
                "path",
                f"File path '{ref.name}' is not allowed: {problem}. Use a relative path "
                "inside the workspace, e.g. 'data.parquet' or 'exports/*.csv'.",
            )
        return
    if ctx.workspace and ref.scope == "table":
        return
    if ref.scope == "forbidden":  # e.g. region-us.INFORMATION_SCHEMA.JOBS: every job's SQL, any channel
        raise _Refusal("table", _GLOBAL_METADATA[ctx.dialect].format(name=ref.name))
    if ref.scope in ("global", "listing"):
        covered = al.allow_all if ref.scope == "global" else al.allows_prefix(ref.prefix)
        if not covered:
            raise _Refusal("table", _GLOBAL_METADATA[ctx.dialect].format(name=ref.name))
        return
    ok = al.allows_prefix(ref.prefix) if ref.scope == "prefix" else al.allows(ref.name)
    if not ok:
        shown = ", ".join(al.patterns[:6]) + (", …" if len(al.patterns) > 6 else "")
        what = (
            "covers several tables; it needs a whole allowed dataset"
            if ref.scope == "prefix"
            else "is not allowed"
        )
        raise _Refusal(
            "table",
            f"Table `{ref.name}` {what}. Allowed tables: {shown}. Query only those (fully qualified).",
        )
