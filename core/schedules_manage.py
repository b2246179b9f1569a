"""Managing schedules from chat: `/ask schedule list|pause|resume|remove ID`.

People who create schedules in Slack could not see or change them: `schedule list` was "I couldn't
read that schedule", and the pause notice told them to run `datathread schedule resume` in a
terminal they do not have. The owner of a schedule, or an admin, may change it; the answer is for the
asker alone. Parsed without the model, like `/ask schedule weekly …`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from core.schedules import Schedule, UnknownSchedule, said_date
from core.schedules_store import ScheduleBook

VERBS = ("list", "pause", "resume", "remove")
MAX_LISTED = 20
QUESTION_SHOWN = 80


@dataclass(frozen=True)
class ManageCommand:
    verb: str
    schedule_id: str = ""


def parse_manage(text: str) -> ManageCommand | None:
    """`schedule list`, `schedule pause ID`…; None for anything else (a new schedule's grammar)."""
    match = re.fullmatch(r"(?i)\s*schedules?\s+(list|pause|resume|remove|delete)\b\s*(\S*)\s*", text)
    if match is None:
        return None
    verb = match[1].lower().replace("delete", "remove")
    return ManageCommand(verb, match[2].strip("`'\"<>"))


def listed(schedule: Schedule, now: datetime) -> str:
    """One schedule as a line: its next run in its own zone, named (whoever reads it, and an admin
    listing a channel's, may live in another), or why it is paused."""
    question = schedule.question
    if len(question) > QUESTION_SHOWN:
        question = question[: QUESTION_SHOWN - 1].rstrip() + "…"
    if schedule.paused:
        state = f" — paused: {schedule.paused_reason}"
    else:
        state = f" — next run {said_date(schedule.next_run(now))} ({schedule.tz})"
    return (
        f"• `{schedule.id}` `{schedule.cron}` ({schedule.tz}) in {schedule.channel_ref}: “{question}”{state}"
    )


async def manage(book: ScheduleBook, command: ManageCommand, *, user: str, channel: str, how: str) -> str:
    """Do what `command` asks for `user`, if they may; one answer for them alone. `how` is the
    command's own prefix as they type it (`/ask schedule`), for the sentences that say what to do."""
    admin = book.access.is_admin(user)
    if command.verb == "list":
        mine = await book.list(owner=user)
        here = [s for s in await book.list(channel=channel) if s.owner != user] if admin else []
        found = mine + here
        if not found:
            return f"You have no schedules. `{how} weekly mon 09:00 QUESTION` makes one."
        more = f"\n…and {len(found) - MAX_LISTED} more." if len(found) > MAX_LISTED else ""
        lines = "\n".join(listed(s, book.now()) for s in found[:MAX_LISTED])
        return f"{lines}{more}\n`{how} pause ID`, `resume ID` or `remove ID` changes one."
    if not command.schedule_id:
        return f"Which schedule? `{how} {command.verb} ID` — `{how} list` shows their ids."
    try:
        schedule = await book.get(command.schedule_id)
    except UnknownSchedule:
        return f"No schedule has the id `{command.schedule_id}`; `{how} list` shows yours."
    if schedule.owner != user and not admin:
        return f"Only its owner or an admin can change schedule `{schedule.id}`."
    if command.verb == "pause":
        if schedule.paused:
            return f"Schedule `{schedule.id}` is already paused."
        await book.pause(schedule.id, by=user)
        return f"Paused schedule `{schedule.id}`. `{how} resume {schedule.id}` starts it again."
    if command.verb == "resume":
        if not schedule.paused:
            return f"Schedule `{schedule.id}` is not paused."
        resumed = await book.resume(schedule.id, by=user)
        return f"Resumed schedule `{schedule.id}`; next run {said_date(resumed.next_run(book.now()))} ({resumed.tz})."
    await book.remove(schedule.id, by=user)
    return f"Removed schedule `{schedule.id}`."
