"""Columns every reader of a workspace file can hold: Arrow types that parquet, DuckDB, pandas or the CSV
cannot read as written are saved as text, in the words their engine writes them.

A result file is a hand-off between engines — DuckDB in `run_sql`, pandas in `run_python`, the CSV
people get, the preview the model reads — and each reads the parquet on its own terms:

- an interval (DuckDB's `ts1 - ts2`, BigQuery's INTERVAL): parquet has no month-day-nano type, so the
  step (or the BigQuery result) failed to save at all;
- a duration (pandas' timedelta64): parquet has no such type either; Arrow keeps it in its own schema
  metadata, which DuckDB ignores, so `run_sql` and the CSV showed 93784500000 (µs) for a day and two hours;
- a pandas Period: an Arrow extension type only pandas knows; DuckDB and the CSV showed the ordinal
  (648, months since 1970, for 2024-01);
- a date or timestamp Python cannot hold (DuckDB's `infinity`, a year past 9999): `pd.read_parquet`
  failed for the whole file ("year 5881580 is out of range"), and the preview and the CSV said
  `<value out of range: 2147483647>`.

Why at the writer, not in each reader: DuckDB reads the file itself, with no hook for us between, so
only the file can make `run_sql` see `2024-01` rather than 648 — and a reader-side fix would have to be
made again in the preview, the CSV conversion and every `pd.read_parquet` the model writes. So every
file a step saves passes `portable` (a SQL or BigQuery result) or `portable_parquet` (the parquet files
model code wrote). The CSV conversion passes `portable` too, for files that came from elsewhere (S3).

The text is what DuckDB and pandas both cast back to the same value: `1 year 2 months 3 days 04:05:06`,
`1 day 02:03:04.5` (a negative duration `-26:00:00`, as pandas reads no sign after the first),
`2024-01` (`pd.Period` as written), `infinity`/`-infinity` (`'infinity'::DATE`). Only such a column
changes type, and only a date or timestamp column that holds such a value; `portable` says which.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

_DAY_NS = 86_400 * 10**9
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
# Python's datetime range (years 1 to 9999) as days or units since 1970; DuckDB's ±infinity sentinels.
_DATE_RANGE = (-719_162, 2_932_896)
_SECONDS_RANGE = (-62_135_596_800, 253_402_300_799)
_INFINITY = {32: 2**31 - 1, 64: 2**63 - 1}
PERIOD = "pandas.period"


def interval_text(value) -> str | None:
    """An interval as DuckDB writes one (`1 year 2 months 3 days 04:05:06`)."""
    if value is None:
        return None
    months, days, nanos = value.months, value.days, value.nanoseconds
    years, months = divmod(months, 12) if months >= 0 else (-((-months) // 12), -((-months) % 12))
    parts = [
        f"{n} {unit}{'s' if abs(n) != 1 else ''}"
        for n, unit in ((years, "year"), (months, "month"), (days, "day"))
        if n
    ]
    if nanos or not parts:
        sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
        seconds, fraction = divmod(nanos, 10**9)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        parts.append(sign + clock + (f".{fraction:09d}".rstrip("0") if fraction else ""))
    return " ".join(parts)


def duration_text(nanos: int | None) -> str | None:
    """A duration of `nanos` as both DuckDB (`::INTERVAL`) and `pd.to_timedelta` read it back."""
    if nanos is None:
        return None
    import pyarrow as pa

    if nanos < 0:  # "-1 day -02:00:00" is DuckDB's; pandas refuses a second sign, so no days
        return "-" + interval_text(pa.MonthDayNano([0, 0, -nanos]))
    days, rest = divmod(nanos, _DAY_NS)
    return interval_text(pa.MonthDayNano([0, days, rest]))


def portable(table, *, values: bool = True):
    """`table` with every column `_text` finds unportable as text; and what changed, as
    `["gap (interval)", …]` (empty when nothing did). `values=False` looks at types only (a file
    rewritten batch by batch needs one schema for all its batches)."""
    changed = []
    for i, field in enumerate(table.schema):
        text = _text(field, table.column(i), values=values)
        if text is not None:
            table = table.set_column(i, _plain_field(field), text)
            changed.append(f"{field.name} ({_kind(field)})")
    return table, changed


def portable_parquet(path: Path) -> list[str]:
    """Rewrite the parquet file at `path` with its unportable columns as text (what `portable` says);
    unchanged (and not read past its footer) when it has none. Batch by batch, so a large file costs
    a step no more memory than one row group; replaced whole, never left half-written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = pq.ParquetFile(path)
    schema = source.schema_arrow
    if not any(_by_schema(field) for field in schema):
        return []
    partial = path.with_name(f".{path.name}.partial")
    try:
        writer = None
        changed: list[str] = []
        for batch in source.iter_batches():
            table, changed = portable(pa.Table.from_batches([batch], schema), values=False)
            if writer is None:
                writer = pq.ParquetWriter(
                    partial, _as_text_for_pandas(table.schema, schema), compression="zstd"
                )
            writer.write_table(table.cast(writer.schema))
        if writer is None:  # no rows: the schema alone
            table, changed = portable(schema.empty_table(), values=False)
            writer = pq.ParquetWriter(partial, _as_text_for_pandas(table.schema, schema), compression="zstd")
        writer.close()
        os.replace(partial, path)
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    return changed


def _by_schema(field) -> bool:
    """A type no reader but Arrow (or pandas) holds, whatever the values."""
    import pyarrow as pa

    return pa.types.is_interval(field.type) or pa.types.is_duration(field.type) or _is_period(field)


def _text(field, column, *, values: bool):
    """`column` as a text column, or None when every reader holds it as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = field.type
    if pa.types.is_interval(kind):
        return pa.array([interval_text(v) for v in column.to_pylist()], pa.string())
    if pa.types.is_duration(kind):
        per = _UNIT_NS[kind.unit]
        values = pc.cast(column, pa.int64()).to_pylist()
        return pa.array([None if v is None else duration_text(v * per) for v in values], pa.string())
    if _is_period(field):
        return _period_text(field, column)
    if values and (pa.types.is_date32(kind) or pa.types.is_timestamp(kind)):
        return _temporal_text(kind, column)
    return None


def _is_period(field) -> bool:
    """A pandas Period column: the extension type when pandas is loaded, its int64 storage with the
    extension's name in the field's metadata when not (the CSV conversion, DuckDB's reads)."""
    name = getattr(field.type, "extension_name", None)
    if name is None:
        name = (field.metadata or {}).get(b"ARROW:extension:name", b"").decode()
    return name == PERIOD


def _period_freq(field) -> str:
    freq = getattr(field.type, "freq", None)
    if freq is None:
        freq = json.loads((field.metadata or {}).get(b"ARROW:extension:metadata", b"{}")).get("freq")
    return str(freq)


def _period_text(field, column):
    import pandas as pd
    import pyarrow as pa

    freq = _period_freq(field)
    chunks = [getattr(chunk, "storage", chunk) for chunk in column.chunks]
    ordinals = pa.chunked_array(chunks, pa.int64()).to_pylist()
    texts = [None if o is None else str(pd.Period(ordinal=o, freq=freq)) for o in ordinals]
    return pa.array(texts, pa.string())


def _temporal_text(kind, column):
    """A date or timestamp column as text when it holds a value Python cannot (DuckDB's ±infinity,
    years past 9999); None when every value is one a `datetime` holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_date32(kind):
        bits, low, high = 32, *_DATE_RANGE
    else:
        bits, (low, high) = 64, (b * _UNIT_NS["s"] // _UNIT_NS[kind.unit] for b in _SECONDS_RANGE)
        if kind.unit == "ns":
            low, high = -(2**63), 2**63 - 2  # every ns timestamp is in range; only infinity is not
    raw = pc.cast(column, pa.int32() if bits == 32 else pa.int64())
    bounds = pc.min_max(raw)
    lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
    if lo is None or (lo >= low and hi <= high):
        return None
    infinity = _INFINITY[bits]
    plain = pc.cast(column, pa.string())
    text = pc.if_else(pc.equal(raw, infinity), "infinity", plain)
    return pc.if_else(pc.equal(raw, -infinity), "-infinity", text)


def _kind(field) -> str:
    import pyarrow as pa

    if _is_period(field):
        return f"period[{_period_freq(field)}]"
    if pa.types.is_interval(field.type):
        return "interval"
    if pa.types.is_duration(field.type):
        return "duration"
    return f"{field.type} holding infinity or a year past 9999"


def _plain_field(field):
    """The field as a text column: the extension's name and freq go, or readers would still take the
    text for a Period."""
    import pyarrow as pa

    metadata = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(b"ARROW:extension")}
    return pa.field(field.name, pa.string(), nullable=field.nullable, metadata=metadata or None)


def _as_text_for_pandas(schema, was):
    """`schema` with pandas' record of each converted column's dtype made plain text: pandas rebuilt a
    `period[M]` column from the text and failed ("Boolean index has wrong length"). The index and
    every other column stay as pandas wrote them."""
    raw = (schema.metadata or {}).get(b"pandas")
    if raw is None:
        return schema
    converted = {f.name for f in was if _by_schema(f)}
    pandas_meta = json.loads(raw)
    for column in pandas_meta.get("columns", []):
        if column.get("field_name") in converted:
            column.update(pandas_type="unicode", numpy_type="object", metadata=None)
    return schema.with_metadata({**schema.metadata, b"pandas": json.dumps(pandas_meta).encode()})
