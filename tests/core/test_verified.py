"""Verified queries and corrections over both stores, the curated file, and the model's first request."""

from __future__ import annotations

import pytest

from core.config import ConfigError
from core.events import IncomingMessage
from core.store_redis import RedisStore
from core.store_sqlite import SqliteStore
from core.verified import (
    ADMINS_ONLY,
    ASK_WHAT_WAS_WRONG,
    SAVED,
    THANKS,
    VerifiedLibrary,
    curated_path,
    load_curated,
    tables_in_sql,
)
from tests.fakes.anthropic_api import text, tool

JFK_SQL = "SELECT count(*) AS n FROM flights WHERE origin = 'JFK'"


@pytest.fixture(params=["sqlite", "redis"])
async def store(request, tmp_path):
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()
        made = RedisStore(server.url)
    else:
        made = SqliteStore(tmp_path / "state.sqlite3")
    yield made
    await made.close()


def turn(turn_id: str = "t1", *, question: str = "How many flights left JFK?", steps=None) -> dict:
    steps = (
        steps
        if steps is not None
        else [
            {"tool": "describe_table", "ok": True, "input": {"table": "flights"}, "files": []},
            {"tool": "query_warehouse", "ok": True, "input": {"sql": JFK_SQL}, "files": ["jfk.parquet"]},
            {"tool": "run_python", "ok": True, "input": {"code": "print(1)"}, "files": []},
        ]
    )
    return {
        "turn_id": turn_id,
        "session_id": "sl-abc",
        "channel_id": "C1",
        "question": question,
        "steps": steps,
        "feedback": {},
    }


def anywhere(sql: str) -> bool:  # a conversation whose allowlist lets every query run
    return True


async def test_a_thumbs_up_saves_the_final_warehouse_query(store):
    library = VerifiedLibrary(store, dialect="duckdb")
    assert await library.vote(turn(), user_id="U1", value="up", is_admin=False) == SAVED
    (saved,) = await library.queries()
    assert (saved.question, saved.sql, saved.tables, saved.verified_by, saved.source) == (
        "How many flights left JFK?",
        JFK_SQL,
        ("flights",),
        "U1",
        "vote",
    )
    await library.vote(turn(), user_id="U2", value="up", is_admin=False)  # the same answer twice: one entry
    assert len(await library.queries()) == 1
    assert (await library.get(saved.id)).sql == JFK_SQL


async def test_a_vote_on_an_answer_without_a_query_saves_nothing(store):
    library = VerifiedLibrary(store, dialect="duckdb")
    assert await library.vote(turn(steps=[]), user_id="U1", value="up", is_admin=False) == THANKS
    assert await library.queries() == []


async def test_only_admins_verify(store):
    library = VerifiedLibrary(store, dialect="duckdb")
    assert await library.vote(turn(), user_id="U1", value="verify", is_admin=False) == ADMINS_ONLY
    await library.vote(turn(), user_id="A1", value="verify", is_admin=True)
    assert [q.source for q in await library.queries()] == ["admin"]


async def test_a_thumbs_down_asks_and_the_next_message_is_the_correction(store):
    library = VerifiedLibrary(store, dialect="duckdb")
    await store.record_turn(turn())
    await library.vote(turn(), user_id="U1", value="up", is_admin=False)
    assert await library.example_for("How many flights left JFK?", channel_id="C1", permitted=anywhere)
    assert await library.vote(turn(), user_id="U2", value="down", is_admin=False) == ASK_WHAT_WAS_WRONG
    assert await library.take_correction("sl-abc", "U1", "not me") is None  # someone else was not asked
    correction = await library.take_correction("sl-abc", "U2", "It should count only departed flights.")
    assert (correction.text, correction.sql, correction.by) == (
        "It should count only departed flights.",
        JFK_SQL,
        "U2",
    )
    assert await library.take_correction("sl-abc", "U2", "again") is None  # asked once, recorded once
    assert [c.text for c in await library.corrections()] == ["It should count only departed flights."]
    assert (await store.get_turn("t1"))["corrections"][0]["text"] == "It should count only departed flights."
    assert (
        await library.example_for("How many flights left JFK?", channel_id="C1", permitted=anywhere) is None
    )  # corrected: no longer offered


async def test_a_thumbs_up_is_offered_in_its_channel_only_and_only_where_the_query_may_run(store):
    """Any person's 👍 reached every channel's model: a private channel's question and SQL literals
    (or text planted to steer later answers) in a channel whose allowlist refused those tables."""
    library = VerifiedLibrary(store, dialect="duckdb")
    await library.vote(turn(), user_id="U1", value="up", is_admin=False)  # given in C1
    question = "How many flights left JFK?"
    assert await library.example_for(question, channel_id="C1", permitted=anywhere) is not None
    assert await library.example_for(question, channel_id="C2", permitted=anywhere) is None
    assert await library.example_for(question, channel_id="C1", permitted=lambda sql: False) is None
    await library.vote(turn("t2"), user_id="A1", value="verify", is_admin=True)  # an admin's, for all
    shared = await library.example_for(question, channel_id="C2", permitted=anywhere)
    assert shared is not None and shared.source == "admin"
    assert await library.example_for(question, channel_id="C2", permitted=lambda sql: False) is None


def test_tables_in_sql_skips_ctes():
    sql = "WITH c AS (SELECT * FROM weather) SELECT * FROM flights f JOIN c USING (origin) JOIN main.planes p ON 1=1"
    assert tables_in_sql(sql, "duckdb") == ("flights", "main.planes", "weather")
    assert tables_in_sql("not sql at all (", "duckdb") == ()


def test_curated_file_next_to_the_table_notes(tmp_path):
    notes = tmp_path / "notes.yaml"
    notes.write_text("tables: {}\n")
    path = curated_path(notes)
    assert path == tmp_path / "verified_queries.yaml"
    path.write_text(
        f"queries:\n  - question: Flights from JFK?\n    sql: {JFK_SQL}\n    verified_by: data-team\n"
    )
    (query,) = load_curated(path, "duckdb")
    assert (query.tables, query.verified_by, query.source) == (("flights",), "data-team", "file")
    path.write_text("queries:\n  - question: no sql\n")
    with pytest.raises(ConfigError, match="Entry 1 of .* needs a `question` and an `sql`"):
        load_curated(path, "duckdb")
    assert load_curated(tmp_path / "missing.yaml", "duckdb") == []


def slack(text_: str, thread: str, channel: str = "C") -> IncomingMessage:
    return IncomingMessage(text=text_, surface="slack", thread_key=("T", channel, thread), channel_id=channel)


async def test_the_first_request_of_a_close_question_carries_the_verified_sql(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": JFK_SQL, "save_as": "jfk"}),
        text("111,279 flights left JFK."),
    )
    first = await analyst.handle(slack("How many flights left JFK in 2013?", "1"), recorder)
    record = await analyst.store.get_turn(first.turn_id)
    await analyst.verified.vote(record, user_id="U1", value="up", is_admin=False)

    async def first_request(message: IncomingMessage) -> list[dict]:
        fake_model.enqueue(text("ok"))
        before = len(fake_model.requests)
        await analyst.handle(message, recorder)
        return fake_model.requests[before]["messages"]

    blocks = (await first_request(slack("how many flights departed JFK in 2013", "2")))[-1]["content"]
    assert blocks[0]["text"] == "how many flights departed JFK in 2013"
    assert JFK_SQL in blocks[1]["text"] and "verified by U1" in blocks[1]["text"]
    not_close = await first_request(slack("Which manufacturer built most planes?", "3"))
    assert JFK_SQL not in str(not_close)  # not close: no example
    elsewhere = await first_request(slack("how many flights departed JFK in 2013", "4", channel="D"))
    assert JFK_SQL not in str(elsewhere)  # a 👍 given in C stays in C


async def test_an_answer_that_follows_a_verified_query_says_so_in_its_receipt(analyst, fake_model, recorder):
    fake_model.enqueue(tool("query_warehouse", {"sql": JFK_SQL}), text("111,279 flights left JFK."))
    first = await analyst.handle(
        IncomingMessage(
            text="How many flights left JFK in 2013?",
            surface="slack",
            thread_key=("T", "C", "v1"),
            channel_id="C",
        ),
        recorder,
    )
    await analyst.verified.vote(
        await analyst.store.get_turn(first.turn_id), user_id="U1", value="up", is_admin=False
    )
    assert recorder.of("turn_finished")[-1].receipt.verified_by == ""  # nothing was verified yet

    fake_model.enqueue(tool("query_warehouse", {"sql": JFK_SQL}), text("111,279 departed JFK."))
    await analyst.handle(
        IncomingMessage(
            text="how many flights departed JFK in 2013",
            surface="slack",
            thread_key=("T", "C", "v2"),
            channel_id="C",
        ),
        recorder,
    )
    assert recorder.of("turn_finished")[-1].receipt.verified_by == "U1"


async def test_when_the_closest_example_may_not_run_here_the_next_closest_is_offered(store):
    library = VerifiedLibrary(store, dialect="duckdb")
    secret = "SELECT count(*) AS n FROM salaries WHERE origin = 'JFK'"
    steps = [{"tool": "query_warehouse", "ok": True, "input": {"sql": secret}, "files": ["s.parquet"]}]
    await library.verify_turn(
        turn("t1", question="How many flights left JFK?", steps=steps), by="A1", source="admin"
    )
    await library.verify_turn(
        turn("t2", question="How many flights left JFK airport?"), by="A1", source="admin"
    )
    offered = await library.example_for(
        "How many flights left JFK?", channel_id="C9", permitted=lambda sql: "salaries" not in sql
    )
    assert offered is not None and offered.sql == JFK_SQL
