"""Files shared with a question, end to end through `Analyst.handle`: the scripted Messages API, a
real sandbox reading the files (DuckDB, pandas/openpyxl for Excel), real workspace files. What the
model is told (the block in its first request), what the person is told (steps and notes), what is in
the workspace, and what later turns still know."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from bot.transcript import Transcript
from core.events import IncomingMessage, SharedFile
from core.file_intake import FILES_ONLY, HEADER
from tests.fakes.anthropic_api import text, tool

SALES_CSV = b"region,amount\nnorth,10\nsouth,5\nnorth,7\neast,1\n"


def _parquet() -> bytes:
    buffer = io.BytesIO()
    pd.DataFrame({"city": ["Oslo", "Lima"], "temp_c": [4.5, 19.25]}).to_parquet(buffer, index=False)
    return buffer.getvalue()


def _workbook() -> bytes:
    buffer = io.BytesIO()
    with pd.ExcelWriter(buffer) as book:
        pd.DataFrame({"sku": ["a", "b", "c"], "units": [3, 1, 2]}).to_excel(
            book, sheet_name="Stock", index=False
        )
        pd.DataFrame({"x": [1]}).to_excel(book, sheet_name="Notes", index=False)
    return buffer.getvalue()


def ask(words: str, *files: SharedFile, key: str = "f1") -> IncomingMessage:
    return IncomingMessage(text=words, surface="slack", thread_key=(key,), user_id="u1", files=files)


def block_of(body: dict, question: int = -1) -> str:
    """The shared files' block of the `question`-th question in a request's messages."""
    questions = [
        m
        for m in body["messages"]
        if m["role"] == "user" and not any(b["type"] == "tool_result" for b in m["content"])
    ]
    blocks = [b["text"] for b in questions[question]["content"] if b["type"] == "text"]
    (found,) = [t for t in blocks if t.startswith(HEADER)]
    return found


def folded(events: list) -> Transcript:
    t = Transcript()
    for event in events:
        t.apply(event)
    return t


async def test_shared_csv_parquet_and_excel_are_described_to_the_model_and_queryable_at_once(
    analyst, fake_model, recorder, settings
):
    fake_model.enqueue(
        tool(
            "run_sql",
            {
                "sql": "SELECT region, sum(amount) AS total FROM 'sales.csv' GROUP BY 1 ORDER BY 2 DESC",
                "save_as": "t",
            },
            more=[("run_sql", {"sql": "SELECT sum(units) AS u FROM 'stock.parquet'"})],
        ),
        text("North sold 17."),
    )
    files = (
        SharedFile("sales.csv", SALES_CSV),
        SharedFile("weather.parquet", _parquet()),
        SharedFile("stock.xlsx", _workbook()),
    )
    outcome = await analyst.handle(ask("what sold best?", *files), recorder)
    assert outcome.ok, outcome.error

    first = fake_model.requests[0]
    question = first["messages"][-1]["content"]
    assert question[0]["text"] == "what sold best?"  # the person's words stay the question's first block
    block = block_of(first)
    assert block.startswith(HEADER + "\n")
    assert (
        f"- \"sales.csv\" is in the workspace as 'sales.csv' ({len(SALES_CSV)} bytes): query it by that name, e.g. "
        'SELECT * FROM \'sales.csv\'.\n  Rows: 4\n  Columns: "region" VARCHAR, "amount" BIGINT\n'
    ) in block
    assert "- \"weather.parquet\" is in the workspace as 'weather.parquet'" in block
    assert '  Rows: 2\n  Columns: "city" VARCHAR, "temp_c" DOUBLE' in block and "19.25" in block
    assert "as 'stock.xlsx' (" in block and "converted to 'stock.parquet': query it by that name" in block
    assert 'first sheet, "Stock"; not the others: "Notes".' in block
    assert '  Rows: 3\n  Columns: "sku" VARCHAR, "units" BIGINT' in block
    # the system prompt says where shared files are
    assert "Files a person shares with a question" in first["system"][0]["text"]
    (run_sql,) = [t for t in first["tools"] if t["name"] == "run_sql"]
    assert "files people shared" in run_sql["description"]

    # queried in the same turn, by those names
    results = fake_model.last_tool_results(1)
    assert "Saved 3 rows to 't.parquet'" in results[0]["content"] and not results[1].get("is_error")
    assert "6" in results[1]["content"]
    ws = settings.workspaces_dir / outcome.session_id
    assert (ws / "sales.csv").read_bytes() == SALES_CSV
    assert pd.read_parquet(ws / "stock.parquet")["units"].tolist() == [3, 1, 2]
    listed = {f["path"] for f in await analyst.parts.sandbox.list_files(outcome.session_id)}
    assert {"sales.csv", "weather.parquet", "stock.xlsx", "stock.parquet"} <= listed

    # the person saw each file read, as a step of its own
    t = folded(recorder.events)
    lines = [(line.title, line.status, line.outcome.split(" · ")[0]) for line in t.steps.values()]
    assert lines[:3] == [
        ("Reading sales.csv", "done", "4 rows"),
        ("Reading weather.parquet", "done", "2 rows"),
        ("Reading stock.xlsx", "done", "3 rows"),
    ]
    assert t.notes == []  # everything came in: nothing to say about it
    assert [s.tool for s in outcome.steps] == ["shared_file"] * 3 + ["run_sql", "run_sql"]
    assert len({s.step_id for s in outcome.steps}) == 5


async def test_a_follow_up_still_knows_the_shared_file(analyst, fake_model, recorder):
    fake_model.enqueue(text("It holds sales by region."))
    await analyst.handle(ask("what is this?", SharedFile("sales.csv", SALES_CSV)), recorder)
    fake_model.enqueue(tool("run_sql", {"sql": "SELECT count(*) AS n FROM 'sales.csv'"}), text("4 rows."))
    outcome = await analyst.handle(ask("how many rows?"), recorder)
    assert outcome.ok, outcome.error
    later = fake_model.requests[1]
    assert "'sales.csv'" in block_of(later, question=0)  # the first question's block, from the history
    assert not [
        b for b in later["messages"][-1]["content"] if b["type"] == "text" and b["text"].startswith(HEADER)
    ]
    assert not fake_model.last_tool_results(2)[0].get("is_error")


async def test_refused_files_reach_the_person_as_notes_and_the_model_in_the_block(
    analyst, fake_model, recorder
):
    fake_model.enqueue(text("I read the CSV; the PDF was not taken."))
    refused = SharedFile("report.pdf", refusal="A .pdf file is not one I can read; I read csv.")
    smuggled = SharedFile("run.sh", b"rm -rf /")  # a surface that fetched what it should have refused
    outcome = await analyst.handle(
        ask("compare", SharedFile("sales.csv", SALES_CSV), refused, smuggled), recorder
    )
    assert outcome.ok, outcome.error
    block = block_of(fake_model.requests[0])
    assert '- "report.pdf" was not taken in: A .pdf file is not one I can read; I read csv.' in block
    assert '- "run.sh" was not taken in: A .sh file is not one I can read;' in block
    notes = [e.text for e in recorder.of("note")]
    assert notes == [
        "I didn't read `report.pdf`: A .pdf file is not one I can read; I read csv.",
        "I didn't read `run.sh`: A .sh file is not one I can read; I read csv, tsv, parquet, json, jsonl, ndjson, xlsx.",
    ]
    assert folded(recorder.events).notes == notes  # what Slack, Teams and the terminal draw below the answer
    listed = {f["path"] for f in await analyst.parts.sandbox.list_files(outcome.session_id)}
    assert listed == {"sales.csv"}


@pytest.mark.parametrize(
    ("shared", "stored"),
    [
        ("../../x.csv", "x.csv"),
        ("..\\..\\evil.csv", "evil.csv"),
        ("a\nb.csv", "a_b.csv"),
        ("y" * 300 + ".csv", "y" * 80 + ".csv"),
        ("東京の売上.csv", "東京の売上.csv"),
        ("📊📈.csv", "shared.csv"),
        (".csv", "shared.csv"),
        ("-rf .tsv", "-rf.tsv"),
        ("REPORT.JSON", "REPORT.json"),
    ],
)
async def test_hostile_names_become_safe_readable_workspace_names(
    shared, stored, analyst, fake_model, recorder
):
    data = (
        b'[{"a": 1}]'
        if stored.endswith(".json")
        else b"a\tb\n1\t2\n"
        if stored.endswith(".tsv")
        else SALES_CSV
    )
    fake_model.enqueue(text("ok"))
    outcome = await analyst.handle(ask("look", SharedFile(shared, data)), recorder)
    assert outcome.ok, outcome.error
    listed = [f["path"] for f in await analyst.parts.sandbox.list_files(outcome.session_id)]
    assert listed == [stored]
    assert f"as '{stored}'" in block_of(fake_model.requests[0])
    assert f"{json.dumps(shared[:120] + ('…' if len(shared) > 120 else ''), ensure_ascii=False)} is in" in (
        block_of(fake_model.requests[0])
    )


async def test_a_name_taken_by_other_bytes_is_never_overwritten_and_the_same_file_again_is_reused(
    analyst, fake_model, recorder, settings
):
    other = b"region,amount\nwest,99\n"
    fake_model.enqueue(text("two files"))
    first = await analyst.handle(
        ask("both", SharedFile("sales.csv", SALES_CSV), SharedFile("sales.csv", other)), recorder
    )
    assert first.ok, first.error
    block = block_of(fake_model.requests[0])
    assert f"as 'sales.csv' ({len(SALES_CSV)} bytes)" in block and "as 'sales-2.csv' (22 bytes)" in block
    ws = settings.workspaces_dir / first.session_id
    assert (ws / "sales.csv").read_bytes() == SALES_CSV and (ws / "sales-2.csv").read_bytes() == other

    fake_model.enqueue(text("again"))  # the first file again, then a third version
    third = b"region,amount\neast,3\n"
    shouted = SharedFile("SALES.CSV", b"x\n1\n")  # one file to a case-blind disk (a Mac's)
    await analyst.handle(
        ask("again", SharedFile("sales.csv", other), SharedFile("sales.csv", third), shouted), recorder
    )
    block = block_of(fake_model.requests[1])
    assert "as 'sales-2.csv' (22 bytes, the same file as shared before)" in block
    assert "as 'sales-3.csv' (21 bytes)" in block and "as 'SALES-4.csv' (4 bytes)" in block
    assert sorted(p.name for p in ws.glob("*.csv")) == [
        "SALES-4.csv",
        "sales-2.csv",
        "sales-3.csv",
        "sales.csv",
    ]
    assert (ws / "sales.csv").read_bytes() == SALES_CSV


async def test_a_workbook_never_takes_the_name_of_a_parquet_file_already_there(
    analyst, fake_model, recorder, settings
):
    fake_model.enqueue(text("ok"))
    shared = (SharedFile("stock.parquet", _parquet()), SharedFile("stock.xlsx", _workbook()))
    outcome = await analyst.handle(ask("both", *shared), recorder)
    block = block_of(fake_model.requests[0])
    assert "as 'stock-2.xlsx'" in block and "converted to 'stock-2.parquet'" in block
    ws = settings.workspaces_dir / outcome.session_id
    assert pd.read_parquet(ws / "stock.parquet").columns.tolist() == ["city", "temp_c"]


async def test_an_unparseable_file_is_a_sentence_and_the_turn_goes_on(analyst, fake_model, recorder):
    fake_model.enqueue(text("The CSV could not be read."))
    broken = b"a,b\n1,2\n\xff\xfe\x00\x81,\x00\n"  # not UTF-8: DuckDB's reader refuses it
    fake = b"not parquet at all"
    outcome = await analyst.handle(
        ask("sum it", SharedFile("broken.csv", broken), SharedFile("fake.parquet", fake)), recorder
    )
    assert outcome.ok, outcome.error
    block = block_of(fake_model.requests[0])
    assert (
        f"- \"broken.csv\" is in the workspace as 'broken.csv' ({len(broken)} bytes), but it could not be "
        "read as CSV:\n  _duckdb.InvalidInputException: Invalid Input Error: CSV Error on Line: 3\n"
    ) in block
    assert "  Invalid unicode (byte sequence mismatch) detected. This file is not utf-8 encoded." in block
    assert (
        f"- \"fake.parquet\" is in the workspace as 'fake.parquet' ({len(fake)} bytes), but it could not be "
        "read as PARQUET:\n  _duckdb.InvalidInputException: Invalid Input Error: No magic bytes found"
    ) in block
    assert "Traceback" not in block
    assert [e.text for e in recorder.of("note")] == [
        "I couldn't read `broken.csv` as CSV: `_duckdb.InvalidInputException: Invalid Input Error: CSV Error "
        "on Line: 3`",
        "I couldn't read `fake.parquet` as PARQUET: `_duckdb.InvalidInputException: Invalid Input Error: No "
        "magic bytes found at end of file 'fake.parquet'`",
    ]
    lines = list(folded(recorder.events).steps.values())
    assert [(line.title, line.status) for line in lines] == [
        ("Reading broken.csv", "failed"),
        ("Reading fake.parquet", "failed"),
    ]


async def test_files_without_words_are_still_a_question(analyst, fake_model, recorder):
    fake_model.enqueue(text("Sales by region."))
    outcome = await analyst.handle(ask("", SharedFile("sales.csv", SALES_CSV)), recorder)
    assert outcome.ok and outcome.answer == "Sales by region."
    sent = fake_model.requests[0]["messages"][-1]["content"]
    assert sent[0]["text"] == FILES_ONLY and "'sales.csv'" in block_of(fake_model.requests[0])
    fake_model.enqueue(text("Same with help."))  # `help` with a file is a question about the file
    again = await analyst.handle(ask("help", SharedFile("sales.csv", SALES_CSV)), recorder)
    assert again.answer == "Same with help." and len(fake_model.requests) == 2


async def test_the_block_is_not_evidence_for_the_receipt(analyst, fake_model, recorder):
    """A figure read off the preview rows is not one a query produced: the receipt marks it, as it
    marks any number no step of the thread returned."""
    fake_model.enqueue(text("North's best sale was 4242."))
    data = b"region,amount\nnorth,4242\nsouth,5\n"
    await analyst.handle(ask("best sale?", SharedFile("sales.csv", data)), recorder)
    assert "4242" in block_of(fake_model.requests[0])
    (done,) = recorder.of("turn_finished")
    assert done.receipt is not None and done.receipt.unsupported == ("4242",)


@pytest.mark.own_sandbox
async def test_a_full_workspace_is_a_sentence_and_the_rest_still_comes_in(settings, fake_model, recorder):
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"workspace_mb": 1}))
    try:
        fake_model.enqueue(text("Only the small one fitted."))
        big = b"a\n" + b"1\n" * 600_000  # 1.2 MB, over a 1 MB workspace
        outcome = await analyst.handle(
            ask("both", SharedFile("big.csv", big), SharedFile("sales.csv", SALES_CSV)), recorder
        )
        listed = {f["path"] for f in await analyst.parts.sandbox.list_files(outcome.session_id)}
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    block = block_of(fake_model.requests[0])
    assert '- "big.csv" could not be put in the workspace: The result (1.1 MB) would take the thread' in block
    assert f"as 'sales.csv' ({len(SALES_CSV)} bytes): query it" in block
    assert [e.text for e in recorder.of("note")] == [
        "I couldn't keep `big.csv`: this thread's workspace has no room left for it."
    ]
    assert listed == {"sales.csv"}


async def test_a_file_that_takes_longer_than_a_step_may_is_a_sentence(settings, fake_model, recorder):
    """10,000 columns: DuckDB takes seconds to sniff and describe it (1.7 s for 5,000 here), well past
    the half second a step may run in this test."""
    from core.analyst import Analyst

    columns = 10_000
    wide = (",".join(f"c{i}" for i in range(columns)) + "\n" + ",".join("1" * columns) + "\n").encode()
    analyst = await Analyst.create(settings.model_copy(update={"step_timeout": 0.5}))
    try:
        fake_model.enqueue(text("It was too wide to read in time."))
        outcome = await analyst.handle(ask("what is in it?", SharedFile("wide.csv", wide)), recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    said = "Reading it was stopped after 0.5 s, the time a file is given to be read."
    assert f"but it was not read:\n  {said}" in block_of(fake_model.requests[0])
    (note,) = [e.text for e in recorder.of("note")]
    told = "Reading it took longer than the 0.5 seconds I give a file."
    assert note == f"I couldn't read `wide.csv`. {told}"  # for the person: no "try a smaller query"
    (step,) = [line for line in folded(recorder.events).steps.values()]
    assert (step.title, step.status) == ("Reading wide.csv", "failed") and told in step.outcome


async def test_an_export_phrase_with_a_file_is_a_question_about_the_file(analyst, fake_model, recorder):
    fake_model.enqueue(text("It holds sales."))
    outcome = await analyst.handle(ask("export notebook", SharedFile("sales.csv", SALES_CSV)), recorder)
    assert outcome.answer == "It holds sales." and "'sales.csv'" in block_of(fake_model.requests[0])


async def test_files_past_the_messages_total_are_refused_here_whatever_a_surface_fetched(
    settings, fake_model, recorder
):
    """The core holds any surface's bytes to DATATHREAD_SHARED_FILES_MB again, in order: of two 600 KB
    files under a 1 MB total the second is not written (a smaller one after it still is), and the
    person is told why in the total's one sentence."""
    from core.analyst import Analyst
    from core.shared_files import over_total

    column = b"n\n" + b"1\n" * 300_000
    analyst = await Analyst.create(settings.model_copy(update={"shared_file_mb": 1, "shared_files_mb": 1}))
    try:
        fake_model.enqueue(text("The first has 300,000 rows."))
        shared = [SharedFile(n, column) for n in ("first.csv", "second.csv")]
        outcome = await analyst.handle(ask("rows?", *shared, SharedFile("sales.csv", SALES_CSV)), recorder)
        listed = {f["path"] for f in await analyst.parts.sandbox.list_files(outcome.session_id)}
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    said = over_total("second.csv", 1).refusal
    assert [e.text for e in recorder.of("note")] == [f"I didn't read `second.csv`: {said}"]
    assert f'- "second.csv" was not taken in: {said}' in block_of(fake_model.requests[0])
    assert listed == {"first.csv", "sales.csv"}


async def test_a_sandbox_that_fails_to_read_a_file_back_never_fails_the_turn(
    analyst, fake_model, recorder, monkeypatch
):
    """Sharing a file again compares it with the one of its name in the workspace: on Modal that read
    is a remote call, and its error (anything but OSError) escaped and failed the whole turn with
    "Something went wrong". Now the file is kept under a name of its own."""
    fake_model.enqueue(text("first"))
    first = await analyst.handle(ask("sales?", SharedFile("sales.csv", SALES_CSV), key="fb"), recorder)
    assert first.ok, first.error

    async def remote_error(session_id: str, path: str) -> bytes:
        raise RuntimeError("the remote function call failed")

    monkeypatch.setattr(analyst.parts.sandbox, "read_file", remote_error)
    fake_model.enqueue(text("again"))
    again = await analyst.handle(ask("again", SharedFile("sales.csv", SALES_CSV), key="fb"), recorder)
    assert again.ok and again.answer == "again", again.error
    assert "as 'sales-2.csv'" in block_of(fake_model.requests[1])
