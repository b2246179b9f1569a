"""The time shared files are given, as it is spent: reading them, not writing them (a remote
sandbox's uploads), and a file read in what was left of a message's time said to be that, not slow.
The real sandbox reads every file; the scripted Messages API is the only fake."""

from __future__ import annotations

import asyncio
import io

from openpyxl import Workbook

from core.events import IncomingMessage, SharedFile
from core.file_describe import describe_file
from core.sandbox import StepRequest
from tests.fakes.anthropic_api import text

SALES_CSV = b"region,amount\nnorth,10\nsouth,5\nnorth,7\n"
COLUMNS = 10_000  # DuckDB needs seconds to sniff so wide a CSV
WIDE_CSV = (",".join(f"c{i}" for i in range(COLUMNS)) + "\n" + ",".join("1" * COLUMNS) + "\n").encode()


def ask(words: str, *files: SharedFile) -> IncomingMessage:
    return IncomingMessage(text=words, surface="slack", thread_key=("t1",), user_id="u1", files=files)


async def test_writing_the_files_takes_none_of_their_reading_time(settings, fake_model, recorder):
    """Each upload takes 2 s (as to a remote sandbox); each file has 2 s to be read and all four 6 s.
    Before, the message's 6 s started before the first upload: the third file got what was left and
    the fourth was "not read"; now every file is read."""
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"step_timeout": 2}))
    sandbox = analyst.parts.sandbox
    upload = sandbox.write_file

    async def slow_upload(session_id: str, path: str, data: bytes) -> None:
        await asyncio.sleep(2)
        await upload(session_id, path, data)

    sandbox.write_file = slow_upload
    try:
        fake_model.enqueue(text("Four files of three rows."))
        files = tuple(SharedFile(f"sales{i}.csv", SALES_CSV) for i in range(1, 5))
        outcome = await analyst.handle(ask("what is in them?", *files), recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    assert [e.text for e in recorder.of("note")] == []
    block = next(b["text"] for b in fake_model.requests[0]["messages"][0]["content"] if "sales4" in b["text"])
    assert block.count("  Rows: 3\n") == 4, block


async def test_a_file_given_what_was_left_is_not_said_to_be_slow(analyst):
    """Given 0.5 s, all that was left of its message's time, where a file has 20: it was stopped for
    that (before: "took longer than the 0.5 seconds I give a file", of a file given 20)."""
    sandbox = analyst.parts.sandbox
    await sandbox.write_file("s-left", "wide.csv", WIDE_CSV)
    step = StepRequest(kind="python", session_id="s-left", timeout_s=0.5)
    described = await describe_file(sandbox, step, "wide.csv", "csv", file_s=20)
    assert described.timed_out and not described.ok
    assert described.reason == (
        "Reading it was stopped after 0.5 s, all that was left of the time I have for reading one "
        "message's files."
    )
    assert described.unread.startswith("Reading it was stopped after 0.5 s, all that was left of the time")


def numbers_workbook(rows: int) -> bytes:
    book = Workbook(write_only=True)
    sheet = book.create_sheet("s")
    sheet.append([f"c{i}" for i in range(8)])
    for r in range(rows):
        sheet.append([r, r * 1.5, r * 2, r % 7, r + 0.25, 3.25, r * 3, r])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


async def test_a_workbook_of_more_than_its_time_reads_is_refused_at_once(analyst):
    """12 MB of XML, and 2 s to read it in: at 5 MB/s, the fastest pandas reads one here, no more
    than 10 MB fits, so it is refused with the sentence that helps (before: any workbook up to 200
    MB, which takes 40 s or more, was read until the step was stopped)."""
    sandbox = analyst.parts.sandbox
    await sandbox.write_file("s-book", "big.xlsx", numbers_workbook(40_000))
    await sandbox.write_file("s-book", "small.xlsx", numbers_workbook(1_000))
    step = StepRequest(kind="python", session_id="s-book", timeout_s=2)
    refused = await describe_file(sandbox, step, "big.xlsx", "xlsx", file_s=2)
    assert refused.reason == (
        "Its sheets unpack to 12 MB, more than the 10 MB I can read from a workbook in the 2 seconds I give "
        "a file. Saving the sheet you need as CSV and sharing that works."
    )
    read = await describe_file(sandbox, step, "small.xlsx", "xlsx", file_s=2)
    assert read.ok and "Rows: 1000" in read.text
