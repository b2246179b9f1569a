"""A file deleted in Slack leaves the threads that took a copy (bot/slack_file_deleted.py,
core/file_deletions.py). A trial shared people.csv, then (as if deleted in Slack) asked a follow-up:
`run_sql` on it still returned the email — the app subscribed to no `file_deleted` and the copy lived
until the thread was idle 30 days. `datathread serve` against the fake Slack Web API, a real sandbox
and store, a scripted model."""

from __future__ import annotations

import asyncio
import json

from core import file_deletions
from core.sessions import session_id_for
from tests.bot.slack_harness import mention, serve
from tests.fakes.anthropic_api import text, tool
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

EMAIL = "jane.doe@example.com"
CSV = f"name,email\nJane,{EMAIL}\n".encode()
OTHER = b"name,email\nBob,bob@example.com\nAnn,ann@example.com\n"  # another people.csv: not deleted


def workspace(settings, session_id: str) -> list[str]:
    root = settings.workspaces_dir / session_id
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def people_csv_shared(h, api, fake_model) -> tuple[dict, str]:
    """people.csv shared with a question in thread 200.1 and answered: the file as Slack lists it, and
    the thread's session id."""
    shared = api.share("people.csv", CSV)
    fake_model.enqueue(text("One person."))
    await h.event({**mention("what's in it?", ts="200.1"), "files": [shared]})
    await h.drain()
    return shared, session_id_for("slack", (TEAM_ID, "C0001", "200.1"))


async def test_a_file_deleted_in_slack_is_gone_from_the_thread_and_its_follow_up_hears_so(
    settings, fake_model
):
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as h:
            shared, first = await people_csv_shared(h, api, fake_model)
            # another thread shares a different file of the same name: it keeps it
            fake_model.enqueue(text("Two people."))
            await h.event({**mention("and this one?", ts="300.1"), "files": [api.share("people.csv", OTHER)]})
            await h.drain()
            other = session_id_for("slack", (TEAM_ID, "C0001", "300.1"))
            assert "people.csv" in workspace(h.state.settings, first)

            r = await h.event({"type": "file_deleted", "file_id": shared["id"], "event_ts": "201.0"})
            assert r.status_code == 200
            await h.drain()
            assert "people.csv" not in workspace(h.state.settings, first)
            assert "people.csv" in workspace(h.state.settings, other)  # not that file

            fetched = len(api.downloads)
            fake_model.enqueue(
                tool("run_sql", {"sql": "SELECT * FROM 'people.csv'"}), text("It was deleted.")
            )
            await h.event(mention("show the emails again", ts="200.2", thread_ts="200.1"))
            await h.drain()
            assert len(api.downloads) == fetched
            question = json.dumps(fake_model.requests[-2]["messages"][-1])
            assert "Deleted by the people who shared them" in question and "people.csv" in question
            assert EMAIL not in json.dumps(fake_model.last_tool_results())
            assert EMAIL not in json.dumps(fake_model.requests[-2])  # nor in what the history says of it
            # told once: the next follow-up's question carries no new note (its history has it)
            fake_model.enqueue(text("Still gone."))
            await h.event(mention("anything else?", ts="200.3", thread_ts="200.1"))
            await h.drain()
            assert "Deleted by the people" not in json.dumps(fake_model.requests[-1]["messages"][-1])
    finally:
        api.stop()


async def test_a_deletion_a_running_turn_held_up_is_tried_again(settings, fake_model, monkeypatch):
    """The job runs after the ack, so Slack never sends the event again: a copy a turn's lock held up
    stayed for good (the log said "a redelivered event tries again"). The job is queued again now."""
    monkeypatch.setattr(file_deletions, "LOCK_WAIT_S", 0.3)
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as h:
            shared, first = await people_csv_shared(h, api, fake_model)
            store = h.state.analyst.store
            locked = asyncio.Event()

            async def a_turn_running() -> None:  # ends after the first try gave up, during the second
                async with store.lock(first, ttl_s=30, wait_s=0):
                    locked.set()
                    await asyncio.sleep(0.5)

            turn = asyncio.create_task(a_turn_running())
            await locked.wait()
            await h.event({"type": "file_deleted", "file_id": shared["id"], "event_ts": "201.0"})
            await h.drain()
            assert "people.csv" not in workspace(h.state.settings, first)
            assert await store.get_record(file_deletions.KIND, f"slack:{shared['id']}") is None
            await turn
    finally:
        api.stop()
