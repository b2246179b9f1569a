"""BigQuery discovery from table metadata: describing a table costs nothing (listing them is
`core/bigquery_listing.py`).

Plain functions over a `google.cloud.bigquery.Client` (blocking: the warehouse calls them in a thread
and caches the results); `core/warehouse_bigquery.py` decides what the allowlist admits first.
"""

from __future__ import annotations

from core.bigquery_client import bounded
from core.bigquery_cost import format_bytes
from core.bigquery_errors import describe_error
from core.preview import preview_table
from core.table_notes import TableNotes, column_section, layout_lines

SAMPLE_ROWS = 3
CALL_S = 20.0  # one metadata call, retries included (google's default retries for 600 s)


def per_call(seconds: float | None = None) -> dict:
    """The retry and timeout keywords of one metadata call (`seconds`, default `CALL_S`, in all)."""
    seconds = seconds or CALL_S
    return {"retry": bounded(seconds), "timeout": seconds}


def describe(client, full: str, asked: str, notes: TableNotes, *, can_query_schema: bool = True) -> str:
    """Columns, layout, curated notes and a few free sample rows of one table, as text for the model
    (`can_query_schema`: the allowlist admits the dataset's INFORMATION_SCHEMA, so it may be offered)."""
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
    lines += column_section(t.schema, full, can_query_schema=can_query_schema)
    if t.table_type == "TABLE" and t.num_rows:
        try:  # tabledata.list: free, unlike SELECT ... LIMIT
            rows = client.list_rows(t, max_results=SAMPLE_ROWS, selected_fields=t.schema[:30], **per_call())
            sample = rows.to_arrow(create_bqstorage_client=False)
            lines += ["Sample rows:", preview_table(sample, SAMPLE_ROWS, 3000)]
        except gexc.GoogleAPICallError:
            lines.append("(No sample rows: they could not be read.)")
    return "\n".join(lines)
