"""Columns every reader of a workspace file can hold (`core/portable_columns.py`): pandas' durations
and Periods, intervals and DuckDB's infinity as text that DuckDB, pandas and the CSV all read alike."""

from __future__ import annotations

import datetime

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.portable_columns import duration_text, far_dates, portable, portable_parquet, saved_note


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (datetime.timedelta(days=1, hours=2, minutes=3, seconds=4.5), "1 day 02:03:04.5"),
        (datetime.timedelta(days=3), "3 days"),
        (datetime.timedelta(0), "00:00:00"),
        (datetime.timedelta(microseconds=1), "00:00:00.000001"),
        (datetime.timedelta(seconds=-1), "-00:00:01"),
        (-datetime.timedelta(days=1, hours=2), "-26:00:00"),  # "-1 day -02:00:00": pandas refuses it
    ],
)
def test_a_duration_reads_back_as_itself_in_duckdb_and_in_pandas(delta, text):
    nanos = (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
    assert duration_text(nanos) == text
    assert duckdb.sql(f"SELECT '{text}'::INTERVAL").fetchall()[0][0] == delta
    assert pd.to_timedelta(text) == delta


def pandas_file(path):
    frame = pd.DataFrame(
        {
            "td": pd.to_timedelta(["1 days 02:03:04.5", None, "-1 s"]),
            "per": pd.period_range("2024-01", periods=3, freq="M"),
            "quarter": pd.period_range("2024Q4", periods=3, freq="Q"),
            "n": [1, 2, 3],
        },
        index=pd.Index(["r1", "r2", "r3"], name="key"),
    )
    frame.to_parquet(path)


def test_pandas_durations_and_periods_are_text_for_duckdb_and_pandas_alike(tmp_path):
    """`df.to_parquet` of a timedelta and a Period column: DuckDB (`run_sql`) and the CSV read the bare
    integers (93784500000 µs; 648, months since 1970, for 2024-01)."""
    path = tmp_path / "pd.parquet"
    pandas_file(path)
    assert portable_parquet(path) == ["td (duration)", "per (period[M])", "quarter (period[Q-DEC])"]
    rows = duckdb.sql(f"SELECT td, per, quarter, n, key FROM '{path}'").fetchall()
    assert rows == [
        ("1 day 02:03:04.5", "2024-01", "2024Q4", 1, "r1"),
        (None, "2024-02", "2025Q1", 2, "r2"),
        ("-00:00:01", "2024-03", "2025Q2", 3, "r3"),
    ]
    back = pd.read_parquet(path)  # pandas reads the text (its record of the old dtypes would not)
    assert back.index.tolist() == ["r1", "r2", "r3"] and back["n"].tolist() == [1, 2, 3]
    assert pd.to_timedelta(back["td"]).tolist()[0] == pd.Timedelta("1 days 02:03:04.5")
    assert pd.PeriodIndex(back["per"], freq="M").tolist()[0] == pd.Period("2024-01", freq="M")


def test_a_file_every_reader_holds_is_left_as_it_was(tmp_path):
    path = tmp_path / "plain.parquet"
    pd.DataFrame({"when": pd.to_datetime(["2024-01-01"]), "n": [1]}).to_parquet(path)
    before = path.read_bytes()
    assert portable_parquet(path) == []
    assert path.read_bytes() == before


def test_an_empty_frame_keeps_its_columns_as_text(tmp_path):
    path = tmp_path / "empty.parquet"
    pd.DataFrame({"per": pd.PeriodIndex([], freq="D"), "td": pd.to_timedelta([])}).to_parquet(path)
    assert portable_parquet(path) == ["per (period[D])", "td (duration)"]
    assert pq.read_schema(path).types == [pa.string(), pa.string()]
    assert len(pd.read_parquet(path)) == 0


def test_duckdb_infinity_is_text_for_the_preview_and_the_csv(tmp_path):
    """`DATE 'infinity'` showed as `<value out of range: 2147483647>` (a saved file keeps the DATE:
    `test_a_saved_date_keeps_its_type_and_the_model_is_told_pandas_cannot_read_it`)."""
    table = duckdb.sql(
        "SELECT * FROM (VALUES (DATE 'infinity', TIMESTAMP '-infinity', DATE '2024-01-02', "
        "DATE '12000-01-01'), (DATE '2024-05-06', NULL, NULL, NULL)) v(d, ts, plain, far)"
    ).to_arrow_table()
    table, changed = portable(table)
    assert changed == ["d (date32[day])", "ts (timestamp[us])", "far (date32[day])"]
    assert table.schema.field("plain").type == pa.date32()  # a column Python holds keeps its type
    assert table.to_pylist()[0] == {
        "d": "infinity",
        "ts": "-infinity",
        "plain": datetime.date(2024, 1, 2),
        "far": "12000-01-01",
    }
    assert table.column("d").to_pylist()[1] == "2024-05-06"
    pq.write_table(table, tmp_path / "inf.parquet")
    assert pd.read_parquet(tmp_path / "inf.parquet")["d"].tolist() == ["infinity", "2024-05-06"]
    assert (
        duckdb.sql(f"SELECT d::DATE FROM '{tmp_path / 'inf.parquet'}'").fetchall()[0][0] == datetime.date.max
    )


def test_intervals_are_text_as_duckdb_writes_them():
    table = duckdb.sql("SELECT INTERVAL '14 months 3 days 04:05:06' AS iv, 1 AS n").to_arrow_table()
    table, changed = portable(table)
    assert changed == ["iv (interval)"]
    assert table.to_pylist() == [{"iv": "1 year 2 months 3 days 04:05:06", "n": 1}]


@pytest.mark.parametrize(
    ("sql", "text"),
    [
        ("'-infinity'::TIMESTAMP_NS", "-infinity"),  # -(2**63 - 1): inside the old bounds, kept as 1677
        ("'infinity'::TIMESTAMP_NS", "infinity"),
        ("'290000-01-01'::TIMESTAMP", "290000-01-01 00:00:00"),  # Arrow writes `<value out of range: …>`
        ("'12000-01-01 01:02:03.5'::TIMESTAMP", "12000-01-01 01:02:03.500000"),
    ],
)
def test_every_sentinel_and_far_year_is_shown_as_duckdb_reads_it(sql, text):
    table, changed = portable(duckdb.sql(f"SELECT {sql} AS b").to_arrow_table())
    assert changed and table.column("b").to_pylist()[0].startswith(text)
    assert "out of range" not in table.column("b").to_pylist()[0]


def test_a_saved_date_keeps_its_type_and_the_model_is_told_pandas_cannot_read_it():
    table = duckdb.sql(
        "SELECT * FROM (VALUES (1, DATE '2020-03-05', 'infinity'::DATE, TIMESTAMP '2024-01-01'), "
        "(2, DATE '2021-07-01', DATE '2023-01-01', '12000-01-01'::TIMESTAMP)) v(id, valid_from, valid_to, ts)"
    ).to_arrow_table()
    kept, changed = portable(table, dates=False)
    assert changed == [] and kept.schema == table.schema
    far = far_dates(kept)
    assert far == ["valid_to (date32[day]: infinity)", "ts (timestamp[us]: a year outside 1-9999)"]
    assert "LEAST(col, DATE '9999-12-31')" in saved_note(changed, far)
    assert saved_note([], []) == ""


def test_durations_in_arrows_kernels_read_as_one_at_a_time():
    """2 million timedeltas, one Python call each, took 7.8 s of a step's time limit."""
    import random

    rng = random.Random(7)
    nanos = [rng.randint(-(10**15), 10**15) for _ in range(500)] + [0, 1, -1, 86_400 * 10**9, None]
    for unit, per in (("ns", 1), ("us", 1000), ("s", 10**9)):
        values = [None if n is None else n // per for n in nanos]
        table, _ = portable(pa.table({"td": pa.array(values, pa.duration(unit))}))
        expected = [None if v is None else duration_text(v * per) for v in values]
        assert table.column("td").to_pylist() == expected
    table, _ = portable(pa.table({"td": pa.array([2**62], pa.duration("s"))}))  # past int64 nanoseconds
    assert table.column("td").to_pylist() == [duration_text(2**62 * 10**9)]
