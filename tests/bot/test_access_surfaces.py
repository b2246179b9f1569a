"""Access control, rate limits and the audit trail, through the real Slack and Teams surfaces: signed
Slack events and Bot Framework activities in, the fake platform APIs recording what people see."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from bot.audit import print_audit
from bot.server import create_app
from tests.bot.slack_harness import mention, serve
from tests.bot.teams_harness import THREAD, activity, serve_teams
from tests.fakes.anthropic_api import text
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.slack_api import FakeSlackAPI


def seen_by_people(api: FakeSlackAPI) -> str:
    return json.dumps([c.args for c in api.calls] + api.shown())  # streamed answers joined


async def audit_lines(settings) -> list[dict]:
    out = io.StringIO()
    await print_audit(
        settings, session=None, user=None, channel=None, since_hours=None, fmt="jsonl", limit=100, out=out
    )
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture
def slack_api():
    api = FakeSlackAPI().start()
    yield api
    api.stop()


async def test_slack_denies_channels_and_rate_limits_users_with_a_short_reason(
    settings, fake_model, slack_api
):
    limited = settings.model_copy(
        update={"allowed_channels": "C0001", "user_turns_per_hour": 2, "channel_turns_per_hour": 100}
    )
    fake_model.enqueue(text("answer one"), text("answer two"))
    async with serve(limited, slack_api) as slack:
        assert (
            await slack.event(mention("revenue?", ts="1700000001.000100", channel="C0999"))
        ).status_code == 200
        await slack.drain()
        assert "isn't enabled in this channel" in seen_by_people(slack_api)
        assert not fake_model.requests  # a denied request never reaches the model
        # to the person alone, as /ask's refusals are: it was streamed into the channel's thread
        [told] = [c for c in slack_api.of("chat.postEphemeral") if "isn't enabled" in json.dumps(c.args)]
        assert told.args["user"] == "U0001" and not slack_api.of("chat.startStream")

        for i in (2, 3, 4):
            await slack.event(mention(f"question {i}", ts=f"170000000{i}.000100"))
            await slack.drain()
        assert len(fake_model.requests) == 2
        shown = seen_by_people(slack_api)
        assert "answer one" in shown and "answer two" in shown
        assert "reached the limit of questions" in shown and "Try again in" in shown
        # in people's words: no variable name they cannot set, no error id on an expected refusal
        assert (
            ":warning: You've reached the limit of questions for now: 2 an hour per person, set by an admin."
            in shown
        )
        assert "DATATHREAD_" not in shown and "error id" not in shown

    records = await audit_lines(limited)
    by_question = {r["question"]: r for r in records}
    assert by_question["revenue?"]["ok"] is False and by_question["revenue?"]["channel_id"] == "C0999"
    assert "isn't enabled" in by_question["revenue?"]["error"]
    assert by_question["question 2"]["ok"] and by_question["question 3"]["ok"]
    assert "limit of questions" in by_question["question 4"]["error"]
    assert all(r["surface"] == "slack" and r["user_id"] == "U0001" for r in records)


async def test_teams_denies_users_and_rate_limits_channels(settings, fake_model):
    connector = FakeConnector().start()
    limited = settings.model_copy(update={"allowed_users": "aad-ada", "channel_turns_per_hour": 1})
    app = create_app(limited)
    fake_model.enqueue(text("teams answer"))
    try:
        async with app.router.lifespan_context(app):
            state = app.state.datathread
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:

                async def say(body: dict) -> str:
                    before = len(connector.sent())
                    assert (await http.post("/api/messages", json=body)).status_code == 202
                    await state.runner.drain(timeout=60)
                    return json.dumps(connector.sent()[before:])

                stranger = activity(connector.url, "show me payroll", conversation=THREAD)
                stranger["from"] = {"id": "29:eve", "name": "Eve", "aadObjectId": "aad-eve"}
                assert "not on the list of people" in await say(stranger)
                assert not fake_model.requests
                assert "teams answer" in await say(activity(connector.url, "flights by month?"))
                limited_reply = await say(activity(connector.url, "and by day?"))
                assert "reached the limit of questions" in limited_reply and "Try again in" in limited_reply
                assert "set by an admin" in limited_reply and "DATATHREAD_" not in limited_reply
                assert "error id" not in limited_reply
                assert len(fake_model.requests) == 1
    finally:
        connector.stop()
    records = await audit_lines(limited)
    assert [(r["user_id"], r["ok"]) for r in records] == [
        ("aad-eve", False),
        ("aad-ada", True),
        ("aad-ada", False),
    ]
    assert all(r["surface"] == "teams" for r in records)


async def test_a_slack_user_outside_the_allowlist_cannot_act_on_an_answer_either(
    settings, fake_model, slack_api
):
    """The buttons under an answer skipped the access rules: a person not on DATATHREAD_ALLOWED_USERS saw
    its SQL, saved it as a verified query that later answers start from, exported the thread into the
    channel, and could schedule it. Now each button says what a refused question says, privately."""
    from bot import slack_blocks

    allowed = settings.model_copy(update={"allowed_users": "U0001"})
    fake_model.enqueue(text("16 airlines."))
    async with serve(allowed, slack_api) as slack:
        await slack.event(mention("how many airlines?", ts="1700000201.000100"))
        await slack.drain()
        stream = slack_api.of("chat.stopStream")[-1].args
        turn_id = stream["blocks"][1]["elements"][0]["value"]
        before = len(slack_api.calls)
        for action in (
            slack_blocks.ACTION_SHOW_SQL,
            slack_blocks.ACTION_FEEDBACK_UP,
            slack_blocks.ACTION_EXPORT,
        ):
            await slack.click(action, turn_id, thread_ts="1700000201.000100", user="U0003")
        await slack.select(
            slack_blocks.ACTION_SCHEDULE,
            f"{turn_id} 0 9 * * mon",
            thread_ts="1700000201.000100",
            user="U0003",
        )
        await slack.drain()
        after = slack_api.calls[before:]
        assert [c.method for c in after] == ["chat.postEphemeral"] * 4, [c.method for c in after]
        assert all("not on the list of people" in c.args["text"] and c.args["user"] == "U0003" for c in after)
        record = await slack.state.threads.turn(turn_id, channel_id="C0001")
        assert not record["feedback"]  # no vote, so no verified query either
        # a refused /ask is said to the person alone: it posted "<@U0003> asked: …" in the channel first
        before = len(slack_api.calls)
        await slack.command("how many flights?", user="U0003")
        await slack.drain()
        after = slack_api.calls[before:]
        assert not [c for c in after if c.method == "chat.postMessage"], [c.method for c in after]
        assert "not on the list of people" in json.dumps([c.args for c in after])
        # the asker's buttons still work
        await slack.click(slack_blocks.ACTION_SHOW_SQL, turn_id, thread_ts="1700000201.000100", user="U0001")
        await slack.drain()
        assert "not on the list" not in slack_api.calls[-1].args.get("text", "")


async def test_a_teams_user_outside_the_allowlist_cannot_act_on_an_answer_either(settings, fake_model):
    allowed = settings.model_copy(update={"allowed_users": "aad-ada"})
    fake_model.enqueue(text("16 airlines."))
    async with serve_teams(allowed) as teams:
        await teams.say("how many airlines?")
        (turn,) = await audit_lines(allowed)
        for value in ({"datathread": "show_steps"}, {"datathread": "feedback", "value": "up"},
                      {"datathread": "export_notebook"}):  # fmt: skip
            click = activity(teams.connector.url, value={**value, "turn_id": turn["turn_id"]})
            click["from"] = {"id": "29:eve", "name": "Eve", "aadObjectId": "aad-eve"}
            before = len(teams.connector.sent())
            await teams.post(click)
            await teams.state.runner.drain(timeout=60)
            (reply,) = teams.connector.sent()[before:]
            assert "not on the list of people" in reply["text"], reply
        assert not (await teams.state.threads.turn(turn["turn_id"], channel_id=turn["channel_id"]))[
            "feedback"
        ]


async def test_a_slack_user_outside_the_allowlist_cannot_reset_a_dm(settings, fake_model, slack_api):
    """`reset` in a DM ran before the access rules: a person they refuse started a fresh conversation
    and was told so. Now they hear what a refused question hears, privately, and nothing is reset."""
    from tests.bot.slack_harness import message
    from tests.fakes.slack_api import TEAM_ID

    allowed = settings.model_copy(update={"allowed_users": "U0001"})
    async with serve(allowed, slack_api) as slack:
        base = (TEAM_ID, "D0003", "dm")
        before = await slack.state.threads.current_key("slack", base, idle_reset=False)
        await slack.event(
            message("reset", ts="1700000301.000100", channel="D0003", channel_type="im", user="U0003")
        )
        await slack.drain()
        assert await slack.state.threads.current_key("slack", base, idle_reset=False) == before
        shown = seen_by_people(slack_api)
        assert "fresh conversation" not in shown
        [told] = [
            c for c in slack_api.of("chat.postEphemeral") if "not on the list of people" in c.args["text"]
        ]
        assert told.args["user"] == "U0003" and not fake_model.requests


async def test_a_teams_user_outside_the_allowlist_cannot_reset_a_group_chat(settings, fake_model):
    """In a group chat a person the access rules refuse could start everybody's fresh conversation
    with `reset`; now it is refused as their question would be."""
    allowed = settings.model_copy(update={"allowed_users": "aad-ada"})
    async with serve_teams(allowed) as teams:
        chat = "19:group-chat-1@thread.v2"
        base = ("tenant-1", chat)
        before = await teams.state.threads.current_key("teams", base, idle_reset=False)
        reset = activity(teams.connector.url, "reset", conversation=chat)
        reset["from"] = {"id": "29:eve", "name": "Eve", "aadObjectId": "aad-eve"}
        sent = len(teams.connector.sent())
        await teams.post(reset)
        await teams.state.runner.drain(timeout=60)
        said = json.dumps(teams.connector.sent()[sent:])
        assert "not on the list of people" in said and "fresh conversation" not in said
        assert await teams.state.threads.current_key("teams", base, idle_reset=False) == before
        # Ada, on the list, still resets it
        ada = activity(teams.connector.url, "reset", conversation=chat)
        await teams.post(ada)
        await teams.state.runner.drain(timeout=60)
        assert "fresh conversation" in teams.connector.sent()[-1]["text"]
        assert await teams.state.threads.current_key("teams", base, idle_reset=False) != before
