"""The `datathread schedule` contract as scripts use it: real subprocesses of `.venv/bin/datathread`
where the entry point matters (the first add), the same typer app in process for the rest;
state in the SQLite store under DATATHREAD_HOME, `run-now` posting through the fake Slack Web API."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import pytest
from typer.testing import CliRunner

from bot.cli import app
from tests.fakes.anthropic_api import text
from tests.fakes.cli import invoke, run
from tests.fakes.slack_api import FakeSlackAPI

ADD = ["schedule", "add", "--cron", "0 9 * * mon", "--tz", "Europe/Berlin", "--surface", "slack"]


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_add_list_pause_resume_remove(home):
    sid = ok(run([*ADD, "--channel", "C123", "weekly delays by carrier"], home)).strip()
    assert len(sid) == 10 and sid.isalnum()
    other = ok(
        invoke([*ADD[:-1], "teams", "--channel", "19:x@thread.tacv2", "--thread", "1700", "q2"], home)
    ).strip()

    listed = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
    assert [s["id"] for s in listed] == [sid, other]
    first = listed[0]
    assert {k: first[k] for k in ("cron", "tz", "channel", "question", "paused")} == {
        "cron": "0 9 * * mon",
        "tz": "Europe/Berlin",
        "channel": "C123",
        "question": "weekly delays by carrier",
        "paused": False,
    }
    next_run = datetime.fromisoformat(first["next_run"])
    assert next_run.utcoffset() is not None and (next_run.hour, next_run.minute, next_run.weekday()) == (
        9,
        0,
        0,
    )
    assert listed[1]["surface"] == "teams" and listed[1]["thread"] == "1700"

    assert ok(invoke(["schedule", "pause", sid], home)).strip() == f"Paused {sid}."
    assert (
        ok(invoke(["schedule", "pause", sid], home)).strip() == f"{sid} is already paused (paused by hand)."
    )
    assert ok(invoke(["schedule", "list", "--channel", "CNOPE"], home)).startswith("No schedules match")
    paused = json.loads(ok(invoke(["schedule", "list", "--json", "--channel", "C123"], home)))
    assert [(s["id"], s["paused"], s["next_run"]) for s in paused] == [(sid, True, None)]
    assert f"Resumed {sid}; next run " in ok(invoke(["schedule", "resume", sid], home))
    assert f"{sid} is not paused; next run " in ok(invoke(["schedule", "resume", sid], home))
    assert ok(invoke(["schedule", "remove", sid], home)).strip() == f"Removed {sid}."
    assert [s["id"] for s in json.loads(ok(invoke(["schedule", "list", "--json"], home)))] == [other]
    audit = ok(invoke(["audit"], home))
    assert "weekly delays" in audit  # the changes are in the audit trail, each once
    assert audit.count('"paused"') == 1 and audit.count('"resumed"') == 1, audit


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([*ADD[:3], "0 9 * *", *ADD[4:], "--channel", "C1", "q"], "Invalid cron expression '0 9 * *'"),
        ([*ADD[:3], "0 25 * * *", *ADD[4:], "--channel", "C1", "q"], "Invalid cron expression '0 25 * * *'"),
        ([*ADD[:5], "Europe/Berln", *ADD[6:], "--channel", "C1", "q"], "Unknown time zone 'Europe/Berln'"),
        ([*ADD[:-1], "discord", "--channel", "C1", "q"], "Unknown surface 'discord'"),
        # an unset $TZ in a script (`--tz "$TZ"`) became UTC without a word
        ([*ADD[:5], "", *ADD[6:], "--channel", "C1", "q"], "--tz is empty: give an IANA time zone"),
        # values that could only fail at the first run, days later: refused when typed
        ([*ADD, "--channel", "#general", "q"], "Slack needs the channel's id, not '#general'"),
        ([*ADD, "--channel", "general", "q"], "it looks like C0123ABCD"),
        ([*ADD[:-1], "teams", "--channel", "C0001", "q"], "Teams needs the conversation id, not 'C0001'"),
        ([*ADD, "--channel", "C1", "--thread", "notats", "q"], "Slack needs the thread's ts, not 'notats'"),
        (
            [*ADD, "--channel", "C1", "--sql", "DROP TABLE flights", "q"],
            "The verified SQL would be refused when the schedule runs: Only one read-only query",
        ),
        (
            [*ADD[:3], "61 9 * * *", *ADD[4:], "--channel", "C1", "q"],
            "'61' is not a minute (the first field takes 0–59).",
        ),
        # a sentence that starts with a quote keeps it ("*/5 * * * *' would run…" lost the first one)
        ([*ADD[:3], "*/5 * * * *", *ADD[4:], "--channel", "C1", "q"], "'*/5 * * * *' would run again 5"),
        ([*ADD, "--channel", "C1", "q" * 2001], "at most 2,000 characters (this one has 2,001)"),
        (["schedule", "pause", "nope"], "No schedule has the id 'nope'"),
        (["schedule", "resume", "nope"], "No schedule has the id 'nope'"),
        (["schedule", "remove", "nope"], "No schedule has the id 'nope'"),
        (["schedule", "run-now", "nope"], "No schedule has the id 'nope'"),
        # SCHEDULES.md sends a failed run to the log: --log-level shows it here ("No such option" before)
        (["schedule", "run-now", "nope", "--log-level", "INFO"], "No schedule has the id 'nope'"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, says):
    # In process through typer's runner (the entry point itself is exercised above and below).
    env = {"DATATHREAD_HOME": str(tmp_path / "home"), "ANTHROPIC_API_KEY": "sk-ant-dummy-123456"}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # typer.Exit(2), not a crash
    assert len(result.stderr.strip().splitlines()) == 1 and not result.stdout


def test_a_schedule_for_a_surface_not_configured_here_is_created_with_a_warning(home):
    """`schedule add --surface slack` without SLACK_BOT_TOKEN said nothing; the runs then failed to post
    (and, before the scheduler left them to a replica that can post them, paused the schedule)."""
    added = invoke([*ADD, "--channel", "C123", "q"], home)
    assert added.returncode == 0 and len(added.stdout.strip()) == 10
    assert added.stderr == (
        "warning: Slack is not configured here: the process that runs schedules (serve, slack --socket) "
        "needs SLACK_BOT_TOKEN to post this one.\n"
    )
    configured = invoke([*ADD, "--channel", "C123", "q"], home, env={"SLACK_BOT_TOKEN": "xoxb-1-2-abc"})
    assert configured.returncode == 0 and configured.stderr == ""
    capitalised = invoke([*ADD[:-1], "Slack", "--channel", "C123", "q"], home)  # any case is taken
    assert capitalised.returncode == 0 and capitalised.stderr.startswith("warning: Slack is not configured")
    # the terminal is trusted, a run is not: an owner the access settings refuse would pause it at once
    allowed = {"SLACK_BOT_TOKEN": "xoxb-1-2-abc", "DATATHREAD_ALLOWED_USERS": "U0GOOD"}
    refused = invoke([*ADD, "--channel", "C123", "--owner", "U0BAD", "q"], home, env=allowed)
    assert refused.returncode == 0 and refused.stderr == (
        "warning: the access settings do not let U0BAD ask in C123, so its first run will pause it: "
        "give --owner someone they allow.\n"
    )
    assert invoke([*ADD, "--channel", "C123", "--owner", "U0GOOD", "q"], home, env=allowed).stderr == ""


def test_a_slack_owner_is_not_warned_about_where_only_their_organization_is_listed(home):
    """DATATHREAD_ALLOWED_TEAMS naming the Grid organization alone: `schedule add --owner U…` warned
    that its first run would pause it, though Slack says the owner's organization at each run (and
    the run keeps it). Still warned: an owner no listed organization could let in, and one Slack is
    not asked about."""
    env = {"SLACK_BOT_TOKEN": "xoxb-1-2-abc", "DATATHREAD_ALLOWED_TEAMS": "E0ORG"}
    member = invoke([*ADD, "--channel", "C123", "--owner", "U0ADA", "--team", "T0WS", "q"], home, env=env)
    assert member.returncode == 0 and member.stderr == "", member.stderr
    listed = {**env, "DATATHREAD_ALLOWED_USERS": "U0GOOD"}
    refused = invoke([*ADD, "--channel", "C123", "--owner", "U0ADA", "--team", "T0WS", "q"], home, env=listed)
    assert refused.stderr.startswith("warning: the access settings do not let U0ADA ask in C123")
    nobody = invoke([*ADD, "--channel", "C123", "--owner", "ops", "--team", "T0WS", "q"], home, env=env)
    assert nobody.stderr.startswith("warning: the access settings do not let ops ask in C123")


def test_a_teams_schedule_without_team_posts_in_the_bots_own_tenant(home, fake_model):
    """A SingleTenant bot answers its own tenant only: a Teams schedule the terminal adds without
    `--team` is taken to post there, not refused (and paused) at its first run. Measured before: it was
    created without a word, then every run was refused ("datathread isn't enabled for your
    organization's Teams…" posted in the channel, 0 model calls) and `createConversation` named the
    tenant "". Now the schedule is stored with the bot's tenant, and one stored without (before this
    release) runs in it too."""
    tenant = "8a1d2c3b-0000-4000-8000-00000000aaaa"
    env = {
        "MICROSOFT_APP_ID": "11111111-2222-3333-4444-555555555555",
        "MICROSOFT_APP_PASSWORD": "pw",
        "MICROSOFT_APP_TENANT_ID": tenant,
    }
    teams = [*ADD[:-1], "teams", "--channel", "19:x@thread.tacv2", "how many flights?"]
    added = invoke(teams, home, env=env)
    assert added.stderr == ""
    sid = added.stdout.strip()
    [listed] = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
    assert listed["team_id"] == tenant
    elsewhere = invoke([*teams[:-1], "--team", "77777777-0000-4000-8000-00000000bbbb", "q"], home, env=env)
    assert "warning: the access settings do not let a schedule without --owner ask" in elsewhere.stderr

    for stored_without_tenant in (False, True):
        fake_model.enqueue(text("336,776 flights."))
        result, creates, posted = asyncio.run(
            run_in_teams(home, fake_model, tenant, sid, stored_without_tenant)
        )
        assert result.ok, result.error
        [create] = creates
        assert create["channelData"]["tenant"] == {"id": tenant} and create["tenantID"] == tenant
        assert {m["conversation"]["tenantID"] for m in posted if "conversation" in m} == {tenant}
        said = json.dumps(create) + json.dumps(posted)
        assert "336,776 flights" in said and "isn't enabled" not in said
    assert len(fake_model.requests) == 2


async def run_in_teams(home, fake_model, tenant: str, sid: str, stored_without_tenant: bool):
    """One run of the schedule by the bot of `tenant` (SingleTenant, unauthenticated towards the fake
    Bot Connector); `stored_without_tenant`: as a schedule the terminal stored before the tenant was
    filled in. Returns the run's result, the `createConversation` bodies and the activities posted."""
    from bot.schedule_jobs import run_once
    from core.config import load_settings
    from core.schedules_store import ScheduleBook
    from core.sessions import open_store
    from tests.fakes.bot_connector import FakeConnector

    connector = FakeConnector().start()
    try:
        settings = load_settings(
            _env_file=None,
            home=home,
            anthropic_api_key="sk-ant-test-key-000000",
            anthropic_base_url=fake_model.url,
            model_retries=0,
            turn_workers=0,
            microsoft_app_tenant_id=tenant,
            teams_service_url=connector.url + "/",
        )
        if stored_without_tenant:
            store = await open_store(settings)
            try:
                await ScheduleBook.from_settings(store, settings).update(sid, team_id="")
            finally:
                await store.close()
        result = await run_once(settings, sid)
        creates = [c.body for c in connector.calls if c.method == "POST" and c.conversation_id == ""]
        return result, creates, connector.sent()
    finally:
        connector.stop()


def test_only_the_surfaces_this_process_can_post_to_are_scheduled_here():
    from bot.surface_settings import postable_surfaces
    from core.config import load_settings

    assert postable_surfaces(load_settings(_env_file=None)) == frozenset()
    slack = load_settings(_env_file=None, slack_bot_token="xoxb-1", slack_signing_secret="s")
    assert postable_surfaces(slack) == {"slack"}
    both = load_settings(
        _env_file=None,
        slack_bot_token="xoxb-1",
        microsoft_app_id="11111111-2222-3333-4444-555555555555",
        microsoft_app_password="pw",
        microsoft_app_tenant_id="contoso.onmicrosoft.com",
    )
    assert postable_surfaces(both) == {"slack", "teams"}


def test_run_now_posts_the_answer_where_the_schedule_says(home, fake_model):
    api = FakeSlackAPI().start()
    try:
        sid = ok(
            invoke([*ADD, "--channel", "C777", "--owner", "U0001", "how many flights in 2013?"], home)
        ).strip()
        fake_model.enqueue(text("There were 336,776 flights in 2013."))
        env = {
            "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
            "ANTHROPIC_BASE_URL": fake_model.url,
            "SLACK_BOT_TOKEN": "xoxb-test-token-000000",
            "DATATHREAD_SLACK_API_URL": api.url,
        }
        out = ok(invoke(["schedule", "run-now", sid], home, env=env))
        assert f"Posted the run of {sid}" in out
        header = api.of("chat.postMessage")[0]
        assert header.args["channel"] == "C777" and header.token == "xoxb-test-token-000000"
        assert "how many flights in 2013?" in header.args["text"]
        streamed = "".join(c.args.get("markdown_text", "") for c in api.of("chat.appendStream"))
        assert "336,776" in streamed
        [listed] = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
        assert listed["runs"] == 1 and listed["last_outcome"] == "ok"

        fake_model.enqueue(text("unused"))
        api.fail_methods["chat.postMessage"] = "not_in_channel"
        failed = invoke(["schedule", "run-now", sid], home, env=env)
        assert failed.returncode == 1 and "not_in_channel" in failed.stderr
        [listed] = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
        assert listed["paused"] and "not_in_channel" in listed["paused_reason"]
    finally:
        api.stop()


def test_the_listing_at_80_columns_shows_whole_ids(home):
    """The id is what pause, resume, remove and run-now take: at 80 columns the table cut it to
    "0772c5…", and that prefix was refused."""
    question = "weekly delays by carrier, with the top ten routes and a chart of each, every Monday"
    sid = ok(invoke([*ADD, "--channel", "C123", question], home)).strip()
    listing = ok(invoke(["schedule", "list"], home, env={"COLUMNS": "80"}))
    assert max(len(line) for line in listing.splitlines()) <= 80, listing
    assert sid in listing, listing


def test_the_listing_at_80_columns_shows_when_where_and_the_whole_question(home):
    """At 80 columns the eight-column table cut everything but the id: "2026-1…", "Europ…", "quest…"."""
    question = "weekly delays by carrier, with the top ten routes and a chart of each, every Monday"
    sid = ok(invoke([*ADD, "--channel", "C0123ABCD", question], home)).strip()
    teams = ["--channel", "19:abcdefabcdef@thread.tacv2", "--thread", "1700000000001", "flights by origin"]
    other = ok(invoke([*ADD[:5], "America/New_York", *ADD[6:-1], "teams", *teams], home)).strip()
    listed = {s["id"]: s for s in json.loads(ok(invoke(["schedule", "list", "--json"], home)))}
    listing = ok(invoke(["schedule", "list"], home, env={"COLUMNS": "80"}))
    assert max(len(line) for line in listing.splitlines()) <= 80, listing
    words = listing.replace(",", " ").split()
    for schedule_id, zone, asked in (
        (sid, "Europe/Berlin", question),
        (other, "America/New_York", "flights by origin"),
    ):
        next_run = listed[schedule_id]["next_run"]
        for part in (schedule_id, zone, next_run[:10], next_run[11:16]):  # the date and the time
            assert part in words, (part, listing)
        assert set(asked.replace(",", " ").split()) <= set(words), listing  # no word cut


def test_run_now_checks_the_id_first_then_what_it_needs_to_post(home, fake_model):
    """An unknown id was found only after the model key was required (a ConfigError traceback without
    one) and the sandbox had started; a Slack schedule without SLACK_BOT_TOKEN was answered, then failed
    to post with a traceback. Each is one sentence and exit 2 now, before anything starts."""
    unknown = invoke(["schedule", "run-now", "nope"], home)  # no model key either
    assert unknown.returncode == 2 and unknown.stderr.strip() == (
        "error: No schedule has the id 'nope'; `datathread schedule list` shows them."
    )
    sid = ok(invoke([*ADD, "--channel", "C777", "how many flights?"], home)).strip()
    no_key = invoke(["schedule", "run-now", sid], home)
    assert (
        no_key.returncode == 2 and "ANTHROPIC_API_KEY" in no_key.stderr and "Traceback" not in no_key.stderr
    )
    env = {"ANTHROPIC_API_KEY": "sk-ant-dummy-123456", "ANTHROPIC_BASE_URL": fake_model.url}
    no_token = invoke(["schedule", "run-now", sid], home, env=env)
    assert no_token.returncode == 2, no_token.stderr
    assert no_token.stderr.strip() == (
        "error: This schedule posts to Slack: set SLACK_BOT_TOKEN (xoxb-…) to run it from here."
    )
    assert fake_model.requests == []  # nothing was asked


def test_a_run_slack_cannot_take_is_one_sentence_and_a_line_in_the_log(home, fake_model):
    """A Slack API that cannot be reached made `run-now` print the poster's traceback (twice: the run and
    its retry) above its sentence; then the log file kept the traceback. The terminal has the sentence,
    the log one line per attempt saying what was not posted and why."""
    sid = ok(run([*ADD, "--channel", "C777", "how many flights?"], home)).strip()
    fake_model.enqueue(text("unused"), text("unused"))
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "ANTHROPIC_BASE_URL": fake_model.url,
        "SLACK_BOT_TOKEN": "xoxb-test-token-000000",
        "DATATHREAD_SLACK_API_URL": "http://127.0.0.1:9/api/",  # the discard port: refused
    }
    failed = run(["schedule", "run-now", sid], home, env=env)
    assert failed.returncode == 1, failed.stderr
    assert "Traceback" not in failed.stderr  # the reason in words, not "ClientConnectorError"
    assert failed.stderr == "error: The run failed: could not reach Slack at 127.0.0.1: connection refused.\n"
    log = (home / "logs" / "datathread.log").read_text()
    assert "Traceback" not in log, log
    assert log.count("not posted in C777: could not reach Slack at 127.0.0.1: connection refused") == 2, log


def claude_refused(api: FakeSlackAPI) -> dict:
    """A run-now's settings: Slack the fake `api`, Claude at the discard port (connection refused)."""
    return {
        "ANTHROPIC_API_KEY": "sk-ant-dummy-123456",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "SLACK_BOT_TOKEN": "xoxb-test-token-000000",
        "DATATHREAD_SLACK_API_URL": api.url,
    }


def test_a_reason_that_is_a_sentence_reads_well_in_the_terminal_and_the_channel(home):
    """Claude unreachable: the terminal said "… (connection refused). Please try again shortly.." and the
    channel "The retry failed too (I could not reach … Please try again shortly.). I'll try again next
    time." — two full stops, brackets in brackets, and two contradicting instructions."""
    api = FakeSlackAPI().start()
    try:
        sid = ok(invoke([*ADD, "--channel", "C777", "how many flights?"], home)).strip()
        env = claude_refused(api)
        failed = invoke(["schedule", "run-now", sid], home, env=env)
        why = "I could not reach the Claude API (connection refused)"
        assert failed.returncode == 1 and failed.stderr == f"error: The run failed: {why}.\n", failed.stderr
        notices = [
            c.args["text"] for c in api.of("chat.postMessage") if "Scheduled report" not in c.args["text"]
        ]
        assert f"This scheduled run failed: {why}. Retrying once." in notices, notices
        assert f"The retry failed too: {why}." in notices, notices  # run-now: no next time to promise
    finally:
        api.stop()


def test_a_failed_run_now_is_recorded_but_does_not_count_towards_the_pause(home):
    """An operator's test run counted: one failed `run-now` was "failures 1" of the 3 that pause a
    schedule, and three of them paused it. Its outcome is recorded; the count is the scheduled runs'."""
    api = FakeSlackAPI().start()
    try:
        sid = ok(invoke([*ADD, "--channel", "C777", "how many flights?"], home)).strip()
        env = claude_refused(api)
        for _ in range(3):
            assert invoke(["schedule", "run-now", sid], home, env=env).returncode == 1
        [listed] = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
        assert (listed["failures"], listed["paused"]) == (0, False), listed
        assert listed["last_outcome"] == "failed: I could not reach the Claude API (connection refused)"
        assert listed["last_run"] and listed["runs"] == 0
        assert not [c for c in api.of("chat.postMessage") if "paused" in c.args["text"]]
    finally:
        api.stop()


def test_a_run_now_into_a_channel_that_is_gone_says_the_schedule_is_paused(home):
    """It printed "The run failed: channel_not_found." and nothing of the pause it had caused."""
    api = FakeSlackAPI().start()
    try:
        sid = ok(invoke([*ADD, "--channel", "C777", "how many flights?"], home)).strip()
        api.fail_methods["chat.postMessage"] = "channel_not_found"
        failed = invoke(["schedule", "run-now", sid], home, env=claude_refused(api))
        assert failed.returncode == 1 and failed.stderr == (
            "error: The run failed: channel_not_found; the schedule is now paused "
            f"(`datathread schedule resume {sid}`).\n"
        )
        [listed] = json.loads(ok(invoke(["schedule", "list", "--json"], home)))
        assert listed["paused"] is True
    finally:
        api.stop()


def test_add_takes_a_surface_in_any_case_like_a_time_zone(home):
    """`--surface SLACK` was "Unknown surface 'SLACK'" while `--tz europe/berlin` was fine."""
    sid = ok(invoke([*ADD[:-1], "SLACK", "--channel", "C1", "q"], home)).strip()
    other = ok(invoke([*ADD[:-1], "Teams", "--channel", "19:x@thread.tacv2", "q"], home)).strip()
    listed = {s["id"]: s["surface"] for s in json.loads(ok(invoke(["schedule", "list", "--json"], home)))}
    assert listed == {sid: "slack", other: "teams"}


def test_add_takes_a_time_zone_as_people_type_it(home):
    """`--tz utc` was refused as an unknown time zone; `utc` is UTC, `europe/berlin` Europe/Berlin."""
    for typed, zone in (("utc", "UTC"), ("europe/berlin", "Europe/Berlin")):
        sid = ok(invoke([*ADD[:5], typed, *ADD[6:], "--channel", "C1", "q"], home)).strip()
        [listed] = [s for s in json.loads(ok(invoke(["schedule", "list", "--json"], home))) if s["id"] == sid]
        assert listed["tz"] == zone and datetime.fromisoformat(listed["next_run"]).utcoffset() is not None
