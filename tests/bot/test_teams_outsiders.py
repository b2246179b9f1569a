"""People from outside the organization in Teams, end to end: a guest of the tenant (Entra B2B), a
shared channel's member from another tenant (Teams Connect), an anonymous meeting participant. Real
app, the real botframework-connector client asking the fake Bot Connector's members route (as
botbuilder's `TeamsInfo.get_member` does), the scripted model. DATATHREAD_ALLOW_EXTERNAL_USERS and
DATATHREAD_ALLOW_GUESTS were applied in Slack only: in Teams only the conversation's tenant was
checked, so all of them were answered from the organization's warehouse."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from botbuilder.schema.teams import TeamsChannelAccount

from bot import teams_connector, teams_members
from bot.teams_members import member_of, standing
from core.access import (
    EXTERNAL,
    EXTERNAL_REFUSED,
    GUEST,
    MAYBE_GUEST,
    TEAMS_GUEST_REFUSED,
    UNCONFIRMED,
    UNCONFIRMED_REFUSED,
)
from core.schedules import new_schedule
from core.schedules_tick import tick
from tests.bot.teams_harness import activity, serve_teams
from tests.fakes.anthropic_api import text, tool
from tests.fakes.bot_connector import account
from tests.fakes.clock import Clock

GRACE = {"id": "29:grace", "name": "Grace Hopper", "aadObjectId": "0c1d2e3f-0000-4000-8000-00000000aaaa"}
OLGA = {"id": "29:olga", "name": "Olga Fabrikam", "aadObjectId": "aad-olga"}  # of another tenant
VISITOR = {"id": "29:anon-visitor", "name": "Visitor (Unverified)"}  # no Entra object id
LINUS = {"id": "29:linus", "name": "Linus Guest", "aadObjectId": "aad-linus"}
FABRIKAM = "fabrikam-tenant"
SHARED = "19:shared@thread.tacv2"  # a shared channel (Teams Connect) of the harness's team, 19:team
MONDAY_0859_BERLIN = datetime(2031, 11, 24, 7, 59, tzinfo=UTC)


def as_(who: dict, body: dict) -> dict:
    body["from"] = who
    return body


async def said(teams, body: dict) -> str:
    """POST one activity, wait for its turn, and return what the bot sent for it."""
    before = len(teams.connector.sent())
    assert (await teams.post(body)).status_code == 202
    await teams.state.runner.drain(timeout=60)
    return json.dumps(teams.connector.sent()[before:])


def members(teams) -> None:
    """The people of these tests, as Teams would say who they are."""
    teams.connector.members += [
        account(GRACE["id"], GRACE["aadObjectId"], GRACE["name"], role="guest"),
        account(OLGA["id"], OLGA["aadObjectId"], OLGA["name"], tenant=FABRIKAM),
        account(VISITOR["id"], "", VISITOR["name"], role="anonymous"),
    ]


def asked(teams, member: str) -> int:
    return sum(m == member for _, m in teams.connector.member_lookups)


@pytest.mark.parametrize(
    ("said_", "external", "entra", "expected"),
    [
        ({"tenant": "home", "role": "user"}, False, True, ""),
        ({"tenant": "HOME", "role": "user"}, False, True, ""),  # Teams' GUIDs in either case
        ({"tenant": "listed", "role": "user"}, False, True, ""),  # DATATHREAD_ALLOWED_TEAMS's
        ({"tenant": "home", "role": "guest"}, False, True, GUEST),
        ({"tenant": "home", "role": "user", "b2b": True}, False, True, GUEST),  # #EXT#, role "user"
        ({"tenant": "other", "role": "user", "b2b": True}, False, True, EXTERNAL),
        ({"tenant": "other", "role": "user"}, False, True, EXTERNAL),
        ({"tenant": "other", "role": "guest"}, False, True, EXTERNAL),  # another tenant's guest
        ({"tenant": "home", "role": "anonymous"}, False, False, EXTERNAL),
        ({"tenant": "", "role": "user"}, False, True, UNCONFIRMED),
        (None, False, True, UNCONFIRMED),  # the lookup failed
        (None, True, True, MAYBE_GUEST),  # asked only while guests are refused: no guest passes
        (None, False, False, EXTERNAL),  # no Entra id in the activity: nobody's account
    ],
)
def test_standing_from_what_teams_says(said_, external, entra, expected):
    home = frozenset({"home", "listed"})
    assert standing(said_, home=home, allow_external=external, entra=entra) == expected


@pytest.mark.parametrize(
    ("upn", "role", "b2b"),
    [
        ("ada@tenant-1.example", "user", False),
        ("grace_fabrikam.com#EXT#@tenant1.onmicrosoft.com", "user", True),  # msteams-docs#6381
        ("GRACE_FABRIKAM.COM#ext#@tenant1.onmicrosoft.com", "user", True),
        ("grace_fabrikam.com#EXT#@tenant1.onmicrosoft.com", "guest", True),
        ("", "guest", False),  # userRole alone says it then
    ],
)
def test_an_entra_b2b_guest_is_read_from_the_user_principal_name(upn, role, b2b):
    said = account("29:x", "aad-x", "Grace Hopper", role=role)
    said["userPrincipalName"] = upn
    read = member_of(TeamsChannelAccount().deserialize(said))
    assert read == {"tenant": "tenant-1", "role": role, "b2b": b2b}
    home = frozenset({"tenant-1"})
    assert standing(read, home=home, allow_external=False, entra=True) == (
        GUEST if b2b or role == "guest" else ""
    )


async def test_a_guest_is_refused_while_guests_are_refused_and_a_colleague_still_answered(
    settings, fake_model
):
    fake_model.enqueue(text("336,776 flights."))
    async with serve_teams(settings.model_copy(update={"allow_guests": False})) as teams:
        members(teams)
        url = teams.connector.url
        refused = await said(teams, as_(GRACE, activity(url, "how many flights?")))
        assert TEAMS_GUEST_REFUSED in refused and "336,776" not in refused
        assert "workspace" not in refused  # Teams has none: a guest of the organization (tenant)
        assert not fake_model.requests  # the model never saw the guest's question
        assert "336,776" in await said(teams, activity(url, "how many flights?"))  # Ada, a member
        # a guest Teams calls "user" (msteams-docs#6381), known by the #EXT# of their principal name
        linus = account("29:linus", "aad-linus", "Linus Guest")
        linus["userPrincipalName"] = "linus_fabrikam.com#EXT#@tenant1.onmicrosoft.com"
        teams.connector.members.append(linus)
        linus_said = await said(teams, as_(LINUS, activity(url, "how many flights?")))
        assert TEAMS_GUEST_REFUSED in linus_said and "336,776" not in linus_said
        assert len(fake_model.requests) == 1


async def test_a_shared_channel_member_of_another_tenant_is_refused_unless_outsiders_are_allowed(
    settings, fake_model
):
    """Refused with defaults, and with the home tenant listed in DATATHREAD_ALLOWED_TEAMS: the
    conversation's tenant is listed, not Olga's, and that must not let its outsiders through. With
    DATATHREAD_ALLOW_EXTERNAL_USERS=true answered, and nobody asked about: both settings allow."""
    for update in ({}, {"allowed_teams": "tenant-1"}):
        async with serve_teams(settings.model_copy(update=update)) as teams:
            members(teams)
            url = teams.connector.url
            refused = await said(teams, as_(OLGA, activity(url, "show me payroll")))
            assert EXTERNAL_REFUSED in refused, (update, refused)
            anonymous = await said(teams, as_(VISITOR, activity(url, "show me payroll")))
            assert EXTERNAL_REFUSED in anonymous, (update, anonymous)
    assert not fake_model.requests
    fake_model.enqueue(text("336,776 flights."))
    async with serve_teams(settings.model_copy(update={"allow_external_users": True})) as teams:
        members(teams)
        assert "336,776" in await said(teams, as_(OLGA, activity(teams.connector.url, "how many flights?")))
        assert not teams.connector.member_lookups


async def test_a_home_member_is_answered_and_looked_up_once_a_day_or_not_at_all_when_named(
    settings, fake_model
):
    fake_model.enqueue(text("336,776 flights."), text("16 carriers."), text("1,458 planes."))
    async with serve_teams(settings) as teams:
        assert "336,776" in json.dumps(await teams.say("how many flights?"))
        assert "16 carriers" in json.dumps(await teams.say("how many carriers?"))
        # asked in the channel's team: the thread's id is no conversation to the members route
        assert teams.connector.member_lookups == [("19:team", "29:ada")]  # the second was kept
    async with serve_teams(settings.model_copy(update={"allowed_users": "aad-ada"})) as teams:
        assert "1,458" in json.dumps(await teams.say("how many planes?"))
        assert not teams.connector.member_lookups  # allowed by name: whoever Teams says she is


async def test_a_shared_channels_outside_member_is_looked_up_in_the_channel_and_a_colleague_in_the_team(
    settings, fake_model
):
    """A channel message's conversation is its thread, which the members route does not know (404
    ThreadNotFound): asked there, every colleague in a channel was refused as unconfirmed, on every
    message. Teams is asked in the team; a shared channel's member from another organization, whom
    the host team's roster lacks (404 MemberNotFoundInConversation), in the channel. With outsiders
    allowed and guests refused Olga is answered (of another tenant: no guest of ours) — not refused as
    someone Teams could not place."""
    fake_model.enqueue(text("336,776 flights."), text("16 carriers."))
    update = {"allow_external_users": True, "allow_guests": False}
    async with serve_teams(settings.model_copy(update=update)) as teams:
        olga = account(OLGA["id"], OLGA["aadObjectId"], OLGA["name"], tenant=FABRIKAM)
        teams.connector.rosters[SHARED] = [*teams.connector.members, olga]  # not in the team's roster
        thread = f"{SHARED};messageid=1700000000002"
        assert "336,776" in await said(
            teams, activity(teams.connector.url, "how many flights?", conversation=thread)
        )
        olga_said = await said(
            teams, as_(OLGA, activity(teams.connector.url, "how many carriers?", conversation=thread))
        )
        assert "16 carriers" in olga_said, olga_said
        assert teams.connector.member_lookups == [
            ("19:team", "29:ada"),
            ("19:team", "29:olga"),
            (SHARED, "29:olga"),
        ]


@pytest.mark.parametrize("failure", ["silent", "500", "429"])
async def test_a_members_route_that_fails_refuses_as_unconfirmed_in_time(
    settings, fake_model, monkeypatch, caplog, failure
):
    """Fail closed, within the connector's timeout, one log line naming why, no traceback. Asked once
    (a throttled lookup waited for its retry: 5 + 5 + 5 s before a first message on a silent or 429ing
    Connector), and the failure kept a short while, so an outage does not add a lookup's wait to every
    message — the person refused as unconfirmed meanwhile; once it has passed and Teams answers again,
    so is the person."""
    monkeypatch.setattr(teams_connector, "PROGRESS_TIMEOUT_S", 0.5)
    monkeypatch.setattr(teams_members, "UNPLACED_TTL_S", 1.5)
    fake_model.enqueue(text("336,776 flights."))
    async with serve_teams(settings) as teams:
        if failure == "silent":
            teams.connector.member_stall_s = 30.0
        else:
            status, code = (500, "ServiceError") if failure == "500" else (429, "Throttled")
            teams.connector.member_refusal = (status, {"error": {"code": code, "message": "boom"}})
        started = time.monotonic()
        refused = await said(teams, activity(teams.connector.url, "how many flights?"))
        assert time.monotonic() - started < 5.0
        assert UNCONFIRMED_REFUSED in refused and not fake_model.requests
        assert len(teams.connector.member_lookups) == 1  # one attempt, no retry
        again = await said(teams, activity(teams.connector.url, "how many flights?"))
        assert UNCONFIRMED_REFUSED in again and len(teams.connector.member_lookups) == 1  # kept: not asked
        lines = [r.getMessage() for r in caplog.records if "did not say who aad-ada is" in r.getMessage()]
        why = {
            "silent": "did not answer within 0.5 s",
            "500": "answered HTTP 500",
            "429": "answered HTTP 429",
        }
        assert len(lines) == 1 and why[failure] in lines[0], lines
        assert not [r for r in caplog.records if r.exc_info and r.name.startswith("datathread")]
        teams.connector.member_stall_s, teams.connector.member_refusal = 0.0, None
        await asyncio.sleep(1.6)  # the kept failure expires (UNPLACED_TTL_S)
        assert "336,776" in await said(teams, activity(teams.connector.url, "how many flights?"))


async def test_an_outsiders_clicks_and_reset_are_refused(settings, fake_model):
    """An answer's buttons and `reset` meet the rules a question does: Olga, of another tenant in a
    shared channel, saw an answer's SQL, voted, and started everyone's fresh conversation."""
    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}), text("336,776.")
    )
    async with serve_teams(settings) as teams:
        members(teams)
        url = teams.connector.url
        await teams.say("how many flights?")
        turn_id = next(
            a["data"]["turn_id"]
            for m in teams.connector.sent()
            for att in m.get("attachments") or []
            for a in (att.get("content") or {}).get("actions") or []
            if (a.get("data") or {}).get("turn_id")
        )
        for value in ({"datathread": "show_steps"}, {"datathread": "feedback", "value": "up"}):
            reply = await said(teams, as_(OLGA, activity(url, value={**value, "turn_id": turn_id})))
            assert EXTERNAL_REFUSED in reply and "SELECT" not in reply, reply
        record = await teams.state.threads.turn(turn_id, channel_id="19:general@thread.tacv2")
        assert not record["feedback"]
        chat = "19:group-chat-1@thread.v2"
        base = ("tenant-1", chat)
        before = await teams.state.threads.current_key("teams", base, idle_reset=False)
        reply = await said(teams, as_(OLGA, activity(url, "reset", conversation=chat)))
        assert EXTERNAL_REFUSED in reply and "fresh conversation" not in reply
        assert await teams.state.threads.current_key("teams", base, idle_reset=False) == before
        assert len(fake_model.requests) == 2  # Ada's question alone


async def run_a_schedule_of(teams, owner: str, channel: str = "19:general@thread.tacv2") -> str:
    """A schedule of `owner` in `channel` (a channel unless said), made in Teams, at its first run: its id."""
    clock = Clock(MONDAY_0859_BERLIN)
    book = teams.state.threads.schedules()
    schedule = new_schedule(
        cron="0 9 * * mon",
        tz="Europe/Berlin",
        surface="teams",
        channel=channel,
        question="delays by carrier",
        owner=owner,  # as a schedule made in Teams names its owner: their Entra object id
        team_id="tenant-1",
        service_url=teams.connector.url + "/",
        now=clock(),
    )
    await book.add(schedule)
    book.clock = clock
    clock.advance(minutes=1, seconds=2)
    await tick(book, teams.state.runner.submit, grace=timedelta(minutes=10))
    await teams.state.runner.drain(timeout=60)
    return schedule.id


async def test_a_schedule_whose_owner_is_a_guest_pauses_before_it_posts(settings, fake_model):
    async with serve_teams(settings.model_copy(update={"allow_guests": False})) as teams:
        members(teams)
        paused = await teams.state.threads.schedules().get(
            await run_a_schedule_of(teams, GRACE["aadObjectId"])
        )
        assert paused.paused and "is a guest" in paused.paused_reason, paused
        assert asked(teams, GRACE["aadObjectId"]) == 1
        shown = json.dumps(teams.connector.sent())
        assert "Scheduled report" not in shown and "I paused this schedule" in shown
        assert not fake_model.requests


async def test_a_schedule_whose_owner_teams_cannot_look_up_fails_and_one_removed_pauses(settings, fake_model):
    """Teams could not say: that run fails, counted, nothing posted. It says the bot was removed from
    the conversation: paused, as a run that found the channel gone is."""
    async with serve_teams(settings) as teams:
        members(teams)
        teams.connector.member_refusal = (500, {"error": {"code": "ServiceError", "message": "boom"}})
        book = teams.state.threads.schedules()
        failed = await book.get(await run_a_schedule_of(teams, GRACE["aadObjectId"]))
        assert (
            not failed.paused
            and failed.failures == 1
            and "couldn't confirm who its owner" in failed.last_outcome
        )
        assert asked(teams, GRACE["aadObjectId"]) == 1  # its retry did not ask again (kept a minute)
        assert "Scheduled report" not in json.dumps(teams.connector.sent())
        error = {"code": "BotNotInConversationRoster", "message": "The bot is not part of the roster"}
        teams.connector.member_refusal = (403, {"error": error})
        gone = await book.get(await run_a_schedule_of(teams, "1f2e3d4c-0000-4000-8000-00000000cccc"))
        assert gone.paused and "HTTP 403" in gone.paused_reason and gone.failures == 0, gone
        assert not fake_model.requests


LEFT = "0c1d2e3f-0000-4000-8000-00000000dead"  # an Entra object id Teams no longer knows: they left


@pytest.mark.parametrize(
    "update",
    [{}, {"allow_external_users": True, "admin_users": LEFT}],
    ids=["defaults", "both-allow-and-admin"],
)
async def test_a_schedule_whose_owner_has_left_the_conversation_pauses_before_it_posts(
    settings, fake_model, update
):
    """Teams says the owner is no longer a member (404 MemberNotFoundInConversation): they left the
    team, or the organization. Such a schedule failed each run as "couldn't confirm" until three
    paused it — and was not looked up at all while both settings allowed or the owner was an admin,
    so it kept posting the warehouse's data, as Slack's deactivated owners did. Now a chat's pauses at
    once, an admin's too, asked once. A channel's run fails without a pause: asked by the channel's own
    id (a schedule keeps no team id), Teams' roster is not proof that someone left."""
    fake_model.enqueue(text("Delays: AA 12%."))
    async with serve_teams(settings.model_copy(update=update)) as teams:
        book = teams.state.threads.schedules()
        paused = await book.get(await run_a_schedule_of(teams, LEFT, channel="19:group-chat-1@thread.v2"))
        assert paused.paused and "is no longer in this conversation" in paused.paused_reason, paused
        assert asked(teams, LEFT) == 1
        shown = json.dumps(teams.connector.sent())
        assert "Delays: AA 12%" not in shown and "I paused this schedule" in shown
        failed = await book.get(await run_a_schedule_of(teams, LEFT))
        assert not failed.paused and failed.failures == 1, failed
        assert "did not find its owner" in failed.last_outcome, failed
        assert "Delays: AA 12%" not in json.dumps(teams.connector.sent())
        assert not fake_model.requests
