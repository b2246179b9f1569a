"""Creating a schedule from a conversation: the `create_schedule` tool the model calls when someone
asks for a recurring answer ("every Monday at 9 post this here"), and the confirmation before it exists.

The model turns the phrasing into a cron expression; this module fills in what the conversation
knows (where to post, the asker's time zone, who owns it), checks access and caps, and asks the person
through the turn's confirmer (Slack buttons, a Teams card, the terminal prompt) — Create / Cancel —
before writing anything. `/ask schedule …` builds the same draft from a fixed grammar
(`core/schedules_parse.py`) and goes through `propose` too.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC

from pydantic import Field

from core.config import Settings
from core.events import Confirmer, ConfirmRequest, IncomingMessage
from core.final_result import final_query
from core.schedules import OverCap, Schedule, ScheduleError, new_schedule, said_date
from core.schedules_store import ScheduleBook
from core.shared_names import named_in, read_shared_file
from core.tool_outcome import ToolOutcome, refused
from core.tools import Tool, ToolContext, ToolInput


class CreateScheduleInput(ToolInput):
    """Create a standing report: the question is answered again on a schedule and posted in this
    conversation's channel. Use it when someone asks for a recurring answer ("every Monday at 9 post
    last week's delays here"). Write the cron expression in the person's local time. The person is
    asked to confirm (Create / Cancel) before the schedule exists; tell them the result. Every run starts
    afresh, without the files people shared: a question about them cannot be scheduled."""

    cron: str = Field(description="Five-field cron expression in local time, e.g. '0 9 * * mon'.")
    question: str = Field(description="The question to answer on every run, self-contained (no 'this').")
    tz: str | None = Field(None, description="IANA time zone, only if the person named one; default theirs.")
    same_thread: bool = Field(
        False, description="Post every run in this thread instead of a new one each time."
    )
    sql: str | None = Field(
        None, description="The verified SQL of the answer the schedule comes from, if any."
    )


@dataclass(frozen=True)
class ScheduleOrigin:
    """Where a schedule request comes from: the conversation it should post into, and who asks."""

    surface: str
    team_id: str
    channel: str
    thread: str
    user_id: str
    tz: str
    enterprise_id: str = ""  # Slack: the asker's Grid organization, which the access rules may list

    @classmethod
    def from_message(cls, message: IncomingMessage, *, default_tz: str) -> ScheduleOrigin | None:
        """None where schedules cannot post (the terminal, a private answer)."""
        key = message.thread_key
        if message.surface == "slack" and len(key) >= 3 and not key[2].startswith("private:"):
            channel, thread = key[1], key[2]
        elif message.surface == "teams" and len(key) >= 2:
            channel, _, thread = key[1].partition(";messageid=")
        else:
            return None
        tz = message.user_tz or default_tz
        return cls(
            message.surface, message.team_id, channel, thread, message.user_id, tz, message.enterprise_id
        )


@dataclass
class ScheduleDesk:
    """What the tool needs in one turn: the book and the origin (built by the Analyst per turn)."""

    book: ScheduleBook
    origin: ScheduleOrigin

    @classmethod
    def for_message(
        cls, book: ScheduleBook, settings: Settings, message: IncomingMessage
    ) -> ScheduleDesk | None:
        origin = ScheduleOrigin.from_message(message, default_tz=settings.default_tz)
        return cls(book, origin) if origin else None

    def draft(self, args: CreateScheduleInput) -> Schedule:
        o = self.origin  # always this conversation's channel: a channel the model named was taken,
        # so anyone could have schedules post (under that channel's datasets) where they cannot read
        return new_schedule(
            cron=args.cron,
            tz=args.tz or o.tz,
            surface=o.surface,
            channel=o.channel,
            question=args.question,
            now=self.book.now(),
            owner=o.user_id,
            team_id=o.team_id,
            enterprise_id=o.enterprise_id,
            thread=o.thread if args.same_thread else "",
            sql=args.sql or "",
        )


def confirmation_prompt(schedule: Schedule, now) -> str:
    """'Create this schedule? Every run of `0 9 * * mon` (Europe/Berlin) in C1 … first run …'."""
    first = schedule.next_run(now)
    if schedule.thread:
        where = "this thread"
    elif schedule.surface == "teams" and schedule.conversation_type != "channel":
        where = "this chat"  # a chat has no threads: every run is a message in it
    else:
        where = f"a new thread in {schedule.channel} each time"
    return (
        f"Create this schedule? `{schedule.cron}` ({schedule.tz}), posting in {where}: "
        f"“{schedule.question}”. First run {said_date(first)}."
    )


async def propose(
    book: ScheduleBook, schedule: Schedule, confirm: Confirmer | None, *, turn_id: str
) -> tuple[Schedule | None, str]:
    """Check, ask, and create on yes. Returns the schedule (None if not created) and a sentence."""
    book.check_may_create(schedule)
    await book.check_caps(schedule)
    if confirm is None:
        return None, "I can't ask for a confirmation here, so I did not create the schedule."
    request = ConfirmRequest(
        turn_id=turn_id,
        step_id=f"{turn_id}-schedule-{uuid.uuid4().hex[:6]}",
        prompt=confirmation_prompt(schedule, book.now()),
        yes="Create",
    )
    if not await confirm(request):
        return None, "Not created: the person cancelled or did not answer."
    # From the click: stamped at drafting, a Create clicked after the promised first run ran that
    # occurrence at the next tick (or counted it skipped) while saying "first run" was the next one.
    stamp = book.now().astimezone(UTC).isoformat()
    schedule = replace(schedule, created_at=stamp, cursor=stamp)
    await book.add(schedule, by=schedule.owner, trusted=True)  # checked above, before asking
    first = schedule.next_run(book.now())
    # the zone said, as in the prompt before it: whoever reads it in the channel may live in another
    return schedule, f"Created schedule {schedule.id}; first run {said_date(first)} ({schedule.tz})."


async def propose_new(
    book: ScheduleBook, confirm: Confirmer | None, *, manage_hint: str = "", **fields: str
) -> str:
    """Draft a schedule from `new_schedule`'s fields (now: the book's clock), check, ask, create on yes:
    always one sentence for the person — what surfaces' `/ask schedule` and "Schedule…" share.
    `manage_hint`: how the person can free a place when a cap refuses (the surface's own command)."""
    try:
        draft = new_schedule(now=book.now(), **fields)  # type: ignore[arg-type]
        _, sentence = await propose(book, draft, confirm, turn_id=f"sc{uuid.uuid4().hex[:10]}")
    except OverCap as exc:
        sentence = f"{exc} {manage_hint}".strip()
    except ScheduleError as exc:
        sentence = str(exc)
    return sentence


def unschedulable(record: dict, *, s3: bool) -> str:
    """Why a recorded answer cannot become a schedule, in one sentence for the person; "" when it can.
    One that read a file a person shared never could: each run starts afresh without it (in a new
    thread), and the file would not change between runs anyway. `s3`: S3 buckets are configured."""
    return shared_file_refusal(s3=s3) if read_shared_file(record) else ""


def shared_file_refusal(*, s3: bool) -> str:
    where = "the warehouse or an S3 bucket I can read" if s3 else "the warehouse"
    return (
        "I can't schedule an answer that read a file shared in the conversation: each run starts afresh, "
        f"without the file. Put the data in {where} and schedule a question about it there."
    )


def from_answer(record: dict) -> dict[str, str]:
    """What a schedule of a recorded answer asks each time: its question and the warehouse SQL it ran."""
    final = final_query(record.get("steps") or [], tools=("query_warehouse",))
    return {"question": record["question"], "sql": final.sql if final else ""}


async def create_schedule(args: CreateScheduleInput, ctx: ToolContext) -> ToolOutcome:
    """Draft, check, confirm, create: the model sees the outcome in one sentence."""
    desk = ctx.schedules
    if desk is None:
        return refused(
            "Schedules post into Slack or Teams channels; they cannot be created from here "
            "(use `datathread schedule add` in a terminal)."
        )
    if named := named_in([args.question, args.sql or ""], ctx.query.shared):
        return refused(
            f"'{named[0]}' is a file the person shared. {shared_file_refusal(s3=ctx.s3 is not None)}"
        )
    try:
        schedule, sentence = await propose(desk.book, desk.draft(args), ctx.confirm, turn_id=ctx.turn_id)
    except ScheduleError as exc:
        return refused(str(exc))
    summary = f"schedule {schedule.id} created" if schedule else "schedule not created"
    return ToolOutcome(content=sentence, summary=summary)


SCHEDULE_TOOLS: tuple[Tool, ...] = (
    Tool("create_schedule", CreateScheduleInput, create_schedule, "Setting up a schedule"),
)
