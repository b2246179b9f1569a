"""Answer receipts: the fields gathered from a turn's steps, the one-line form, and a numbers check
that fails (the check itself: tests/core/test_receipt_numbers.py)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import UTC, datetime

import pytest

from core.events import StepRecord, TurnStats
from core.receipt import Receipt, build_receipt, receipt_line

PREVIEW = "rows: 3\ncarrier,n,share\nUA,58665,0.1742\nB6,54635,0.16223\nEV,54173,0.16085\n"


def test_the_receipt_gathers_tables_rows_bytes_and_calls_from_the_turn():
    steps = [
        StepRecord(  # billed, not processed: BigQuery bills 10 MB at least, and nothing from its cache
            "s1",
            "query_warehouse",
            {"sql": "…"},
            True,
            "3 rows",
            1.0,
            rows=3,
            bytes_scanned=2_000_000_000,
            bytes_billed=2_400_000_000,
        ),
        StepRecord("s2", "run_sql", {"sql": "…"}, True, "1 row", 0.2, rows=1),
        StepRecord("s3", "run_sql", {"sql": "…"}, False, "error", 0.1, rows=99),  # failed: not counted
        StepRecord("s4", "run_python", {"code": "…"}, True, "chart", 0.5),
    ]
    stats = TurnStats(steps=4, model_calls=3, duration_s=4.14)
    receipt = build_receipt(
        "UA flew 58,665 flights; that is 999 more than last year.",
        steps,
        stats,
        evidence=[PREVIEW],
        tables=["bill.shop.flights", "bill.shop.carriers", "bill.shop.flights"],
        fresh_as_of=datetime(2026, 11, 20, 9, 30, tzinfo=UTC),
        verified_by="@alice",
    )
    assert receipt == Receipt(
        tables=("bill.shop.flights", "bill.shop.carriers"),
        rows=4,
        bytes_billed=2_400_000_000,
        model_calls=3,
        wall_s=4.14,
        fresh_as_of=datetime(2026, 11, 20, 9, 30, tzinfo=UTC),
        verified_by="@alice",
        unsupported=("999",),
    )
    line = receipt_line(receipt, now=datetime(2026, 11, 23, tzinfo=UTC))
    assert line == (
        "bill.shop.flights, bill.shop.carriers · 4 rows · data as of 20 Nov 2026 · 2.4 GB billed · "
        "3 model calls · 4.1 s · based on a verified query by @alice · ⚠ not from any query in this turn: 999"
    )


def test_an_answer_without_steps_is_judged_too_and_recent_data_shows_the_time():
    stats = TurnStats(model_calls=1, duration_s=0.8)
    receipt = build_receipt("There are 1,458 airports.", [], stats, evidence=["How many airports?"])
    assert receipt.unsupported == ("1,458",)
    assert receipt_line(receipt) == "1 model call · 0.8 s · ⚠ not from any query in this turn: 1,458"
    earlier = build_receipt("There are 1,458 airports.", [], stats, evidence=["rows: 1\nn\n1458\n"])
    assert earlier.unsupported == () and receipt_line(earlier) == "1 model call · 0.8 s"
    fresh = Receipt(
        tables=("flights",), rows=1, fresh_as_of=datetime(2026, 11, 23, 8, 5, tzinfo=UTC), wall_s=1
    )
    assert receipt_line(fresh, now=datetime(2026, 11, 23, 12, tzinfo=UTC)) == (
        "flights · 1 row · data as of 23 Nov 2026 08:05 UTC · 1.0 s"
    )


async def test_the_demo_warehouse_is_as_fresh_as_its_file(tmp_path):
    from core.warehouse import DuckDBWarehouse

    path = tmp_path / "demo.duckdb"
    path.write_bytes(b"")
    os.utime(path, (1_763_632_800, 1_763_632_800))
    warehouse = DuckDBWarehouse(path, sandbox=None)  # freshness never touches the sandbox
    assert (await warehouse.freshness(["flights"])) == datetime(2025, 11, 20, 10, 0, tzinfo=UTC)
    assert await warehouse.freshness([]) is None


def test_a_numbers_check_that_fails_leaves_the_receipt_without_it(monkeypatch, caplog):
    """The check is a hint under an answer already given and saved: when it raised (a French
    "58 665,5" did), the turn ended in "Something went wrong". Now the receipt goes without it."""
    import core.receipt as receipt

    def broken(answer, evidence):
        raise ValueError("could not convert string to float: '58665,5'")

    monkeypatch.setattr(receipt, "unsupported_numbers", broken)
    stats = TurnStats(model_calls=1, duration_s=1.0)
    made = build_receipt("UA a effectué 58 665,5 km.", [], stats, evidence=[PREVIEW])
    assert made.unsupported == () and made.model_calls == 1
    assert "numbers check failed" in caplog.text


class _Warehouse:  # what `turn_receipt` asks of one
    dialect, default_dataset = "duckdb", "main"

    async def freshness(self, tables):
        return None


def _slow_check(seconds: float, *, done: threading.Event | None = None):
    def check(answer, evidence):
        list(evidence)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (done and done.is_set()):
            sum(range(10_000))  # busy, as a long check is: it never sleeps
        return ("999",)

    return check


async def test_the_event_loop_keeps_ticking_while_the_numbers_check_runs(monkeypatch):
    """Run in the event loop, the check held every turn of every thread: 20,000 digits in one step's
    output stalled the bot 11.5 s."""
    import core.receipt as receipt

    monkeypatch.setattr(receipt, "unsupported_numbers", _slow_check(0.6))
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(tick())
    await asyncio.sleep(0)
    stats = TurnStats(model_calls=1, duration_s=1.0)
    messages = [{"role": "user", "content": "How many?"}]
    made = await receipt.turn_receipt("There were 999.", [], stats, messages, _Warehouse(), None)
    ticking.cancel()
    assert made.unsupported == ("999",)
    assert ticks >= 10  # 60 on an idle host; none when the check held the loop


async def test_a_numbers_check_past_its_time_leaves_the_receipt_without_it(monkeypatch, caplog):
    import core.receipt as receipt

    done = threading.Event()
    monkeypatch.setattr(receipt, "unsupported_numbers", _slow_check(10.0, done=done))
    monkeypatch.setattr(receipt, "NUMBERS_CHECK_S", 0.3)
    stats = TurnStats(model_calls=1, duration_s=1.0)
    messages = [{"role": "user", "content": "How many?"}]
    started = time.monotonic()
    try:
        made = await receipt.turn_receipt("There were 999.", [], stats, messages, _Warehouse(), None)
    finally:
        done.set()  # the worker thread, which cannot be stopped, ends with the test
    assert time.monotonic() - started < 5.0
    assert made.unsupported == () and made.model_calls == 1
    assert "numbers check took over 0.3 s" in caplog.text


def test_evidence_read_past_the_deadline_gives_up():
    from core.receipt import _until

    texts = _until(time.monotonic() + 60, ["a", "b"])
    assert list(texts) == ["a", "b"]
    with pytest.raises(TimeoutError):
        list(_until(time.monotonic() - 1, ["a"]))
