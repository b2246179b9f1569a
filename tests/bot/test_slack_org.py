"""Slack Connect and Enterprise Grid through the real app: who is asking, and which thread it is.

Envelopes shaped as Slack sends them in a shared channel (bolt-js#935, Bolt's own
`extract_actor_team_id` tests): the outer `team_id` is the workspace that created the channel, the
event's `team` / `user_team` the sender's, `authorizations[0]` the installation it was delivered to. The
fake Slack Web API answers `users.info` with each person's own team, organization and guest flags."""

from __future__ import annotations

import json
import logging

import pytest

from bot.slack_blocks import ACTION_SHOW_SQL
from tests.bot.slack_harness import mention, message, serve, sign
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID, FakeSlackAPI

OURS = TEAM_ID  # the workspace the app is installed in (SLACK_BOT_TOKEN's)
ORG = "E0ACME"  # its Enterprise Grid organization
SIBLING = "T0ENG"  # another workspace of the same organization
PARTNER = "T0GLOBEX"  # another company, met in Slack Connect channels
IDENTITY = {"team_id": OURS, "enterprise_id": ORG, "user_id": BOT_USER_ID, "bot_id": "BBOT"}
PEOPLE = {  # user → users.info's team, organization and guest flag
    "U0001": (OURS, ORG, False),
    "U0GINA": (PARTNER, "", False),
    "W0BOB": (SIBLING, ORG, False),
    "U0GUEST": (OURS, ORG, True),
    "U0MOVED": (PARTNER, "", False),  # the payload names our workspace; Slack says otherwise
}
REFUSED = "you're here from another organization"
UNCONFIRMED = "I couldn't confirm that you're part of the organization"


class OrgSlack(FakeSlackAPI):
    """The fake Slack Web API, whose `users.info` says which team and organization each person is in."""

    def respond(self, method: str, args: dict) -> dict:
        said = super().respond(method, args)
        if method == "auth.test" and said.get("ok"):  # a workspace of a Grid organization says which
            said["enterprise_id"] = ORG
        if method == "users.info" and said.get("ok") and args.get("user") in PEOPLE:
            team, org, guest = PEOPLE[args["user"]]
            said["user"].update(team_id=team, is_restricted=guest)
            if org:
                said["user"]["enterprise_user"] = {"id": args["user"], "enterprise_id": org, "teams": [team]}
        return said


@pytest.fixture
def org_api():
    fake = OrgSlack().start()
    yield fake
    fake.stop()


def from_(event: dict, user: str, team: str) -> dict:
    """`event` sent by `user` of `team` (a shared channel's event names the sender's own workspace)."""
    return {**event, "user": user, "team": team, "user_team": team}


def show_sql_click(user: str, team: str) -> dict:
    """The form Slack posts when `user` of workspace `team` clicks Show SQL & code under an answer in
    C0001, a channel of ours (the payload's `team` is ours; `user.team_id` is the clicker's own)."""
    payload = {
        "type": "block_actions",
        "team": {"id": OURS},
        "user": {"id": user, "team_id": team},
        "api_app_id": "A0001",
        "container": {"type": "message", "channel_id": "C0001", "message_ts": "9.9"},
        "channel": {"id": "C0001"},
        "actions": [{"action_id": ACTION_SHOW_SQL, "value": "turn1", "type": "button", "block_id": "b"}],
    }
    return {"payload": json.dumps(payload)}


async def post(slack, event: dict, *, created_by: str = OURS, delivered: dict | None = None):
    """An Events API envelope for `event` in a channel `created_by` that workspace (the outer team_id)."""
    auth = {"team_id": OURS, "enterprise_id": ORG, "user_id": BOT_USER_ID, "is_bot": True}
    body = {
        "token": "legacy",
        "team_id": created_by,
        "enterprise_id": ORG,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": f"Ev{event['ts'].replace('.', '')}{event['user']}",
        "event_time": 1700000000,
        "authorizations": [{**auth, **(delivered or {})}],
        "is_ext_shared_channel": created_by == PARTNER or event.get("user_team") == PARTNER,
        "event": event,
    }
    raw = json.dumps(body)
    headers = {"content-type": "application/json", **sign(raw)}
    response = await slack.http.post("/slack/events", content=raw, headers=headers)
    assert response.status_code == 200
    await slack.drain()


def told(api: FakeSlackAPI, user: str) -> str:
    """What was said to `user` alone (ephemeral messages, a response_url's), in JSON."""
    return json.dumps([c.args for c in api.calls if c.args.get("user") == user] + api.shown())


async def test_the_allowlist_judges_the_askers_workspace_not_the_channels(settings, fake_model, org_api):
    """DATATHREAD_ALLOWED_TEAMS=ours: a partner's person in a Connect channel we created got a full
    answer from our warehouse, and our own person in a channel the partner created was refused."""
    fake_model.enqueue(text("Top carriers: UA, B6, EV."))
    allowed = settings.model_copy(update={"allowed_teams": OURS})
    async with serve(allowed, org_api) as slack:
        await post(slack, from_(mention("top carriers?", ts="1700000001.000100"), "U0GINA", PARTNER))
        assert not fake_model.requests  # refused before the model
        assert "UA, B6, EV" not in json.dumps(org_api.shown())
        await post(
            slack,
            from_(mention("top carriers?", ts="1700000002.000100", channel="C0THEIRS"), "U0001", OURS),
            created_by=PARTNER,
        )
        assert len(fake_model.requests) == 1
        assert any("UA, B6, EV" in shown for shown in org_api.shown())
    # the answer's stream names its recipient's own workspace (chat.startStream's recipient_team_id)
    assert {c.args["recipient_team_id"] for c in org_api.of("chat.startStream")} == {OURS}


@pytest.mark.parametrize(
    ("update", "answered"),
    [
        ({}, False),  # the default: people of other organizations are refused, and told why
        ({"allow_external_users": True}, True),
        ({"allowed_teams": f"{OURS},{PARTNER}"}, True),  # their workspace allowed by name
        ({"allowed_users": "U0GINA"}, True),  # they are, by name
    ],
)
async def test_people_of_another_organization_are_refused_unless_an_admin_allows_them(
    settings, fake_model, org_api, update, answered
):
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings.model_copy(update=update), org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0GINA", PARTNER))
    assert bool(fake_model.requests) is answered
    if not answered:
        [refusal] = [c for c in org_api.of("chat.postEphemeral") if REFUSED in json.dumps(c.args)]
        assert refusal.args["user"] == "U0GINA" and "An admin can allow" in json.dumps(refusal.args)


@pytest.mark.parametrize(
    ("user", "event_team"),
    [("U0MOVED", OURS), ("U0GINA", None)],
    ids=["users.info-says-elsewhere", "event-without-the-senders-team"],
)
async def test_what_users_info_says_decides_whether_someone_is_ours(
    settings, fake_model, org_api, user, event_team
):
    """Someone Slack's `users.info` places in another organization is judged by that, whatever the
    payload said — it was looked up, and ignored when the payload named our workspace. And an event
    that does not name the sender's workspace (no `user_team`, no `team`) was taken as ours by its outer
    `team_id` (the channel's creator): it is looked up now. Our own colleague is answered either way."""
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    event = from_(mention("how many flights?", ts="1700000001.000100"), user, event_team or OURS)
    if event_team is None:
        del event["team"], event["user_team"]
    async with serve(settings, org_api, identity=IDENTITY) as slack:
        await post(slack, event)
        assert not fake_model.requests
        assert REFUSED in told(org_api, user)
        colleague = {**event, "user": "U0001", "ts": "1700000002.000100", "event_ts": "1700000002.000100"}
        await post(slack, colleague)
    assert len(fake_model.requests) == 1


async def test_a_colleague_of_another_workspace_of_the_organization_is_answered(
    settings, fake_model, org_api
):
    """A multi-workspace channel of the Grid: a colleague from a sibling workspace is not a stranger —
    `users.info` says they are of the same organization."""
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "W0BOB", SIBLING))
    assert len(fake_model.requests) == 1
    assert REFUSED not in told(org_api, "W0BOB")


async def test_an_organization_in_the_workspace_allowlist_answers_its_people_of_every_workspace(
    settings, fake_model, org_api
):
    """Judged by the asker's own workspace, DATATHREAD_ALLOWED_TEAMS=ours refuses a colleague of a sibling
    workspace of the Grid (the channel's workspace used to be checked), and an organization id (E…) in
    it matched nobody. The organization listed now answers its people of every workspace — by what
    `users.info` said of them, or for someone of our own workspace by the installation's organization —
    and no one else."""
    fake_model.enqueue(text("There were 336,776 flights in 2013."), text("JFK: 111,279."))
    by_org = settings.model_copy(update={"allowed_teams": ORG})
    async with serve(by_org, org_api, identity=IDENTITY) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "W0BOB", SIBLING))
        await post(slack, from_(mention("and JFK?", ts="1700000002.000100"), "U0001", OURS))
        await post(slack, from_(mention("and LGA?", ts="1700000003.000100"), "U0GINA", PARTNER))
        # a click asks no `users.info` of a colleague: the installation's organization is theirs
        await slack.form(show_sql_click("U0001", OURS))
        await slack.drain()
    assert len(fake_model.requests) == 2
    assert REFUSED in told(org_api, "U0GINA")
    assert "isn't enabled" not in told(org_api, "U0001") and "isn't enabled" not in told(org_api, "W0BOB")


@pytest.mark.parametrize("failure", ["error", "silent"])
async def test_a_stranger_slack_cannot_vouch_for_is_refused_and_told_why(
    settings, fake_model, org_api, monkeypatch, failure
):
    """`users.info` fails for a person the event places in another workspace: not let in (the answer
    would come from our warehouse); they hear why. One of our own workspace is answered all the same."""
    from bot import slack_client

    monkeypatch.setattr(slack_client, "PROGRESS_TIMEOUT_S", 0.5)
    if failure == "error":
        org_api.fail_methods["users.info"] = "ratelimited"
    else:
        org_api.silent.add("users.info")
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0GINA", PARTNER))
        assert not fake_model.requests
        assert UNCONFIRMED in told(org_api, "U0GINA")
        await post(slack, from_(mention("how many flights?", ts="1700000002.000100"), "U0001", OURS))
    assert len(fake_model.requests) == 1


async def test_without_users_read_the_person_refused_and_the_log_says_which_scope_to_add(
    settings, fake_model, org_api, caplog
):
    """The app installed without `users:read`: everyone only Slack can place is refused "couldn't
    confirm", and the log said, at INFO, that the default time zone applies. Now an ERROR names the
    scope to add (as a post refused for a scope does: bot/slack_revoked.py)."""
    org_api.scopes = ",".join(s for s in org_api.scopes.split(",") if s != "users:read")
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        async with serve(settings, org_api) as slack:
            await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0GINA", PARTNER))
    assert not fake_model.requests and UNCONFIRMED in told(org_api, "U0GINA")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("lacks the `users:read` scope" in e and "U0GINA" in e for e in errors), errors


@pytest.mark.parametrize(("allow_guests", "answered"), [(True, True), (False, False)])
async def test_guests_are_answered_unless_an_admin_refuses_them(
    settings, fake_model, org_api, allow_guests, answered
):
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings.model_copy(update={"allow_guests": allow_guests}), org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0GUEST", OURS))
    assert bool(fake_model.requests) is answered
    assert ("I don't answer guests" in told(org_api, "U0GUEST")) is not answered


async def test_with_guests_refused_a_failed_lookup_is_not_let_in_by_the_workspace_allowlist(
    settings, fake_model, org_api
):
    """Guests refused, and `users.info` failing: whether someone of our own workspace is a guest is not
    known. DATATHREAD_ALLOWED_TEAMS listing our workspace let them in all the same (it lets in people of
    the workspaces it lists, not guests); now they hear that it could not be confirmed, unless they are
    allowed by name."""
    org_api.fail_methods["users.info"] = "ratelimited"
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    strict = settings.model_copy(update={"allow_guests": False, "allowed_teams": OURS})
    async with serve(strict, org_api, identity=IDENTITY) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0GUEST", OURS))
        assert not fake_model.requests
        assert "couldn't confirm that you're a member of this workspace" in told(org_api, "U0GUEST")
    named = strict.model_copy(update={"allowed_users": "U0GUEST"})
    async with serve(named, org_api, identity=IDENTITY) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000002.000100"), "U0GUEST", OURS))
    assert len(fake_model.requests) == 1


@pytest.mark.parametrize("checked_at_start", [True, False], ids=["serve", "modal"])
async def test_a_partners_slash_command_and_clicks_are_judged_by_their_own_workspace(
    settings, fake_model, org_api, checked_at_start
):
    """A slash command's `team_id` and a click's `user.team_id` name the person's own workspace; the
    installation's is what `auth.test` said at start — or, where nothing was checked at start (a Modal
    deployment), what it says when the job asks: the request's own team stood in for the install's, so
    the partner's command was taken for a colleague's and answered."""
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, org_api, identity=IDENTITY if checked_at_start else None) as slack:
        fields = {"command": "/ask", "text": "how many flights?", "team_id": PARTNER, "channel_id": "C0001"}
        fields.update(user_id="U0GINA", response_url=org_api.url.removesuffix("api/") + "response/1")
        await slack.form(fields)
        await slack.drain()
        assert not fake_model.requests
        await slack.form(show_sql_click("U0GINA", PARTNER))
        await slack.drain()
    # the command's, through its response_url (a call too), and the click's
    refusals = [c for c in org_api.calls if REFUSED in json.dumps(c.args)]
    assert [c.method.startswith("/response/") for c in refusals] == [True, False], org_api.calls


async def test_with_no_identity_from_start_and_auth_test_failing_nobody_is_taken_for_a_colleague(
    settings, fake_model, org_api
):
    """Nothing checked at start, and Slack will not say whose installation this is: nobody can be placed,
    so even a person the request calls ours is told that, not answered from the warehouse; allowing
    outsiders lets them in."""
    org_api.fail_methods["auth.test"] = "ratelimited"
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    async with serve(settings, org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000001.000100"), "U0001", OURS))
    assert not fake_model.requests and UNCONFIRMED in told(org_api, "U0001")
    async with serve(settings.model_copy(update={"allow_external_users": True}), org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000002.000100"), "U0001", OURS))
    assert len(fake_model.requests) == 1
    # outsiders allowed but guests refused: someone nobody could place may be a guest, and is not let in
    no_guests = settings.model_copy(update={"allow_external_users": True, "allow_guests": False})
    async with serve(no_guests, org_api) as slack:
        await post(slack, from_(mention("how many flights?", ts="1700000003.000100"), "U0GUEST", OURS))
    assert len(fake_model.requests) == 1 and "rather than a guest" in told(org_api, "U0GUEST")


async def test_an_event_for_another_installation_is_named_in_one_error_per_workspace(
    settings, fake_model, org_api, caplog
):
    """The app installed per workspace: Eng's events reach this Request URL for Eng's bot user, whose
    channels SLACK_BOT_TOKEN cannot see. The log said only "channel_not_found"; now one ERROR names
    both installations and what to do — once per workspace, not per event."""
    other = {"team_id": SIBLING, "enterprise_id": ORG, "user_id": "UBOTENG"}
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        async with serve(settings, org_api, identity=IDENTITY) as slack:
            for ts in ("1700000001.000100", "1700000002.000100"):
                event = from_(message("hi", ts=ts, channel="D0ENGBOB", channel_type="im"), "W0BOB", SIBLING)
                await post(slack, event, created_by=SIBLING, delivered=other)
            await post(slack, from_(mention("help", ts="1700000003.000100"), "U0001", OURS))
    [said] = [r for r in caplog.records if "another installation" in r.getMessage()]
    assert said.levelno == logging.ERROR
    line = said.getMessage()
    assert all(part in line for part in (SIBLING, "UBOTENG", OURS, BOT_USER_ID, "org-wide install")), line


async def test_an_org_wide_installation_is_not_taken_for_another_installation(
    settings, fake_model, org_api, caplog
):
    """Installed org-wide, as that ERROR recommends: each event's `authorizations[0]` names the workspace
    it happened in (`is_enterprise_install: true`), while `auth.test` named another: every workspace but
    one was reported as "another installation of this app", at ERROR. One installation is one bot user."""
    fake_model.enqueue(text("There were 336,776 flights in 2013."))
    org_wide = {
        "team_id": SIBLING,
        "enterprise_id": ORG,
        "user_id": BOT_USER_ID,
        "is_enterprise_install": True,
    }
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        async with serve(settings, org_api, identity=IDENTITY) as slack:
            event = from_(
                mention("how many flights?", ts="1700000001.000100", channel="C0ENG"), "W0BOB", SIBLING
            )
            await post(slack, event, created_by=SIBLING, delivered=org_wide)
    assert not [r for r in caplog.records if "another installation" in r.getMessage()]
    assert len(fake_model.requests) == 1  # and Bob, a colleague of the organization, is answered


@pytest.mark.parametrize(
    ("delivered", "other"),
    [
        (
            {
                "team_id": "T0ENG",
                "enterprise_id": "E0ACME",
                "user_id": "W0BOT",
                "is_enterprise_install": True,
            },
            False,
        ),
        (
            {"team_id": "T0ENG", "enterprise_id": "E0ACME", "is_enterprise_install": True},
            False,
        ),  # no bot user said
        (
            {"team_id": "T0ENG", "enterprise_id": "E0ACME", "user_id": "U0BOTENG"},
            True,
        ),  # per-workspace install
        (
            {"team_id": "T0HOME", "enterprise_id": "E0ACME", "user_id": "U0OTHER"},
            True,
        ),  # another bot user: another installation
        ({"team_id": "T0ENG", "enterprise_id": "E0ACME"}, True),  # nothing else to go by: another workspace
        (
            {"team_id": "T0ENG", "enterprise_id": "E0OTHER", "is_enterprise_install": True},
            True,
        ),  # another org's
        ({"team_id": "T0HOME", "enterprise_id": "E0ACME", "user_id": "W0BOT"}, False),
    ],
)
def test_which_events_are_for_another_installation(caplog, delivered, other):
    from bot.slack_identity import OtherInstalls

    installs = OtherInstalls({"team_id": "T0HOME", "enterprise_id": "E0ACME", "user_id": "W0BOT"})
    with caplog.at_level(logging.INFO, logger="datathread.slack"):
        installs.check({"authorizations": [{**delivered, "is_bot": True}]})
    assert bool([r for r in caplog.records if "another installation" in r.getMessage()]) is other


def asked(request: dict) -> list[str]:
    """The questions a request to the model carried, its history's and the new one: each question
    message's first text (the time it was asked follows it)."""
    said = [
        m["content"] for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)
    ]
    return [
        texts[0]
        for texts in ([c["text"] for c in content if c["type"] == "text"] for content in said)
        if texts
    ]


async def ask(slack, api: FakeSlackAPI, question: str, *, user: str, team: str, channel: str) -> str:
    """`/ask question` by `user` of `team`; the ts of the question it posts (its thread's root)."""
    fields = {"command": "/ask", "text": question, "team_id": team, "channel_id": channel, "user_id": user}
    fields["response_url"] = api.url.removesuffix("api/") + f"response/{user}"
    await slack.form(fields)
    await slack.drain()
    [root] = [m for m in api.posted[channel] if question in m["text"]]
    return root["ts"]


async def test_an_ask_in_a_channel_another_workspace_created_continues_in_its_thread(
    settings, fake_model, org_api
):
    """Bob, of a sibling workspace, runs /ask in a channel our workspace created: the command names his
    workspace, the events in its thread the channel's creator. His reply there without a mention was
    ignored, and a mention started afresh, without the question it followed."""
    fake_model.enqueue(text("336,776 flights."), text("JFK: 111,279."), text("LGA: 104,662."))
    async with serve(settings, org_api, identity=IDENTITY) as slack:
        root = await ask(slack, org_api, "how many flights?", user="W0BOB", team=SIBLING, channel="C0ORG")
        reply = message("only JFK", ts="1800000001.000100", channel="C0ORG", thread_ts=root)
        await post(slack, from_(reply, "W0BOB", SIBLING))  # the outer team_id: the channel's creator
        assert len(fake_model.requests) == 2, "the reply without a mention was ignored"
        again = mention("and LGA?", ts="1800000002.000100", channel="C0ORG", thread_ts=root)
        await post(slack, from_(again, "W0BOB", SIBLING))
    assert [asked(r)[:-1] for r in fake_model.requests] == [
        [],
        ["how many flights?"],
        ["how many flights?", "only JFK"],
    ]


async def test_threads_of_one_workspace_keep_the_sessions_they_had(settings, fake_model, org_api):
    """The upgrade: in a channel of one workspace a thread is keyed as before — (team, channel, thread
    ts) — so a conversation started before it continues after it, /ask and mention alike."""
    fake_model.enqueue(*(text(f"answer {i}") for i in range(4)))
    async with serve(settings, org_api) as slack:
        threads = slack.state.threads
        before = "1700000050.000100"  # a thread from before the upgrade: its /ask noted nothing
        await threads.joined("slack", (OURS, "C0001", before), "U0001")
        await post(slack, from_(message("more?", ts="1800000001.000100", thread_ts=before), "U0001", OURS))
        assert len(fake_model.requests) == 1
        root = await ask(slack, org_api, "how many flights?", user="U0001", team=OURS, channel="C0001")
        await post(slack, from_(message("by month", ts="1800000002.000100", thread_ts=root), "U0001", OURS))
        assert await threads.is_known("slack", (OURS, "C0001", root))  # the key the old code used
        await post(slack, from_(mention("a question", ts="1800000003.000100"), "U0001", OURS))
        assert await threads.is_known("slack", (OURS, "C0001", "1800000003.000100"))
    assert asked(fake_model.requests[2])[:-1] == ["how many flights?"]
