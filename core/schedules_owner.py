"""Whether a scheduled run's owner may still ask, by who their platform says they are now: one rule
for Slack's and Teams' posters (bot/schedule_slack.py, bot/schedule_teams.py), which only look the
owner up (`users.info`, the Bot Connector's members route). Written twice, the two had already drifted
in their sentences; the platform's name and where its guests are guests of are the only differences.

A refusal the allowlists make whatever the platform said (the owner not listed, their workspace or
tenant not enabled) is a lasting one: paused, as no later run does better. So is one the platform
says (a guest while guests are refused, a person of another organization, an account deactivated).
One the platform could not say (UNCONFIRMED, MAYBE_GUEST) fails this run only: it may answer next time.
"""

from __future__ import annotations

from core.access import DEACTIVATED, EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED
from core.schedules import Schedule
from core.schedules_run import RunResult
from core.schedules_store import ScheduleBook

PLATFORM = {"slack": "Slack", "teams": "Teams"}
GUESTS_OF = {"slack": "the workspace", "teams": "the organization's tenant"}  # whose guests they are

# Why a run paused: the owner may not ask, by who they are (`IncomingMessage.outsider`).
OWNER_REFUSED = {
    DEACTIVATED: "its owner ({owner}) has left: their {platform} account is deactivated",
    EXTERNAL: "its owner ({owner}) is from another organization, and datathread's access settings answer "
    "only the organization's own people",
    GUEST: "its owner ({owner}) is a guest of {guests_of}, and datathread's access settings do not "
    "answer guests",
    "": "datathread's access settings do not let its owner ({owner}) ask in this channel",
}


def owner_words(outsider: str, schedule: Schedule) -> str:
    """Why `schedule` paused, for an owner of standing `outsider`, in its platform's words."""
    surface = schedule.surface
    return OWNER_REFUSED.get(outsider, OWNER_REFUSED[""]).format(
        owner=schedule.owner,
        platform=PLATFORM.get(surface, surface),
        guests_of=GUESTS_OF.get(surface, "the organization"),
    )


def refused_owner(
    book: ScheduleBook, schedule: Schedule, *, outsider: str, turn_id: str, enterprise: str = ""
) -> RunResult | None:
    """The failed run for an owner the access settings refuse, given who the platform said they are
    (`outsider`; their Enterprise Grid organization, `enterprise`), or None when they may ask."""
    if book.standing_refused(schedule, outsider=outsider, enterprise=enterprise) is None:
        return None
    if outsider in (UNCONFIRMED, MAYBE_GUEST):  # the platform could not say
        if book.standing_refused(schedule, outsider="", enterprise=enterprise) is None:  # this run only
            platform = PLATFORM.get(schedule.surface, schedule.surface)
            why = f"I couldn't confirm who its owner ({schedule.owner}) is: {platform} did not say"
            return RunResult(ok=False, error=why, turn_id=turn_id)
        outsider = ""  # the allowlists refuse them whoever they are
    why = owner_words(outsider, schedule)
    return RunResult(ok=False, error=why, turn_id=turn_id, lasting=True, retry=False)
