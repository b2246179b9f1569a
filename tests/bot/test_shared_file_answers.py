"""What people can do with an answer that used a file they shared, through the real apps: signed Slack
events into `datathread serve` against the fake Slack Web API, real-shaped Teams activities against the
fake Bot Connector, the scripted model, the real sandbox and store.

"Schedule…" under such an answer is refused in one sentence (each run would start without the file),
and `reset` sent with files says the files were not read instead of dropping them unsaid."""

from __future__ import annotations

from bot import slack_blocks
from core.help import FILES_NOT_READ, FRESH_START
from core.schedules_store import ScheduleBook
from tests.bot.slack_harness import mention, message, serve
from tests.bot.teams_harness import CHAT, activity
from tests.fakes.anthropic_api import text, tool
from tests.fakes.file_host import FileHost
from tests.fakes.slack_api import FakeSlackAPI

CSV = b"carrier,seats\nUA,180\nB6,90\n"
REFUSED = "I can't schedule an answer that read a file shared in the conversation: each run starts afresh"


def monday_of(api: FakeSlackAPI, answer: int) -> str:
    """The "Every Monday" option of the Schedule… menu under the `answer`-th streamed answer."""
    actions = api.of("chat.stopStream")[answer].args["blocks"][-1]["elements"]
    menu = next(e for e in actions if e["action_id"] == slack_blocks.ACTION_SCHEDULE)
    return next(o["value"] for o in menu["options"] if o["text"]["text"] == "Every Monday at 9:00")


async def test_slack_schedule_under_an_answer_that_read_a_shared_file_is_refused(settings, fake_model):
    """The answer that took the CSV in, and a follow-up in its thread that only queried it: "Schedule…"
    tells the clicker why, in the answer's thread, and nothing is asked or created."""
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as harness:
            book = ScheduleBook(harness.state.analyst.store)
            fake_model.enqueue(text("Two carriers."))
            await harness.event(
                {**mention("what's in it?", ts="600.1"), "files": [api.share("seats.csv", CSV)]}
            )
            await harness.drain()
            fake_model.enqueue(
                tool("run_sql", {"sql": "SELECT sum(seats) AS seats FROM 'seats.csv'"}), text("270 seats.")
            )
            await harness.event(mention("total seats?", ts="600.2", thread_ts="600.1"))
            await harness.drain()
            for answer in (0, 1):
                said = len(api.of("chat.postEphemeral"))
                picked = monday_of(api, answer)
                await harness.select(slack_blocks.ACTION_SCHEDULE, picked, thread_ts="600.1", user="U0001")
                await harness.drain()  # nothing waits for a click: no Create / Cancel was asked
                [told] = [c.args for c in api.of("chat.postEphemeral")[said:]]
                assert told["text"].startswith(REFUSED) and "blocks" not in told, told
                assert told["thread_ts"] == "600.1" and told["user"] == "U0001"
            assert await book.list() == []
    finally:
        api.stop()


async def test_slack_reset_with_a_file_says_the_file_was_not_read(settings, fake_model):
    """A DM's `reset` with a CSV: a fresh conversation, and a sentence that the file was not read (it
    is not fetched at all); `reset` alone says only the first."""
    api = FakeSlackAPI().start()
    try:
        async with serve(settings, api) as harness:
            dm = {"channel": "D0001", "channel_type": "im"}
            await harness.event({**message("reset", ts="700.1", **dm), "files": [api.share("a.csv", CSV)]})
            await harness.drain()
            await harness.event(message("reset", ts="700.2", **dm))
            await harness.drain()
            said = [c.args["text"] for c in api.of("chat.postMessage")]
            assert said == [f"{FRESH_START} {FILES_NOT_READ}", FRESH_START]
            assert api.downloads == [] and not fake_model.requests
    finally:
        api.stop()


def _attached(url: str, name: str) -> dict:
    """A file attached in Teams personal chat, as Teams sends it (bots-filesv4)."""
    return {
        "contentType": "application/vnd.microsoft.teams.file.download.info",
        "contentUrl": f"https://contoso-my.sharepoint.com/personal/ada/Documents/{name}",
        "name": name,
        "content": {"downloadUrl": url, "uniqueId": "1150D938", "fileType": name.rsplit(".")[-1]},
    }


async def test_teams_schedule_of_an_answer_that_read_a_shared_file_and_reset_with_a_file(teams, fake_model):
    """Teams reads files in personal chat, where answers offer no Schedule…; a schedule submit for such
    an answer (an old card, a crafted one) is still refused in words. `reset` with a file says the file
    was not read, and nothing is downloaded."""
    host = FileHost().start()
    try:
        url = host.serve("/dl/seats.csv", CSV)
        fake_model.enqueue(text("Two carriers."))
        body = activity(teams.connector.url, "what's in it?", conversation=CHAT)
        body["attachments"] = [_attached(url, "seats.csv")]
        assert (await teams.post(body)).status_code == 202
        await teams.state.runner.drain(timeout=60)
        [turn] = [r for r in await teams.state.analyst.store.list_turns() if r.get("shared_files")]
        before = len(teams.connector.sent())
        pick = {"datathread": "schedule", "turn_id": turn["turn_id"], "cadence": "0 9 * * mon"}
        await teams.say("", conversation=CHAT, value=pick)
        await teams.state.runner.drain(timeout=60)
        said = [m.get("text") or "" for m in teams.connector.sent()[before:]]
        assert any(t.startswith(REFUSED) for t in said), said
        assert await ScheduleBook(teams.state.analyst.store).list() == []

        seen = len(host.seen)
        reset = activity(teams.connector.url, "reset", conversation=CHAT)
        reset["attachments"] = [_attached(host.serve("/dl/b.csv", CSV), "b.csv")]
        assert (await teams.post(reset)).status_code == 202
        await teams.state.runner.drain(timeout=60)
        assert teams.connector.sent()[-1]["text"] == f"{FRESH_START} {FILES_NOT_READ}"
        assert len(host.seen) == seen
        assert (await teams.say("reset", conversation=CHAT))[-1]["text"] == FRESH_START
    finally:
        host.stop()
