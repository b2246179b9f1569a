"""A file a person shared is never replaced by a result the model saves under its name, end to end
through `Analyst.handle`: the scripted Messages API, the real sandbox writing the results (DuckDB's
warehouse and `run_sql` in a step), real workspace files, the real store keeping the names for later
turns. And a schedule of such an answer is refused: each run would start without the file."""

from __future__ import annotations

import io

import pandas as pd
import pyarrow.parquet as pq

from core.events import ConfirmRequest, IncomingMessage, SharedFile
from core.schedules_store import ScheduleBook
from core.schedules_tool import unschedulable
from tests.fakes.anthropic_api import text, tool

CARRIERS = "SELECT carrier, count(*) AS n FROM flights GROUP BY carrier ORDER BY n DESC LIMIT 3"


def _parquet(**columns) -> bytes:
    buffer = io.BytesIO()
    pd.DataFrame(columns).to_parquet(buffer, index=False)
    return buffer.getvalue()


MINE = _parquet(flight=["AB1", "CD2"], seats=[180, 90])  # the person's own "flights"


def ask(words: str, *files: SharedFile, key: str = "k1", surface: str = "slack") -> IncomingMessage:
    thread = ("T1", "C1", key) if surface == "slack" else (key,)
    return IncomingMessage(
        text=words, surface=surface, thread_key=thread, user_id="U1", channel_id="C1", files=files
    )


async def test_a_result_saved_under_a_shared_files_name_keeps_the_persons_file(
    analyst, fake_model, recorder, settings
):
    """Shared `flights.parquet`, then query_warehouse and run_sql with save_as="flights": both land in
    `flights-2.parquet` (the same name each time, so the model's own result is what is replaced), the
    tool says so first, and the person's bytes are untouched. A later turn still knows; a file the
    model deleted frees its name again; another name is not touched."""
    fake_model.enqueue(
        tool("query_warehouse", {"sql": CARRIERS, "save_as": "flights"}),
        tool("run_sql", {"sql": "SELECT 1 AS one", "save_as": "Flights"}),
        tool("run_sql", {"sql": "SELECT sum(seats) AS seats FROM 'flights.parquet'", "save_as": "seats"}),
        text("Your planes have 270 seats."),
    )
    outcome = await analyst.handle(ask("how many seats?", SharedFile("flights.parquet", MINE)), recorder)
    assert outcome.ok, outcome.error
    ws = settings.workspaces_dir / outcome.session_id
    warehouse, again, seats = (fake_model.last_tool_results(n)[0]["content"] for n in (1, 2, 3))
    assert warehouse.startswith(
        "Saved as 'flights-2.parquet': 'flights.parquet' is a file the person shared and stays as it "
        "is.\nSaved 3 rows to 'flights-2.parquet'."
    )
    # in any case: `Flights.parquet` is the person's file to a Mac, and to whoever downloads both
    assert again.startswith("Saved as 'Flights-2.parquet': 'flights.parquet' is a file the person shared")
    assert seats.startswith("Saved 1 row to 'seats.parquet'") and "270" in seats
    assert (ws / "flights.parquet").read_bytes() == MINE
    assert pq.read_table(ws / "Flights-2.parquet").to_pydict() == {"one": [1]}
    assert [s.files for s in outcome.steps][1] == ("flights-2.parquet",)  # the notebook's name for it

    # a later turn of the thread: the name is kept from the thread's meta; once the model itself
    # removed the file, the name is free again
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 2 AS two", "save_as": "flights"}),
        tool("run_python", {"code": "import os; os.remove('flights.parquet')"}),
        tool("run_sql", {"sql": "SELECT 3 AS three", "save_as": "flights"}),
        text("Done."),
    )
    later = await analyst.handle(ask("again"), recorder)
    assert later.ok, later.error
    assert fake_model.last_tool_results(-3)[0]["content"].startswith("Saved as 'flights-2.parquet'")
    assert fake_model.last_tool_results(-1)[0]["content"].startswith("Saved 1 row to 'flights.parquet'")
    assert pq.read_table(ws / "flights.parquet").to_pydict() == {"three": [3]}
    assert pq.read_table(ws / "flights-2.parquet").to_pydict() == {"two": [2]}


async def test_a_workbooks_parquet_name_and_a_second_share_are_kept_too(
    analyst, fake_model, recorder, settings
):
    """An Excel file is queried as the Parquet file it became: that name is the person's too. A second
    file shared as `flights.parquet` (other bytes) is `flights-2.parquet`: a result then goes to -3."""
    buffer = io.BytesIO()
    pd.DataFrame({"sku": ["a", "b"], "units": [3, 1]}).to_excel(buffer, index=False)
    fake_model.enqueue(text("Two files."))
    files = (SharedFile("stock.xlsx", buffer.getvalue()), SharedFile("flights.parquet", MINE))
    first = await analyst.handle(ask("what are these?", *files), recorder)
    assert first.ok, first.error
    other = _parquet(flight=["EF3"], seats=[50])
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 1 AS x", "save_as": "stock"}),
        tool("run_sql", {"sql": "SELECT 2 AS x", "save_as": "flights"}),
        text("Saved."),
    )
    outcome = await analyst.handle(ask("and this one", SharedFile("flights.parquet", other)), recorder)
    assert outcome.ok, outcome.error
    assert fake_model.last_tool_results(-2)[0]["content"].startswith("Saved as 'stock-2.parquet'")
    assert fake_model.last_tool_results(-1)[0]["content"].startswith(
        "Saved as 'flights-3.parquet': 'flights.parquet' is"
    )
    ws = settings.workspaces_dir / outcome.session_id
    assert pd.read_parquet(ws / "stock.parquet")["units"].tolist() == [3, 1]
    assert (ws / "flights.parquet").read_bytes() == MINE and (ws / "flights-2.parquet").read_bytes() == other


async def test_an_answer_that_read_a_shared_file_cannot_be_scheduled(analyst, fake_model, recorder):
    """The turn that took the file in, and a follow-up that only queried it, are both recorded as
    having read it: "Schedule…" refuses them in one sentence. An answer from the warehouse alone, in
    the same thread, can still be scheduled."""
    fake_model.enqueue(text("Two flights."))
    shared = await analyst.handle(ask("what's this?", SharedFile("flights.parquet", MINE)), recorder)
    fake_model.enqueue(
        tool("run_python", {"code": "import pandas as pd; print(pd.read_parquet('FLIGHTS.parquet'))"}),
        text("270 seats."),
    )
    follow_up = await analyst.handle(ask("seats?"), recorder)
    fake_model.enqueue(tool("query_warehouse", {"sql": CARRIERS, "save_as": "flights_old"}), text("UA."))
    warehouse = await analyst.handle(ask("top carriers?"), recorder)
    store = analyst.store
    records = [await store.get_turn(o.turn_id) for o in (shared, follow_up, warehouse)]
    assert [r["shared_files"] for r in records] == [["flights.parquet"], ["flights.parquet"], []]
    said = [unschedulable(r, s3=False) for r in records]
    assert (
        said[0]
        == said[1]
        == (
            "I can't schedule an answer that read a file shared in the conversation: each run starts "
            "afresh, without the file. Put the data in the warehouse and schedule a question about it there."
        )
    )
    assert said[2] == ""
    assert "or an S3 bucket I can read" in unschedulable(records[0], s3=True)


async def test_the_model_cannot_schedule_a_question_about_a_shared_file(
    analyst, fake_model, recorder, settings
):
    """create_schedule with a question naming a file shared in the thread is refused before anyone is
    asked; a question about the warehouse in the same thread is proposed as ever."""
    fake_model.enqueue(
        tool("create_schedule", {"cron": "0 9 * * mon", "question": "Total seats in flights.parquet"}),
        tool("create_schedule", {"cron": "0 9 * * mon", "question": "Top carriers by flights"}),
        text("One of them is set up."),
    )
    asked: list[ConfirmRequest] = []

    async def confirm(request: ConfirmRequest) -> bool:
        asked.append(request)
        return True

    message = ask("every monday: seats in my file, and top carriers", SharedFile("flights.parquet", MINE))
    outcome = await analyst.handle(message, recorder, confirm=confirm)
    assert outcome.ok, outcome.error
    [refused], [created] = fake_model.last_tool_results(1), fake_model.last_tool_results(2)
    assert refused["is_error"] and refused["content"].startswith(
        "'flights.parquet' is a file the person shared. I can't schedule an answer that read a file"
    )
    assert not created.get("is_error") and created["content"].startswith("Created schedule")
    assert len(asked) == 1 and "Top carriers by flights" in asked[0].prompt
    [made] = await ScheduleBook(analyst.store).list()
    assert made.question == "Top carriers by flights"
