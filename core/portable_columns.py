"""Columns every reader of a workspace file can hold: Arrow types that parquet, DuckDB, pandas or the CSV
cannot read as written are saved as text, in the words their engine writes them.

A result file is a hand-off between engines — DuckDB in `run_sql`, pandas in `run_python`, the CSV
people get, the preview the model reads — and each reads the parquet on its own terms:

- an interval (DuckDB's `ts1 - ts2`, BigQuery's INTERVAL): parquet has no month-day-nano type, so the
  step (or the BigQuery result) failed to save at all;
- a duration (pandas' timedelta64): parquet has no such type either; Arrow keeps it in its own schema
  metadata, which DuckDB ignores, so `run_sql` and the CSV showed 93784500000 (µs) for a day and two hours;
- a pandas Period: an Arrow extension type only pandas knows; DuckDB and the CSV showed the ordinal
  (648, months since 1970, for 2024-01).

Why at the writer, not in each reader: DuckDB reads the file itself, with no hook for us between, so
only the file can make `run_sql` see `2024-01` rather than 648 — and a reader-side fix would have to be
made again in the preview, the CSV conversion and every `pd.read_parquet` the model writes. So every
file a step saves passes `portable` (a SQL or BigQuery result) or `portable_parquet` (the parquet files
model code wrote). The CSV conversion passes `portable` too, for files that came from elsewhere (S3).

The text is what DuckDB and pandas both cast back to the same value: `1 year 2 months 3 days 04:05:06`,
`1 day 02:03:04.5` (a negative duration `-26:00:00`, as pandas reads no sign after the first),
`2024-01` (`pd.Period` as written). Only such a column changes type; `portable` says which.

A date or timestamp Python cannot hold (DuckDB's `infinity`, a year past 9999) is the exception: it
stays a DATE or TIMESTAMP in the file, because DuckDB reads it back as it is and a slowly-changing
dimension's `valid_to > DATE '2022-01-01'` failed on the text ("Cannot compare VARCHAR and DATE").
Only the readers that fail on it get text: the preview and the CSV (`portable(..., dates=True)`:
`infinity`, `12000-01-01`). pandas fails on such a DATE column ("year 5881580 is out of range") and
reads a TIMESTAMP one as 294247-01-10, so `far_dates` names those columns and `saved_note` tells the
model how to cap them in SQL for pandas (`dtype_backend="pyarrow"` reads the file, but printing the
column fails the same way).
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


def portable(table, *, dates: bool = True):
    """`table` with every column `_text` finds unportable as text; and what changed, as
    `["gap (interval)", …]` (empty when nothing did). `dates=True` (the preview, the CSV) also makes a
    date or timestamp column holding a value Python cannot hold text; a saved file keeps its type
    (`dates=False`: DuckDB reads it, and a file rewritten batch by batch needs one schema for all its
    batches)."""
    changed = []
    for i, field in enumerate(table.schema):
        text = _text(field, table.column(i), dates=dates)
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
            table, changed = portable(pa.Table.from_batches([batch], schema), dates=False)
            if writer is None:
                writer = pq.ParquetWriter(
                    partial, _as_text_for_pandas(table.schema, schema), compression="zstd"
                )
            writer.write_table(table.cast(writer.schema))
        if writer is None:  # no rows: the schema alone
            table, changed = portable(schema.empty_table(), dates=False)
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


def _text(field, column, *, dates: bool):
    """`column` as a text column, or None when every reader holds it as it is."""
    import pyarrow as pa

    kind = field.type
    if pa.types.is_interval(kind):
        return pa.array([interval_text(v) for v in column.to_pylist()], pa.string())
    if pa.types.is_duration(kind):
        return _durations_text(column, _UNIT_NS[kind.unit])
    if _is_period(field):
        return _period_text(field, column)
    if dates and _is_temporal(kind):
        return temporal_text(column)
    return None


def _durations_text(column, per: int):
    """`duration_text` of every value, in Arrow's kernels: one Python call per value took 7.8 s of a
    step's time limit for 2 million rows. Python's own ints where int64 nanoseconds overflow (a
    duration in seconds past 292 years)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = pc.cast(column, pa.int64())
    try:
        nanos = pc.multiply_checked(raw, per)
        size = pc.abs_checked(nanos)
    except (pa.ArrowInvalid, OverflowError):
        return pa.array([None if v is None else duration_text(v * per) for v in raw.to_pylist()], pa.string())
    negative = pc.less(nanos, 0)  # no days then: "-26:00:00", as pandas reads no second sign
    days = pc.if_else(negative, 0, pc.divide(size, _DAY_NS))
    rest = pc.subtract(size, pc.multiply(days, _DAY_NS))
    seconds = pc.divide(rest, 10**9)
    minutes = pc.divide(seconds, 60)
    sixty = pa.array([f"{n:02d}" for n in range(60)])  # a lookup, not a cast: a third of the time
    clock = pc.binary_join_element_wise(
        pc.utf8_lpad(pc.cast(pc.divide(seconds, 3600), pa.string()), 2, "0"),
        pc.take(sixty, pc.subtract(minutes, pc.multiply(pc.divide(minutes, 60), 60))),
        pc.take(sixty, pc.subtract(seconds, pc.multiply(minutes, 60))),
        ":",
    )
    fraction = pc.subtract(rest, pc.multiply(seconds, 10**9))
    if pc.any(pc.greater(fraction, 0)).as_py():
        places = pc.utf8_rtrim(pc.utf8_lpad(pc.cast(fraction, pa.string()), 9, "0"), "0")
        clock = pc.if_else(pc.greater(fraction, 0), pc.binary_join_element_wise(clock, places, "."), clock)
    text = clock
    if pc.any(pc.greater(days, 0)).as_py():
        day_text = pc.binary_join_element_wise(
            pc.cast(days, pa.string()), pc.if_else(pc.equal(days, 1), "day", "days"), " "
        )
        whole = pc.if_else(pc.equal(rest, 0), day_text, pc.binary_join_element_wise(day_text, clock, " "))
        text = pc.if_else(pc.greater(days, 0), whole, clock)
    if pc.any(negative).as_py():
        text = pc.if_else(negative, pc.binary_join_element_wise("-", text, ""), text)
    return text


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


def _is_temporal(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_date32(kind) or pa.types.is_timestamp(kind)


def _ints(column):
    """A date or timestamp column's values as Arrow stores them (days, or units since 1970), the mask
    of DuckDB's ±infinity sentinels among them, and the (low, high) a Python `datetime` holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_date32(kind):
        bits, bounds = 32, _DATE_RANGE
    else:  # every ns timestamp but the sentinels is in range (years 1677 to 2262)
        bits, bounds = 64, tuple(b * _UNIT_NS["s"] // _UNIT_NS[kind.unit] for b in _SECONDS_RANGE)
    raw = pc.cast(column, pa.int32() if bits == 32 else pa.int64())
    infinity = _INFINITY[bits]
    return raw, pc.is_in(raw, pa.array([infinity, -infinity], raw.type)), bounds


def _far(raw, sentinel, bounds) -> tuple[bool, bool]:
    """(holds ±infinity, holds another value Python cannot hold), from what `_ints` gives."""
    import pyarrow.compute as pc

    infinite = pc.any(sentinel).as_py()
    rest = pc.min_max(pc.filter(raw, pc.invert(sentinel)) if infinite else raw)
    lo, hi = rest["min"].as_py(), rest["max"].as_py()
    return bool(infinite), lo is not None and (lo < bounds[0] or hi > bounds[1])


def temporal_text(column):
    """A date or timestamp column as text when it holds a value Python cannot (DuckDB's ±infinity,
    years past 9999): `infinity`, `-infinity`, `12000-01-01`; None when every value is one a
    `datetime` holds, or when a value has no text Arrow or numpy writes (it stays as it is)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    raw, sentinel, bounds = _ints(column)
    if not any(_far(raw, sentinel, bounds)):
        return None
    plain = pc.cast(column, pa.string())
    unwritten = pc.starts_with(plain, "<value out of range")  # Arrow's text past year ~262,000
    if pc.any(unwritten).as_py():
        plain = _numpy_text(column, raw, sentinel, plain, unwritten)
        if plain is None:
            return None
    text = pc.if_else(pc.and_(sentinel, pc.greater(raw, 0)), "infinity", plain)
    return pc.if_else(pc.and_(sentinel, pc.less(raw, 0)), "-infinity", text)


def _numpy_text(column, raw, sentinel, plain, unwritten):
    """`plain` with the values Arrow could not write written by numpy (its datetime64 reaches further);
    None when a timezone or numpy's own range stops that."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is not None:
        return None
    unit = "D" if pa.types.is_date32(kind) else kind.unit
    fix = pc.fill_null(pc.and_(unwritten, pc.invert(sentinel)), False)
    if not pc.any(fix).as_py():
        return plain
    values = pc.filter(raw, fix).to_numpy().astype(f"datetime64[{unit}]")
    texts = [t.replace("T", " ") for t in np.datetime_as_string(values)]
    if any(t.startswith(("NaT", "-")) for t in texts):
        return None
    return pc.replace_with_mask(plain.combine_chunks(), fix.combine_chunks(), pa.array(texts))


def far_dates(table) -> list[str]:
    """The date and timestamp columns of `table` holding a value pandas cannot read as it is:
    `["valid_to (date32[day]: infinity)", …]`; empty when none does."""
    found = []
    for field, column in zip(table.schema, table.columns, strict=True):
        if _is_temporal(field.type):
            infinite, beyond = _far(*_ints(column))
            if infinite or beyond:
                what = " and ".join(
                    w for w, on in (("infinity", infinite), ("a year outside 1-9999", beyond)) if on
                )
                found.append(f"{field.name} ({field.type}: {what})")
    return found


def saved_note(changed: list[str], far: list[str]) -> str:
    """What the model is told about a saved result's columns `portable` made text (`changed`) or that
    hold dates pandas cannot read (`far`); "" when neither."""
    notes = []
    if changed:
        notes.append(
            f"Saved as text, as parquet or DuckDB cannot hold them as they are: {', '.join(changed)} "
            "(::INTERVAL in SQL, pd.to_timedelta or pd.PeriodIndex in pandas read them back)."
        )
    if far:
        notes.append(
            f"Kept as dates, which DuckDB reads as they are: {', '.join(far)}. pandas cannot: "
            "pd.read_parquet fails on such a DATE and reads a TIMESTAMP's infinity as 294247-01-10. "
            "For pandas, cap them in SQL first (LEAST(col, DATE '9999-12-31'), as NULL, or ::VARCHAR)."
        )
    return " ".join(notes)


def _kind(field) -> str:
    import pyarrow as pa

    if _is_period(field):
        return f"period[{_period_freq(field)}]"
    if pa.types.is_interval(field.type):
        return "interval"
    if pa.types.is_duration(field.type):
        return "duration"
    return str(field.type)


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
