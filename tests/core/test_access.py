"""Access control: allowlists, admins, per-channel datasets (table-driven), then denials and rate-limit
refusals through `Analyst.handle` for Slack- and Teams-shaped messages."""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest

from core.access import DEACTIVATED, EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED, AccessPolicy
from core.config_types import parse_channel_datasets
from core.events import IncomingMessage
from core.policy import TableAllowlist
from tests.fakes.anthropic_api import text, tool


def msg(user="U1", channel="C1", team="T1", surface="slack", text_="hi", direct=False) -> IncomingMessage:
    return IncomingMessage(
        is_direct=direct,
        text=text_,
        surface=surface,
        thread_key=(team, channel, "1.0"),
        user_id=user,
        channel_id=channel,
        team_id=team,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", {}),
        ("C1=finance.*", {"C1": ("finance.*",)}),
        ("C1=finance.*|shared.*;C2=ops.*", {"C1": ("finance.*", "shared.*"), "C2": ("ops.*",)}),
        (" C1 = finance.* | ; C2=b.c;", {"C1": ("finance.*",), "C2": ("b.c",)}),
    ],
)
def test_parse_channel_datasets(value, expected):
    assert parse_channel_datasets(value) == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("garbage;C3=a.b", "'garbage' is not CHANNEL=patterns"),  # was dropped: C3 alone was narrowed
        ("=a.b", "'=a.b' is not CHANNEL=patterns"),
        ("C1=finance.*;C2=", "gives channel C2 no datasets"),  # was an empty allowlist: every dataset
        ("C1= | ", "gives channel C1 no datasets"),
        ("C1=a.b;C1=c.d", "names channel C1 twice"),  # the second silently replaced the first
    ],
)
def test_a_channel_datasets_value_that_would_widen_or_drop_access_is_refused(value, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_channel_datasets(value)


POLICY = AccessPolicy(
    teams=frozenset({"T1"}),
    channels=frozenset({"C1"}),
    users=frozenset({"U1", "U2"}),
    admins=frozenset({"ADMIN"}),
)


@pytest.mark.parametrize(
    ("message", "denied_with"),
    [
        (msg(), None),
        (msg(user="U2"), None),
        (msg(team="T9"), "isn't enabled for this workspace"),
        (msg(channel="C9"), "isn't enabled in this channel"),
        (msg(channel="D123", direct=True), None),  # direct messages are not channel-gated
        (msg(channel="a:1personal", surface="teams", direct=True), None),  # Teams personal chat too
        (msg(channel="D123"), "isn't enabled in this channel"),  # an id alone proves nothing
        (msg(user="U9"), "not on the list of people"),
        (msg(user="ADMIN", team="T9", channel="C9"), None),  # admins pass every allowlist
        (msg(user="U9", surface="terminal"), None),  # the local terminal is the operator
        # Teams has a tenant and chats: it said "this workspace", and "this channel" to a group chat
        (msg(user="U1", surface="teams", team="T9"), "isn't enabled for your organization's Teams"),
        (msg(user="U1", surface="teams", channel="19:chat"), "isn't enabled in this channel or chat"),
    ],
)
def test_access_check(message, denied_with):
    denial = POLICY.check(message)
    if denied_with is None:
        assert denial is None
    else:
        assert denial and denied_with in denial and denial.endswith(".")


def outsider(kind: str, user="U9", team="T9") -> IncomingMessage:
    return dataclasses.replace(msg(user=user, team=team), outsider=kind)


@pytest.mark.parametrize(
    ("policy", "message", "denied_with"),
    [
        (AccessPolicy(), outsider(EXTERNAL), "you're here from another organization"),  # refused by default
        (AccessPolicy(), outsider(UNCONFIRMED), "couldn't confirm"),  # as a stranger would be
        (AccessPolicy(), outsider(GUEST), None),  # guests are answered by default
        (AccessPolicy(guests=False), outsider(GUEST), "I don't answer guests"),
        (AccessPolicy(guests=False, users=frozenset({"U9"})), outsider(GUEST), None),  # allowed by name
        (AccessPolicy(external_users=True), outsider(EXTERNAL), None),
        (AccessPolicy(external_users=True), outsider(UNCONFIRMED), None),
        (AccessPolicy(teams=frozenset({"T1", "T9"})), outsider(EXTERNAL), None),  # their workspace, by name
        (AccessPolicy(users=frozenset({"U9"})), outsider(EXTERNAL), None),  # they, by name
        (AccessPolicy(admins=frozenset({"U9"})), outsider(EXTERNAL), None),  # admins pass every rule
        (AccessPolicy(), dataclasses.replace(outsider(EXTERNAL), surface="terminal"), None),
        # at home, guests refused, and not known to be no guest: only allowing guests or them lets them in
        (AccessPolicy(guests=False), outsider(MAYBE_GUEST), "couldn't confirm that you're a member"),
        (AccessPolicy(guests=False, teams=frozenset({"T9"})), outsider(MAYBE_GUEST), "couldn't confirm"),
        (AccessPolicy(guests=False, external_users=True), outsider(MAYBE_GUEST), "couldn't confirm"),
        (AccessPolicy(guests=False, users=frozenset({"U9"})), outsider(MAYBE_GUEST), None),
        (AccessPolicy(), outsider(MAYBE_GUEST), None),
        # someone who has left: no setting lets them in, not even being an admin or named
        (AccessPolicy(), outsider(DEACTIVATED), "deactivated"),
        (AccessPolicy(admins=frozenset({"U9"})), outsider(DEACTIVATED), "deactivated"),
        (AccessPolicy(users=frozenset({"U9"}), external_users=True), outsider(DEACTIVATED), "deactivated"),
    ],
)
def test_outsiders_are_refused_unless_allowed(policy, message, denied_with):
    denial = policy.check(message)
    assert denial == denied_with if denied_with is None else denial and denied_with in denial


@pytest.mark.parametrize(
    ("surface", "kind", "said"),
    [
        ("slack", GUEST, "I don't answer guests of this workspace"),
        ("teams", GUEST, "I don't answer guests of this organization"),
        ("slack", MAYBE_GUEST, "you're a member of this workspace rather than a guest"),
        ("teams", MAYBE_GUEST, "you're a member of this organization rather than a guest"),
    ],
)
def test_a_guest_is_told_in_their_surfaces_words(surface, kind, said):
    """Teams has no workspaces: its guests are a tenant's, and read "guests of this workspace"."""
    message = dataclasses.replace(outsider(kind), surface=surface)
    denial = AccessPolicy(guests=False).check(message)
    assert denial and said in denial and (surface == "slack") == ("workspace" in denial)


@pytest.mark.parametrize(
    ("enterprise", "outsider_", "denied_with"),
    [
        ("E1", "", None),  # a colleague of any workspace of the listed organization
        ("E1", EXTERNAL, None),  # another organization's people, their organization listed
        ("", "", "isn't enabled for this workspace"),  # not known to be of it
        ("E2", "", "isn't enabled for this workspace"),
        ("E2", EXTERNAL, "you're here from another organization"),
    ],
)
def test_an_organization_in_the_workspace_allowlist_lets_its_people_in(enterprise, outsider_, denied_with):
    """DATATHREAD_ALLOWED_TEAMS may name an Enterprise Grid organization (E…), matched against the asker's."""
    message = dataclasses.replace(msg(team="T9"), enterprise_id=enterprise, outsider=outsider_)
    denial = AccessPolicy(teams=frozenset({"T1", "E1"})).check(message)
    assert denial == denied_with if denied_with is None else denial and denied_with in denial


def test_outsider_settings_reach_the_policy(settings):
    policy = AccessPolicy.from_settings(settings.model_copy(update={"allow_external_users": True}))
    assert (policy.external_users, policy.guests) == (True, True)
    assert not AccessPolicy.from_settings(settings.model_copy(update={"allow_guests": False})).guests


def test_empty_policy_allows_everyone():
    assert AccessPolicy().check(msg(user="anyone", channel="C42", team="T42")) is None


@pytest.mark.parametrize(
    ("channel", "allowed", "refused"),
    [
        ("CFIN", ["finance.ledger", "shared.fx"], ["ops.tickets", "hr.salaries"]),
        ("COPS", ["ops.tickets"], ["finance.ledger"]),
        ("COTHER", ["main.flights"], ["finance.ledger"]),
    ],
)
def test_per_channel_datasets(channel, allowed, refused):
    policy = AccessPolicy(
        datasets=TableAllowlist(patterns=("main.*",)),
        channel_datasets=parse_channel_datasets("CFIN=finance|shared.*;COPS=ops.*"),
    )
    allowlist = policy.allowlist_for(msg(channel=channel))
    assert all(allowlist.allows(t) for t in allowed)
    assert not any(allowlist.allows(t) for t in refused)


def test_from_settings(settings):
    s = settings.model_copy(
        update={
            "allowed_channels": "C1, C2",
            "admin_users": "UA",
            "channel_datasets": "C1=finance.*",
        }
    )
    policy = AccessPolicy.from_settings(s)
    assert policy.channels == {"C1", "C2"} and policy.is_admin("UA") and not policy.is_admin("U1")
    assert policy.channel_datasets == {"C1": ("finance.*",)}


HOME = "8a1d2c3b-0000-4000-8000-00000000aaaa"
OTHER = "77777777-0000-4000-8000-00000000bbbb"


@pytest.mark.parametrize(
    ("app_type", "tenant", "allowed_teams", "answered", "refused"),
    [
        # a bot of one tenant (the default type) answers its own tenant only; Teams sends it lowercase
        ("SingleTenant", HOME, "", [HOME], [OTHER, ""]),
        ("SingleTenant", HOME.upper(), "", [HOME], [OTHER]),
        ("UserAssignedMSI", HOME, "", [HOME], [OTHER]),
        # DATATHREAD_ALLOWED_TEAMS, when set, names the tenants answered instead
        ("SingleTenant", HOME, f"{OTHER},T0123", [OTHER], [HOME]),
        # MultiTenant: any tenant that installs the app, as before, unless the setting limits it
        ("MultiTenant", HOME, "", [HOME, OTHER], []),
        ("MultiTenant", None, OTHER, [OTHER], [HOME]),
        # a domain cannot be compared with the conversation's tenant GUID: not limited (doctor warns)
        ("SingleTenant", "contoso.onmicrosoft.com", "", [HOME, OTHER], []),
    ],
)
def test_a_bot_of_one_tenant_answers_its_tenant_unless_told_otherwise(
    settings, app_type, tenant, allowed_teams, answered, refused
):
    configured = settings.model_copy(
        update={
            "microsoft_app_id": "11111111-2222-3333-4444-555555555555",
            "microsoft_app_type": app_type,
            "microsoft_app_tenant_id": tenant,
            "allowed_teams": allowed_teams,
        }
    )
    policy = AccessPolicy.from_settings(configured)
    for team in answered:
        assert policy.check(msg(surface="teams", team=team)) is None, team
    for team in refused:
        denial = policy.check(msg(surface="teams", team=team))
        assert (
            denial == "datathread isn't enabled for your organization's Teams. Ask your admin to add it."
        ), team
    if not allowed_teams:  # a Slack workspace is not a tenant: Slack stays open to every workspace
        assert policy.check(msg(surface="slack", team="T0999")) is None


@pytest.mark.parametrize(
    ("warehouse", "entry", "allowed", "refused"),
    [
        ("duckdb", "main.airlines", ["main.airlines"], ["main.flights", "main.airlines_old"]),  # a table
        ("duckdb", "main", ["main.airlines", "main.flights"], ["other.flights"]),  # a schema: all of it
        ("duckdb", "main.air*", ["main.airlines", "main.airports"], ["main.flights"]),
        ("duckdb", "airlines", ["main.airlines", "airlines.carriers"], ["main.flights", "main.airlines_old"]),
        ("duckdb", "air*", ["main.airlines", "main.airports"], ["main.flights", "other.flights"]),
        ("duckdb", "MAIN", ["main.airlines", "main.flights"], ["other.flights"]),
        ("bigquery", "proj.fin", ["proj.fin.ledger", "proj.fin.fx"], ["proj.ops.tickets", "proj.fin"]),
        ("bigquery", "proj.fin.ledger", ["proj.fin.ledger"], ["proj.fin.fx"]),  # a table
        ("bigquery", "proj", ["proj.fin.ledger"], ["other.fin.ledger"]),  # a project: all of it
    ],
)
def test_a_channel_entry_that_names_a_table_allows_that_table(settings, warehouse, entry, allowed, refused):
    """DuckDB's `C3=main.airlines`, the obvious way to name one table, became `main.airlines.*`, which
    matches nothing: the channel silently saw no table. An entry as long as the warehouse's full table
    names is that table; a shorter one is every table under it. DuckDB's `C3=airlines` and `C3=air*`
    (no schema, as its SQL names tables) are also tables of `main`: they matched nothing either."""
    s = settings.model_copy(update={"warehouse": warehouse, "channel_datasets": f"C3={entry}"})
    allowlist = AccessPolicy.from_settings(s).allowlist_for(msg(channel="C3"))
    assert [t for t in allowed if allowlist.allows(t)] == allowed
    assert [t for t in refused if allowlist.allows(t)] == []


async def test_a_channel_given_one_duckdb_table_can_list_and_query_it_and_nothing_else(
    settings, fake_model, recorder
):
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"channel_datasets": "C3=main.airlines"}))
    fake_model.enqueue(
        tool("list_tables", {}),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM airlines"}),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}),
        text("There are 16 airlines."),
    )
    try:
        outcome = await analyst.handle(msg(channel="C3", text_="how many airlines?"), recorder)
    finally:
        await analyst.close()
    assert outcome.ok, outcome.error
    listed, counted, refused = (fake_model.last_tool_results(i)[0] for i in (1, 2, 3))
    assert listed["content"].startswith("- airlines (16 rows)") and "flights" not in listed["content"]
    assert [s.ok for s in outcome.steps] == [True, True, False] and "Table `main.flights`" in refused[
        "content"
    ]
    assert "16" in counted["content"]


async def test_denials_and_rate_limits_through_the_core(analyst, fake_model, recorder, settings, caplog):
    """Slack and Teams messages: a denial is a short sentence, a rate limit says when to come back,
    an admin is never limited, and none of them reaches the model. A refusal is expected, not a fault:
    it said "set by DATATHREAD_USER_TURNS_PER_HOUR" (which nobody in Slack can act on) and carried an
    error id that made it read like a failure; the operator's log line names the setting instead."""
    caplog.set_level(logging.INFO, logger="datathread.turn")
    analyst.access = AccessPolicy(channels=frozenset({"C1"}), admins=frozenset({"BOSS"}))
    analyst.settings = settings.model_copy(update={"user_turns_per_hour": 2, "channel_turns_per_hour": 3})

    for surface in ("slack", "teams"):
        denied = await analyst.handle(msg(channel="C9", surface=surface), recorder)
        assert not denied.ok and "isn't enabled in this channel" in denied.error
    assert fake_model.requests == []
    failed = recorder.of("failed")
    assert len(failed) == 2 and all(not f.error_id and f.retry_after_s is None for f in failed)

    fake_model.enqueue(text("one"), text("two"))
    assert (await analyst.handle(msg(text_="q1"), recorder)).ok
    assert (await analyst.handle(msg(text_="q2"), recorder)).ok
    limited = await analyst.handle(msg(text_="q3"), recorder)
    assert not limited.ok and len(fake_model.requests) == 2
    assert re.fullmatch(
        r"You've reached the limit of questions for now: 2 an hour per person, set by an admin\. "
        r"Try again in (\d+ minutes|\d+ seconds)\.",
        limited.error,
    ), limited.error
    assert not limited.error_id and not recorder.of("failed")[-1].error_id
    assert "DATATHREAD_USER_TURNS_PER_HOUR=2" in caplog.text  # for whoever can change it
    wait = recorder.of("failed")[-1].retry_after_s
    assert wait and 3000 < wait <= 3600

    # another user in the same channel still has one turn left of the channel's three
    fake_model.enqueue(text("three"))
    assert (await analyst.handle(msg(user="U2", text_="q4"), recorder)).ok
    channel_full = await analyst.handle(msg(user="U3", text_="q5"), recorder)
    assert channel_full.error.startswith(
        "This channel has reached the limit of questions for now: 3 an hour, set by an admin. Try again in "
    )
    # the same user id on Teams is someone else: limits are per surface
    fake_model.enqueue(text("teams"), text("boss"))
    assert (await analyst.handle(msg(surface="teams", text_="q6"), recorder)).ok
    assert (await analyst.handle(msg(user="BOSS", text_="q7"), recorder)).ok
    # every request is in the audit trail; refused ones are recorded as not ok, with the reason
    turns = await analyst.store.list_turns(channel_id="C1")
    assert {t["question"] for t in turns if t["ok"]} == {"q1", "q2", "q4", "q6", "q7"}
    refused = {t["question"]: t["error"] for t in turns if not t["ok"]}
    assert set(refused) == {"q3", "q5"} and all("Try again in" in e for e in refused.values())
    assert all(t["error_id"] == "" for t in turns if not t["ok"])  # no id shown, none kept


async def test_a_full_channel_does_not_spend_the_askers_own_questions(
    analyst, fake_model, recorder, settings
):
    """Refused by the channel's limit, a person keeps their own hourly questions for elsewhere (the
    person's limit was counted before the channel's, so the refusal spent one of theirs)."""
    analyst.access = AccessPolicy()
    analyst.settings = settings.model_copy(update={"user_turns_per_hour": 1, "channel_turns_per_hour": 1})
    fake_model.enqueue(text("one"), text("two"))
    assert (await analyst.handle(msg(user="U1", channel="C1", text_="q1"), recorder)).ok
    full = await analyst.handle(msg(user="U2", channel="C1", text_="q2"), recorder)
    assert full.error.startswith("This channel has reached the limit of questions for now: 1 an hour")
    elsewhere = await analyst.handle(msg(user="U2", channel="C2", text_="q3"), recorder)
    assert elsewhere.ok, elsewhere.error
    assert len(fake_model.requests) == 2


def test_bigquery_dataset_entries_keep_their_case(settings):
    """BigQuery's dataset and table names are case-sensitive: lower-cased, `bill.Analytics` named a
    dataset BigQuery does not have (listed as "not found", reported missing by doctor), and
    `bill.reporting` admitted a distinct `bill.REPORTING`. DuckDB's entries still fold: its names do."""
    s = settings.model_copy(
        update={
            "warehouse": "bigquery",
            "bigquery_datasets": "bill.Analytics, bill.reporting",
            "channel_datasets": "C3=bill.Sales_Data|bill.Raw.Events",
        }
    )
    policy = AccessPolicy.from_settings(s)
    assert policy.datasets.patterns == ("bill.Analytics.*", "bill.reporting.*")
    channel = policy.allowlist_for(msg(channel="C3"))
    assert channel.patterns == ("bill.Sales_Data.*", "bill.Raw.Events")
    default = policy.allowlist_for(msg(channel="C1"))  # compared as BigQuery compares, whoever asks
    assert default.allows("bill.Analytics.Events") and default.allows("bill.reporting.orders")
    assert not default.allows("bill.analytics.Events") and not default.allows("bill.REPORTING.orders")
    assert channel.allows("bill.Sales_Data.x") and not channel.allows("bill.sales_data.x")
    duck = AccessPolicy.from_settings(settings.model_copy(update={"channel_datasets": "C3=Main.Airlines"}))
    assert duck.allowlist_for(msg(channel="C3")).patterns == ("main.airlines",)
