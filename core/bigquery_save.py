"""A finished BigQuery job's result in the session workspace: parquet, with a preview and the bill.

Kept apart from core/warehouse_bigquery.py, which decides whether and how a query runs.
"""

from __future__ import annotations

import asyncio
import io

from core.bigquery_cost import format_bytes, format_cost
from core.file_stems import default_stem, safe_file_stem
from core.portable_columns import portable, saved_note
from core.preview import preview_table
from core.sandbox import Sandbox, StepResult
from core.shared_names import unshared_stem
from core.warehouse import QueryContext


async def save_result(
    sandbox: Sandbox, table, job, billed: int, save_as: str | None, ctx: QueryContext, price_per_tib: float
) -> StepResult:
    """Write a finished job's rows to the session workspace as parquet; the step's result, with a preview."""
    import pyarrow.parquet as pq

    # never over a file a person shared (core/shared_names.py): no call to look, so any shared name
    name = unshared_stem(safe_file_stem(save_as, default_stem("query")), ctx.shared) + ".parquet"
    table, changed = await asyncio.to_thread(portable, table, dates=False)  # INTERVAL as text
    buffer = io.BytesIO()
    await asyncio.to_thread(pq.write_table, table, buffer, compression="zstd")
    data = buffer.getvalue()
    await sandbox.write_file(ctx.session_id, name, data)
    processed = int(job.total_bytes_processed or 0)
    cache = "yes (free)" if job.cache_hit else "no"
    return StepResult(
        ok=True,
        output=(
            f"BigQuery: processed {format_bytes(processed)}, billed "
            f"{format_cost(billed, price_per_tib)}, cache hit: {cache}. "
            + saved_note(changed, [])  # BigQuery's dates are all years 1 to 9999
        ).strip(),
        rows=table.num_rows,
        columns=[{"name": f.name, "type": str(f.type)} for f in table.schema],
        preview=preview_table(table, ctx.preview_rows, ctx.preview_bytes),
        saved_as=name,
        files=[{"path": name, "size": len(data), "kind": "parquet"}],
        bytes_scanned=processed,
        bytes_billed=billed,
    )
