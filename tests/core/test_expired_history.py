"""A follow-up after the store let the thread's history go (DATATHREAD_HISTORY_TTL_DAYS): the question
tells Claude so, with the files still in the workspace, once; a new thread is told nothing. Real stores
(SQLite, Redis), real sandbox, the scripted Messages API."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
import redis

from core.analyst import Analyst
from core.asked_when import MARK as ASKED
from core.events import IncomingMessage
from tests.fakes.anthropic_api import text, tool
from tests.fakes.scenarios import CHART, DELAYS

NOTE = "the earlier messages of this thread are no longer kept"


def ask(text_: str, key: str = "old") -> IncomingMessage:
    return IncomingMessage(text=text_, surface="terminal", thread_key=(key,), user_id="u1")


@pytest.fixture(params=["sqlite", "redis"])
async def analyst_on(request, settings):
    """An Analyst on SQLite or Redis, and how that store lets a thread's history go."""
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
        server.flush()
        settings = settings.model_copy(update={"redis_url": server.url})
    analyst = await Analyst.create(settings)

    async def let_go(session_id: str) -> None:
        if request.param == "redis":  # the history and metadata keys expire together; records stay
            client = redis.Redis.from_url(settings.redis_url)
            assert client.delete(f"dt:h:{session_id}", f"dt:m:{session_id}") == 2
            client.close()
        else:  # SQLite keeps the metadata: the history row is past its time, the last turn as long ago
            gone = time.time() - settings.history_ttl_days * 86400 - 60
            with sqlite3.connect(analyst.store.path) as con:
                con.execute("UPDATE history SET expires=? WHERE session_id=?", (gone, session_id))
                (meta,) = con.execute("SELECT data FROM meta WHERE session_id=?", (session_id,)).fetchone()
                aged = {**json.loads(meta), "updated": gone}
                con.execute("UPDATE meta SET data=? WHERE session_id=?", (json.dumps(aged), session_id))
                con.execute("DELETE FROM turns WHERE session_id=?", (session_id,))  # the metadata alone tells

    yield analyst, let_go
    await analyst.close()


async def test_a_follow_up_after_the_history_expired_is_told_so_once(analyst_on, fake_model, recorder):
    analyst, let_go = analyst_on
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool("attach_file", {"path": "delays.png"}, say="**F9** had the highest average delay."),
    )
    first = await analyst.handle(ask("which carriers were most delayed? chart it"), recorder)
    assert first.ok, first.error
    await let_go(first.session_id)
    assert await analyst.store.load_history(first.session_id) == []

    fake_model.enqueue(text("I no longer have our earlier messages in this thread. Here it is in blue."))
    later = await analyst.handle(ask("the chart from earlier but in blue"), recorder)
    assert later.ok and later.session_id == first.session_id
    messages = fake_model.requests[-1]["messages"]
    assert len(messages) == 1  # nothing of the earlier turn is left to send…
    question, asked, note = messages[0]["content"]
    assert question["text"] == "the chart from earlier but in blue" and asked["text"].startswith(ASKED)
    assert NOTE in note["text"] and "(they are kept for 30 days)" in note["text"]  # …and Claude is told
    assert "still in the workspace: delays.csv, delays.parquet, delays.png." in note["text"]

    fake_model.enqueue(text("Done."))
    assert (await analyst.handle(ask("now in red"), recorder)).ok
    last = fake_model.requests[-1]["messages"][-1]["content"]
    said = [b["text"] for b in last if not b["text"].startswith(ASKED)]
    assert said == ["now in red"]  # the thread has a history again: said once


async def test_new_threads_and_threads_that_kept_their_history_are_told_nothing(
    analyst_on, fake_model, recorder
):
    analyst, _ = analyst_on
    assert (await analyst.handle(ask("help", key="fresh"), recorder)).ok  # metadata, but no history yet
    fake_model.enqueue(text("One."), text("Two."))
    assert (await analyst.handle(ask("how many flights?", key="fresh"), recorder)).ok
    assert (await analyst.handle(ask("and airlines?", key="fresh"), recorder)).ok
    for request in fake_model.requests:
        assert NOTE not in json.dumps(request["messages"])
