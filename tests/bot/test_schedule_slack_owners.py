"""Who a Slack schedule's owner is, checked at each run: a guest, or a person of another organization,
whose schedule was made before the access rules refused them. `datathread serve`'s `schedule.run` job,
the scheduler tick on a controllable clock, the real slack_sdk against a fake Slack Web API whose
`users.info` says each person's workspace, organization and guest flag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot import slack_blocks
from core.schedules import new_schedule
from core.schedules_store import ScheduleBook
from core.schedules_tick import tick
from tests.bot.slack_harness import confirm_buttons, serve
from tests.fakes.anthropic_api import text
from tests.fakes.clock import Clock
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

OURS, PARTNER, ORG = TEAM_ID, "T0GLOBEX", "E0ACME"  # ORG: our workspace's Enterprise Grid organization
PEOPLE = {
    "U0001": (OURS, False),
    "U0GINA": (PARTNER, False),
    "U0GUEST": (OURS, True),
    "U0LEFT": (OURS, False),
}
LEFT = {"U0LEFT"}  # deactivated: `users.info` says `deleted`
MONDAY_0859_BERLIN = datetime(2031, 11, 24, 7, 59, tzinfo=UTC)  # far from the real clock


class PeopleSlack(FakeSlackAPI):
    """The fake Slack Web API, whose `users.info` says each person's workspace, organization (ours for
    our workspace's people) and guest flag."""

    def respond(self, method: str, args: dict) -> dict:
        said = super().respond(method, args)
        if method == "auth.test" and said.get("ok"):
            said["enterprise_id"] = ORG
        if method == "users.info" and said.get("ok") and args.get("user") in PEOPLE:
            team, guest = PEOPLE[args["user"]]
            said["user"].update(team_id=team, is_restricted=guest, deleted=args["user"] in LEFT)
            if team == OURS:
                said["user"]["enterprise_user"] = {"id": args["user"], "enterprise_id": ORG, "teams": [team]}
        return said


@pytest.fixture
def api():
    fake = PeopleSlack().start()
    yield fake
    fake.stop()


async def run_once(harness, owner: str, team: str) -> tuple[ScheduleBook, str]:
    """A schedule of `owner`, made before this check existed (added past the access rules), run once."""
    clock = Clock(MONDAY_0859_BERLIN)
    book = ScheduleBook.from_settings(harness.state.analyst.store, harness.state.settings, clock=clock)
    s = new_schedule(
        cron="0 9 * * mon",
        tz="Europe/Berlin",
        surface="slack",
        channel="C0SHARED",
        question="revenue by region",
        owner=owner,
        team_id=team,
        now=clock(),
    )
    await book.add(s, trusted=True)
    clock.advance(minutes=1, seconds=3)
    await tick(book, harness.state.runner.submit, grace=timedelta(minutes=10))
    await harness.drain()
    return book, s.id


@pytest.mark.parametrize(
    ("owner", "team", "update", "why"),
    [
        ("U0GINA", PARTNER, {}, "its owner (U0GINA) is from another organization"),
        ("U0GUEST", OURS, {"allow_guests": False}, "its owner (U0GUEST) is a guest of the workspace"),
    ],
    ids=["partner", "guest"],
)
async def test_a_schedule_whose_owner_may_no_longer_ask_is_paused_before_it_posts(
    settings, fake_model, api, owner, team, update, why
):
    """A Slack Connect partner's schedule kept posting answers from our warehouse into the shared
    channel every run; a guest's kept running after DATATHREAD_ALLOW_GUESTS=false. The run-time check
    knew the allowlists only. Now the owner is looked up (`users.info`, kept a day) before a run posts
    anything, and a run they may not ask pauses the schedule, saying why in the channel and to them."""
    fake_model.enqueue(text("Revenue: EMEA 4.2M."))
    async with serve(settings.model_copy(update=update), api) as harness:
        book, sid = await run_once(harness, owner, team)
        schedule = await book.get(sid)
    assert not fake_model.requests  # nothing asked of the warehouse's model
    posted = [c.args for c in api.of("chat.postMessage")]
    assert not [p for p in posted if "Scheduled report" in p["text"]]  # no header: nothing ran
    assert schedule.paused and why in schedule.paused_reason, schedule
    [notice] = [p for p in posted if p["channel"] == "C0SHARED"]
    assert notice["text"].startswith(f"I paused this schedule: {why}")
    assert [p for p in posted if p["channel"] == owner and "I paused your schedule" in p["text"]]


async def test_a_schedule_whose_owner_has_left_is_paused_before_it_posts(settings, fake_model, api):
    """A leaver's schedules kept posting the warehouse's data into channels for good: `users.info`'s
    `deleted` was not read, so a deactivated colleague was still one of ours — an admin too. Now the
    run pauses before it posts anything, and the channel is told why."""
    fake_model.enqueue(text("Revenue: EMEA 4.2M."))
    async with serve(settings.model_copy(update={"admin_users": "U0LEFT"}), api) as harness:
        book, sid = await run_once(harness, "U0LEFT", OURS)
        schedule = await book.get(sid)
    assert not fake_model.requests
    posted = [c.args for c in api.of("chat.postMessage")]
    assert not [p for p in posted if "Scheduled report" in p["text"]]
    why = "its owner (U0LEFT) has left: their Slack account is deactivated"
    assert schedule.paused and why in schedule.paused_reason, schedule
    assert [
        p
        for p in posted
        if p["channel"] == "C0SHARED" and p["text"].startswith(f"I paused this schedule: {why}")
    ]


async def test_an_owner_slack_could_not_look_up_is_a_failed_run_not_a_pause(settings, fake_model, api):
    """Guests refused and `users.info` failing: whether the owner is a guest is not known. The run does
    not post (it may be a guest's), and counts as a failure like a Slack that did not answer — not a
    pause for good. A colleague's schedule runs as before."""
    api.fail_methods["users.info"] = "ratelimited"
    async with serve(settings.model_copy(update={"allow_guests": False}), api) as harness:
        book, sid = await run_once(harness, "U0001", OURS)
        schedule = await book.get(sid)
        assert not schedule.paused and schedule.failures == 1, schedule
        assert "couldn't confirm who its owner (U0001) is" in schedule.last_outcome, schedule
        assert not [c for c in api.of("chat.postMessage") if "Scheduled report" in c.args["text"]]
        del api.fail_methods["users.info"]
        fake_model.enqueue(text("Revenue: EMEA 4.2M."))
        book, sid = await run_once(harness, "U0001", OURS)
        assert (await book.get(sid)).last_outcome == "ok"


async def test_a_schedule_made_where_only_the_organization_is_listed_is_created_and_runs(
    settings, fake_model, api
):
    """DATATHREAD_ALLOWED_TEAMS naming the Grid organization alone answered its people, but `/ask
    schedule` told them "datathread isn't enabled for this workspace" (a schedule kept its workspace
    only, which the list does not name). It keeps the owner's organization now; its runs pass too."""
    async with serve(settings.model_copy(update={"allowed_teams": ORG}), api) as harness:
        await harness.command("schedule weekly mon 09:00 revenue by region", channel="C0SHARED")
        create, _ = await confirm_buttons(api)
        await harness.click(
            slack_blocks.ACTION_CONFIRM_RUN, create["value"], channel="C0SHARED", user="U0001"
        )
        await harness.drain()
        book = ScheduleBook.from_settings(harness.state.analyst.store, harness.state.settings)
        [s] = await book.list()
        assert (s.team_id, s.enterprise_id) == (OURS, ORG)
        assert book.owner_refused(s) is None  # what each run checks before it posts


async def test_a_schedule_stored_without_the_organization_runs_where_only_the_organization_is_listed(
    settings, fake_model, api
):
    """A schedule made in the terminal (`datathread schedule add`), or before the organization was kept,
    has none: with DATATHREAD_ALLOWED_TEAMS naming the Grid organization alone, every run was refused
    by the check before the run — before Slack, which knows the owner's organization, was asked — and
    the schedule paused. Slack's word decides now, and the organization is kept on the schedule."""
    fake_model.enqueue(text("Revenue: EMEA 4.2M."))
    async with serve(settings.model_copy(update={"allowed_teams": ORG}), api) as harness:
        book, sid = await run_once(harness, "U0001", OURS)
        schedule = await book.get(sid)
        assert not schedule.paused and schedule.last_outcome == "ok", schedule
        assert schedule.enterprise_id == ORG
        assert book.owner_refused(schedule) is None
        # a partner's schedule is still refused: Slack places them in no listed organization
        book, sid = await run_once(harness, "U0GINA", PARTNER)
        refused = await book.get(sid)
        assert refused.paused and "from another organization" in refused.paused_reason, refused
    assert len(fake_model.requests) == 1  # the colleague's run was answered, the partner's never asked
