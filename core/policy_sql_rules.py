"""The rule tables of the SQL policy: which statements, functions and names mean what.

Kept apart from `core/policy_sql.py` so the checking logic reads in one sitting and the lists can be
reviewed (and extended) on their own.
"""

from __future__ import annotations

import re

from sqlglot import exp

DIALECTS = ("duckdb", "bigquery")
MAX_SQL_CHARS = 100_000

_ALLOWED = {
    "duckdb": "Only one read-only query is allowed (SELECT/WITH/VALUES, DESCRIBE, SHOW TABLES, "
    "SUMMARIZE, EXPLAIN or PRAGMA table_info)",
    "bigquery": "Only one read-only SELECT query is allowed (SELECT, WITH … SELECT, UNION …)",
}
_DETAIL = {
    "dml": "{what} changes data",
    "ddl": "{what} changes the schema or defines objects",
    "io": "{what} reads or writes files, databases or extensions",
    "setting": "{what} changes session settings",
    "transaction": "transaction control ({what}) is not needed for reads",
    "script": "scripting ({what}) is not supported; write a single SELECT",
    "call": "CALL runs procedures",
    "statement": "{what} is not a read-only query",
}
_NODE_KINDS: dict[type, str] = {
    exp.Insert: "dml", exp.Update: "dml", exp.Delete: "dml", exp.Merge: "dml", exp.TruncateTable: "dml",
    exp.Into: "dml", exp.Create: "ddl", exp.Drop: "ddl", exp.Alter: "ddl", exp.Comment: "ddl",
    exp.Grant: "ddl", exp.Revoke: "ddl", exp.Copy: "io", exp.Export: "io", exp.Attach: "io",
    exp.Detach: "io", exp.Install: "io", exp.LoadData: "io", exp.Use: "setting", exp.Pragma: "setting",
    exp.Set: "setting",
    exp.Transaction: "transaction", exp.Commit: "transaction", exp.Rollback: "transaction",
    exp.Declare: "script", exp.Execute: "script", exp.Command: "statement", exp.Analyze: "statement",
    exp.Cache: "statement", exp.Uncache: "statement", exp.Refresh: "statement", exp.Kill: "statement",
}  # fmt: skip
_COMMAND_KINDS = {
    **dict.fromkeys(("LOAD", "INSTALL", "EXPORT", "IMPORT", "ATTACH", "DETACH", "COPY"), "io"),
    **dict.fromkeys(("SET", "RESET", "PRAGMA", "USE"), "setting"),
    **dict.fromkeys(("COMMIT", "ROLLBACK", "ABORT", "START"), "transaction"),
    **dict.fromkeys(("DECLARE", "IF", "LOOP", "WHILE", "REPEAT", "FOR", "EXECUTE", "END", "CASE",
                     "RAISE", "RETURN", "BREAK", "LEAVE", "CONTINUE", "ITERATE", "ASSERT"), "script"),
    "CALL": "call",
}  # fmt: skip
_NODE_NAMES = {
    "truncatetable": "TRUNCATE",
    "loaddata": "LOAD DATA",
    "into": "SELECT … INTO",
    "export": "EXPORT DATA",
    "transaction": "BEGIN TRANSACTION",
}
# Used only to explain a parse failure that starts with a statement we would refuse anyway.
_LEADING_KINDS = {
    **_COMMAND_KINDS,
    **dict.fromkeys(("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "REPLACE", "UPSERT"), "dml"),
    **dict.fromkeys(("CREATE", "DROP", "ALTER", "COMMENT", "GRANT", "REVOKE"), "ddl"),
}

# Table functions that only generate rows; anything else in FROM is refused.
_GENERATORS = frozenset({"generate_series", "range", "unnest"})
# Readers allowed in FROM with workspace_files=True, as long as every path is inside the workspace.
_WORKSPACE_READERS = frozenset({"read_parquet", "read_csv", "read_csv_auto", "read_json", "read_json_auto"})
_BLOCKED_FUNCS = frozenset({"getenv", "current_setting", "glob", "query", "query_table", "external_query",
                            "sniff_csv", "load_extension", "which_secret", "set_variable",
                            "load_aws_credentials"})  # fmt: skip
_BLOCKED_PREFIXES = ("read_", "duckdb_", "pragma_", "parquet_", "sqlite_", "postgres_", "mysql_",
                     "iceberg_", "delta_", "ducklake_", "st_read", "http_", "ml.")  # fmt: skip
# A DuckDB table name ending in one of these is a file read (replacement scan), even unquoted: x.csv.
_FILE_EXTS = frozenset({"csv", "tsv", "txt", "tbl", "dat", "parquet", "json", "jsonl", "ndjson", "gz",
                        "gzip", "zst", "zstd", "bz2", "xz", "lz4", "xlsx", "xls", "arrow", "ipc",
                        "feather", "avro", "orc", "db", "duckdb", "sqlite", "sqlite3"})  # fmt: skip
# BigQuery INFORMATION_SCHEMA views that are scoped to one dataset; all others are project/region wide.
_DATASET_VIEWS = frozenset({"tables", "columns", "column_field_paths", "table_options", "views",
                            "partitions", "routines", "routine_options", "parameters",
                            "table_constraints", "key_column_usage", "constraint_column_usage",
                            "materialized_views", "table_snapshots", "search_indexes",
                            "search_index_columns", "vector_indexes", "vector_index_columns"})  # fmt: skip
_PRAGMA_READS_WITH_TABLE = frozenset({"table_info", "show"})
_PRAGMA_READS = frozenset({"show_tables", "show_tables_expanded", "version", "platform"})
_PRAGMA_LISTINGS = frozenset({"show_tables", "show_tables_expanded"})
# Why metadata that spans every table is refused when a table allowlist is set.
_GLOBAL_METADATA = {
    "duckdb": "`{name}` lists the tables and columns of the whole database, beyond the tables allowed "
    "here; call list_tables and describe_table instead.",
    "bigquery": "`{name}` is project- or region-level metadata (other people's jobs and datasets) and is "
    "never available; use <project>.<dataset>.INFORMATION_SCHEMA.TABLES/COLUMNS of an allowed dataset.",
}
_IDENT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_GAP = r"(?:\s|/\*.*?\*/|--[^\n]*)*"  # whitespace and comments
_EXPLAIN = re.compile(rf"^{_GAP}(?:ANALY[SZ]E\b)?{_GAP}(?:\([^()']*\))?", re.IGNORECASE | re.DOTALL)
_DUCKDB_TYPES = {"select": "SELECT", "describe": "SELECT", "show": "SELECT", "summarize": "SELECT",
                 "explain": "EXPLAIN", "pragma": "PRAGMA"}  # fmt: skip


def path_problem(path: str) -> str:
    """Why a workspace file path could escape the workspace, or "" if it is a plain relative path."""
    if not path or any(ord(c) < 32 for c in path):
        return "it is empty or contains control characters"
    if _SCHEME.match(path) or "://" in path:
        return "URLs and scheme/drive prefixes (s3://, http://, file:, C:) are not allowed"
    if path.startswith(("/", "\\", "~")):
        return "absolute and home-relative paths are not allowed"
    if "\\" in path or any(c in path for c in "[]{}"):
        return "backslashes and [] / {} globs are not allowed"
    parts = path.split("/")
    if ".." in parts:
        return "'..' components are not allowed"
    if any(set(p) <= set(".?*") and p not in ("", ".", "*", "**", "?") for p in parts):
        return "globs that could match '..' are not allowed"
    return ""
