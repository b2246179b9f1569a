"""`create_schedule` through a real turn (scripted model, real store): the conversation fills in where and
whose, the person confirms (Create / Cancel) before anything exists, and refusals reach the model."""

from __future__ import annotations

import dataclasses
import re

import pytest

from core.events import ConfirmRequest, IncomingMessage
from core.schedules_parse import parse_schedule_command
from core.schedules_store import ScheduleBook
from core.schedules_tool import ScheduleOrigin
from tests.fakes.anthropic_api import text, tool


def slack_message(text_: str, **kw) -> IncomingMessage:
    args = {
        "surface": "slack",
        "thread_key": ("T1", "C1", "1700000000.000100"),
        "user_id": "U1",
        "channel_id": "C1",
        "team_id": "T1",
        "user_tz": "America/New_York",
    }
    return IncomingMessage(text=text_, **{**args, **kw})


class Answers:
    """A Confirmer that records what it was asked and answers as told."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[ConfirmRequest] = []

    async def __call__(self, request: ConfirmRequest) -> bool:
        self.asked.append(request)
        return self.answer


async def test_confirm_creates_and_cancel_does_not(analyst, fake_model, recorder):
    fake_model.enqueue(
        tool("create_schedule", {"cron": "0 9 * * mon", "question": "Average delay by carrier last week"}),
        text("Done: every Monday at 09:00."),
    )
    confirm = Answers(True)
    outcome = await analyst.handle(
        slack_message("every monday at 9 post delays here"), recorder, confirm=confirm
    )
    assert outcome.ok
    [asked] = confirm.asked
    assert asked.yes == "Create"
    assert asked.prompt.startswith("Create this schedule? `0 9 * * mon` (America/New_York)")
    assert re.search(r"First run Mon \d{1,2} \w{3} 20\d\d, 09:00\.$", asked.prompt), asked.prompt  # not ISO
    [s] = await ScheduleBook(analyst.store).list()
    where = (s.surface, s.channel, s.thread, s.owner, s.team_id, s.tz)
    assert where == ("slack", "C1", "", "U1", "T1", "America/New_York")
    result = fake_model.last_tool_results()[0]
    assert f"Created schedule {s.id}; first run " in json_text(result) and not result.get("is_error")
    assert re.search(
        r"first run Mon \d{1,2} \w{3} 20\d\d, 09:00 \(America/New_York\)\.", json_text(result)
    )  # as the prompt said it

    fake_model.enqueue(
        tool("create_schedule", {"cron": "30 7 * * *", "question": "flights yesterday", "same_thread": True}),
        text("OK, not scheduled."),
    )
    confirm = Answers(False)
    await analyst.handle(slack_message("daily 7:30 in this thread"), recorder, confirm=confirm)
    assert "posting in this thread" in confirm.asked[0].prompt
    assert [x.id for x in await ScheduleBook(analyst.store).list()] == [s.id]
    assert "Not created" in json_text(fake_model.last_tool_results()[0])


REFUSALS = [
    (slack_message("x", surface="terminal", thread_key=("k",)), {}, "cannot be created from here"),
    (slack_message("x", thread_key=("T1", "C1", "private:U1")), {}, "cannot be created from here"),
    (slack_message("x"), {"cron": "every monday"}, "Invalid cron expression"),
    (slack_message("x"), {"tz": "Mars/Base"}, "Unknown time zone"),
    (slack_message("x", user_id="U2"), {}, "You already have 1 active schedule;"),  # U2 made one below
    # a channel the model names: anyone could have had schedules post where they cannot read
    (slack_message("x"), {"channel": "CEXEC"}, "channel"),
]


async def test_refusals_and_caps_reach_the_model_before_anyone_is_asked(settings, fake_model, recorder):
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"schedules_per_user": 1}))
    try:
        fake_model.enqueue(tool("create_schedule", {"cron": "0 9 * * mon", "question": "first"}), text("ok"))
        await analyst.handle(slack_message("x", user_id="U2"), recorder, confirm=Answers(True))
        for message, args, says in REFUSALS:
            fake_model.enqueue(
                tool("create_schedule", {"cron": "0 9 * * mon", "question": "q", **args}), text("Sorry.")
            )
            confirm = Answers(True)
            await analyst.handle(message, recorder, confirm=confirm)
            result = fake_model.last_tool_results()[0]
            assert result["is_error"] and says in json_text(result), says
            assert not confirm.asked
        assert [s.question for s in await ScheduleBook(analyst.store).list()] == ["first"]
    finally:
        await analyst.close()


async def test_an_organization_on_the_allowlist_lets_its_people_make_and_run_schedules(
    settings, fake_model, recorder
):
    """With DATATHREAD_ALLOWED_TEAMS naming the Enterprise Grid organization alone (E…), its people
    were answered but their schedules were refused ("isn't enabled for this workspace"), and one made
    anyway was paused at its first run: a schedule kept only its workspace. It keeps the owner's
    organization now, and is judged by it when made and before each run."""
    from core.analyst import Analyst

    analyst = await Analyst.create(settings.model_copy(update={"allowed_teams": "E0ORG"}))
    try:
        fake_model.enqueue(tool("create_schedule", {"cron": "0 9 * * mon", "question": "delays"}), text("ok"))
        confirm = Answers(True)
        await analyst.handle(slack_message("every monday", enterprise_id="E0ORG"), recorder, confirm=confirm)
        assert confirm.asked, json_text(fake_model.last_tool_results()[0])
        [s] = await ScheduleBook(analyst.store).list()
        assert (s.team_id, s.enterprise_id) == ("T1", "E0ORG")
        book = ScheduleBook.from_settings(analyst.store, analyst.settings)
        assert book.owner_refused(s) is None  # what a run checks before it posts

        # kept by its workspace alone, as before, its first run was refused
        assert "isn't enabled" in book.owner_refused(dataclasses.replace(s, enterprise_id=""))
    finally:
        await analyst.close()


def test_teams_origin_splits_channel_and_thread_and_falls_back_to_the_default_zone():
    message = IncomingMessage(
        text="x", surface="teams", thread_key=("tenant", "19:c@thread.tacv2;messageid=17"), user_id="aad"
    )
    origin = ScheduleOrigin.from_message(message, default_tz="Europe/Berlin")
    assert (origin.channel, origin.thread, origin.tz) == ("19:c@thread.tacv2", "17", "Europe/Berlin")


@pytest.mark.parametrize(
    ("command", "cron", "question"),
    [
        ("schedule weekly mon 09:00 delays by carrier", "0 9 * * mon", "delays by carrier"),
        ("schedule weekly mon,thu 18:05 x y", "5 18 * * mon,thu", "x y"),
        ("Schedule daily 7:30 flights?", "30 7 * * *", "flights?"),
        ("schedule weekdays 08:00 q", "0 8 * * mon-fri", "q"),
        ("schedule monthly 1 09:00 q", "0 9 1 * *", "q"),
        ("schedule hourly q", "0 * * * *", "q"),
        ('schedule cron "*/15 * * * *" q', "*/15 * * * *", "q"),
    ],
)
def test_slash_grammar(command, cron, question):
    parsed = parse_schedule_command(command)
    assert (parsed.cron, parsed.question) == (cron, question)


@pytest.mark.parametrize(
    "command", ["schedule", "schedule weekly mo 09:00 q", "schedule daily 25:00 q", "schedule whenever q"]
)
def test_slash_grammar_refuses_with_usage(command):
    from core.schedules import ScheduleError

    with pytest.raises(ScheduleError, match="schedule weekly mon 09:00 QUESTION"):
        parse_schedule_command(command)


def json_text(result: dict) -> str:
    content = result.get("content")
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content or [])


async def test_create_clicked_after_the_first_run_starts_from_the_click(make_store):
    """Stamped at drafting, a Create clicked at 09:02 for a daily 09:00 said "first run" tomorrow, and
    the next tick ran today's 09:00 anyway (or, clicked after the grace, counted it as skipped)."""
    from datetime import UTC, datetime, timedelta

    from core.schedules import new_schedule
    from core.schedules_tick import claim_due
    from core.schedules_tool import propose
    from tests.fakes.clock import Clock

    for late in (4, 12):  # minutes after the prompt: within the grace, and past it
        clock = Clock(datetime(2026, 12, 8, 7, 58, tzinfo=UTC))  # 08:58 in Berlin
        book = ScheduleBook(make_store(), clock=clock)
        draft = new_schedule(
            cron="0 9 * * *", tz="Europe/Berlin", surface="slack", channel="C1", question="q", now=clock()
        )

        async def click_late(request: ConfirmRequest, late: int = late, clock: Clock = clock) -> bool:
            assert "First run Tue 8 Dec 2026, 09:00." in request.prompt
            clock.advance(minutes=late)
            return True

        s, sentence = await propose(book, draft, click_late, turn_id="t1")
        assert sentence == f"Created schedule {s.id}; first run Wed 9 Dec 2026, 09:00 (Europe/Berlin)."
        assert await claim_due(book, grace=timedelta(minutes=10), now=clock()) == []
        stored = await book.get(s.id)
        assert stored.skipped == 0 and stored.created_at == stored.cursor
        assert datetime.fromisoformat(stored.created_at) == clock()
