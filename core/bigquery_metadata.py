"""BigQuery discovery from table metadata: listing and describing tables costs nothing.

Plain functions over a `google.cloud.bigquery.Client` (blocking: the warehouse calls them in a thread
and caches the results); `core/warehouse_bigquery.py` decides what the allowlist admits first.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from core.bigquery_client import bounded, describe_error
from core.bigquery_cost import format_bytes
from core.policy import TableAllowlist
from core.preview import preview_table
from core.table_notes import TableNotes, column_lines, layout_lines

MAX_LISTED_TABLES = 200
SAMPLE_ROWS = 3
CALL_S = 20.0  # one metadata call, retries included (google's default retries for 600 s)


def per_call(seconds: float | None = None) -> dict:
    """The retry and timeout keywords of one metadata call (`seconds`, default `CALL_S`, in all)."""
    seconds = seconds or CALL_S
    return {"retry": bounded(seconds), "timeout": seconds}


def list_tables(
    client,
    allow: TableAllowlist,
    notes: TableNotes,
    default_project: str | None,
    *,
    call_s: float | None = None,
) -> list[dict]:
    """[{name, rows, description}] of the tables `allow` admits (at most MAX_LISTED_TABLES); each
    call given up after `call_s`."""
    names: list[str] = []
    for dataset in _datasets(client, allow, default_project, call_s):
        for item in client.list_tables(dataset, **per_call(call_s)):
            full = f"{item.project}.{item.dataset_id}.{item.table_id}"
            if allow.allows(full):
                names.append(full)
            if len(names) >= MAX_LISTED_TABLES:
                break
    out = []
    for full in sorted(names):
        table = client.get_table(full, **per_call(call_s))
        description = table.description or notes.headline(full)
        # A view has no row count (BigQuery gives none): None, never "0 rows" (it read as empty).
        rows = table.num_rows if table.table_type not in ("VIEW", "EXTERNAL") else None
        out.append({"name": full, "rows": rows, "description": description})
    return out


def _datasets(client, allow: TableAllowlist, default_project: str | None, call_s: float | None) -> list[str]:
    """Datasets worth listing: those an allowlist pattern names, or all of a named project."""
    out: set[str] = set()
    for pattern in allow.patterns:
        project, _, rest = pattern.partition(".")
        if not project or any(c in project for c in "*?["):
            project, rest = default_project or "", pattern
        dataset = rest.partition(".")[0]
        if dataset and not any(c in dataset for c in "*?["):
            out.add(f"{project}.{dataset}")
            continue
        for item in client.list_datasets(project, **per_call(call_s)):
            if fnmatchcase(f"{project}.{item.dataset_id}.x".lower(), pattern) or allow.allows_prefix(
                f"{project}.{item.dataset_id}."
            ):
                out.add(f"{project}.{item.dataset_id}")
    return sorted(out)


def describe(client, full: str, asked: str, notes: TableNotes) -> str:
    """Columns, layout, curated notes and a few free sample rows of one table, as text for the model."""
    from google.api_core import exceptions as gexc

    try:
        t = client.get_table(full, **per_call())
    except gexc.NotFound:
        raise LookupError(f"No table named {asked!r}. Call list_tables to see them.") from None
    except gexc.GoogleAPICallError as exc:
        raise LookupError(describe_error(exc)) from None
    size = f", {format_bytes(t.num_bytes)}" if t.num_bytes is not None else ""
    counted_rows = (
        f"{t.num_rows:,} rows" if t.num_rows is not None and t.table_type != "VIEW" else "rows not counted"
    )
    lines = [f"Table `{full}` ({(t.table_type or 'TABLE').lower()}) — {counted_rows}{size}."]
    if t.description:
        lines.append(t.description.strip())
    lines += layout_lines(t)
    lines += notes.described(full)
    lines.append("Columns:")
    lines += column_lines(t.schema)
    if t.table_type == "TABLE" and t.num_rows:
        try:  # tabledata.list: free, unlike SELECT ... LIMIT
            rows = client.list_rows(t, max_results=SAMPLE_ROWS, selected_fields=t.schema[:30], **per_call())
            sample = rows.to_arrow(create_bqstorage_client=False)
            lines += ["Sample rows:", preview_table(sample, SAMPLE_ROWS, 3000)]
        except gexc.GoogleAPICallError:
            lines.append("(No sample rows: they could not be read.)")
    return "\n".join(lines)
