"""What people can do with an answer that used a file they shared, through the real apps: signed Slack
events into `datathread serve` against the fake Slack Web API, real-shaped Teams activities against the
fake Bot Connector, the scripted model, the real sandbox and store.

"Schedule…" is not offered under such an answer (each run would start without the file), and a pick
sent anyway is refused in one sentence; `reset` sent with files says the files were not read instead
of dropping them unsaid."""

from __future__ import annotations

from bot import slack_blocks
from core.help import FILES_NOT_READ, fresh_start
from core.schedules_store import ScheduleBook
from tests.bot.slack_harness import mention, message, serve
from tests.bot.teams_harness import CHAT, activity
from tests.fakes.anthropic_api import text, tool
from tests.fakes.file_host import FileHost
from tests.fakes.slack_api import FakeSlackAPI

CSV = b"carrier,seats\nUA,180\nB6,90\n"
CARRIERS = "SELECT carrier, count(*) AS n FROM flights GROUP BY carrier ORDER BY n DESC LIMIT 3"
REFUSED = "I can't schedule an answer that read a file shared in the conversation: each run starts afresh"


def footer_of(api: FakeSlackAPI, answer: int) -> dict[str, dict]:
    """The controls under the `answer`-th streamed answer, by action id."""
    actions = api.of("chat.stopStream")[answer].args["blocks"][-1]["elements"]
    return {e["action_id"]: e for e in actions}


async def test_slack_offers_no_schedule_under_an_answer_that_read_a_shared_file(settings, fake_model):
    """The answer that took the CSV in, and a follow-up in its thread that only queried it: no
    "Schedule…" under either (it was drawn, and every pick was refused with a sentence: each run starts
    without the file); a pick sent anyway (an old message, a crafted one) is still refused in the
    answer's thread, and nothing is asked or created. A follow-up from the warehouse alone, in the same
    thread, still offers it."""
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
            fake_model.enqueue(tool("query_warehouse", {"sql": CARRIERS, "save_as": "top"}), text("UA."))
            await harness.event(mention("top carriers in the warehouse?", ts="600.3", thread_ts="600.1"))
            await harness.drain()
            footers = [footer_of(api, answer) for answer in (0, 1, 2)]
            assert [slack_blocks.ACTION_SCHEDULE in f for f in footers] == [False, False, True]
            assert all(slack_blocks.ACTION_EXPORT in f for f in footers)  # the rest of the footer stays
            for footer in footers[:2]:
                said = len(api.of("chat.postEphemeral"))
                picked = f"{footer[slack_blocks.ACTION_SHOW_SQL]['value']} 0 9 * * mon"
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
            fresh = fresh_start(settings)
            assert said == [f"{fresh} {FILES_NOT_READ}", fresh]
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
        fresh = fresh_start(teams.state.settings)
        assert teams.connector.sent()[-1]["text"] == f"{fresh} {FILES_NOT_READ}"
        assert len(host.seen) == seen
        assert (await teams.say("reset", conversation=CHAT))[-1]["text"] == fresh
    finally:
        host.stop()


async def test_teams_offers_no_schedule_under_an_answer_that_read_a_shared_file(teams, fake_model):
    """Teams cards in channels and group chats offered "Schedule…" under every answer; they now take the
    core's word (`TurnFinished.schedulable`), as Slack's footer does: not under an answer that read a
    shared file, still under one from the warehouse alone. (Teams itself hands the bot files only in
    personal chat, where no answer offers it: this is the sink's side, fed by the real core.)"""
    from botbuilder.schema import ChannelAccount, ConversationAccount, ConversationReference
    from botframework.connector.aio import ConnectorClient
    from botframework.connector.auth import MicrosoftAppCredentials

    from bot.teams_out import TeamsOut
    from bot.teams_progress import TeamsSink
    from core.events import IncomingMessage, SharedFile
    from tests.bot.teams_harness import BOT

    group = "19:group-chat-2@thread.v2"
    connector = ConnectorClient(MicrosoftAppCredentials(None, None), base_url=teams.connector.url)
    reference = ConversationReference(
        channel_id="msteams",
        service_url=teams.connector.url,
        conversation=ConversationAccount(id=group, conversation_type="groupChat"),
        bot=ChannelAccount(id=BOT["id"], name=BOT["name"]),
    )

    async def ask(question: str, *files: SharedFile) -> set[str]:
        sink = TeamsSink(
            threads=teams.state.threads,
            links=teams.state.links,
            out=TeamsOut(connector=connector, reference=reference),
            personal=False,
        )
        message = IncomingMessage(
            text=question, surface="teams", thread_key=("tenant-1", group), user_id="aad-ada", files=files
        )
        before = len(teams.connector.sent(group))
        assert (await teams.state.analyst.handle(message, sink)).ok
        sent = teams.connector.sent(group)[before:]
        cards = [
            a["content"] for m in sent for a in m.get("attachments") or [] if "adaptive" in a["contentType"]
        ]
        return {action["title"] for card in cards for action in card.get("actions") or []}

    try:
        fake_model.enqueue(text("Two carriers."))
        read_it = await ask("what's in it?", SharedFile("seats.csv", CSV))
        fake_model.enqueue(tool("query_warehouse", {"sql": CARRIERS, "save_as": "top"}), text("UA."))
        warehouse = await ask("top carriers in the warehouse?")
    finally:
        await connector.__aexit__(None, None, None)
    assert "Export notebook" in read_it and "Schedule…" not in read_it
    assert "Schedule…" in warehouse
