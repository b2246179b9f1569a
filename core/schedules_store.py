"""The schedule book: schedules kept in the session store (SQLite or Redis), with their governance.

Who may create one is the access settings' call (the same check a question gets); caps on active
schedules per channel and per person keep one enthusiast from filling a channel; every change is
written to the audit trail as a record next to the turns, so `datathread audit` shows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime

from core.access import AccessPolicy
from core.config import Settings
from core.events import IncomingMessage
from core.schedules import Clock, OverCap, Schedule, ScheduleError, UnknownSchedule, iso, utc_now
from core.sessions import SessionStore
from core.wording import counted

KIND = "schedule"


@dataclass(frozen=True)
class ScheduleLimits:
    """Caps on active (not paused) schedules; 0 = no cap."""

    per_channel: int = 10
    per_user: int = 5

    @classmethod
    def from_settings(cls, settings: Settings) -> ScheduleLimits:
        return cls(per_channel=settings.schedules_per_channel, per_user=settings.schedules_per_user)


class ScheduleBook:
    """CRUD of schedules over the store's record primitives; every method is safe across replicas."""

    def __init__(
        self,
        store: SessionStore,
        *,
        limits: ScheduleLimits | None = None,
        access: AccessPolicy | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.store = store
        self.limits = limits or ScheduleLimits()
        self.access = access or AccessPolicy()
        self.clock = clock

    @classmethod
    def from_settings(
        cls, store: SessionStore, settings: Settings, *, clock: Clock = utc_now
    ) -> ScheduleBook:
        return cls(
            store,
            limits=ScheduleLimits.from_settings(settings),
            access=AccessPolicy.from_settings(settings),
            clock=clock,
        )

    def now(self) -> datetime:
        return self.clock()

    # --- reading -------------------------------------------------------------------------------
    async def get(self, schedule_id: str) -> Schedule:
        data = await self.store.get_record(KIND, schedule_id)
        if data is None:
            raise UnknownSchedule(
                f"No schedule has the id {schedule_id!r}; `datathread schedule list` shows them."
            )
        return Schedule.from_dict(data)

    async def list(self, *, channel: str | None = None, owner: str | None = None) -> list[Schedule]:
        """Schedules, oldest first; filtered by channel and/or owner (the admin listing passes neither)."""
        found = [Schedule.from_dict(d) for d in await self.store.list_records(KIND)]
        found = [
            s
            for s in found
            if (channel is None or s.channel == channel) and (owner is None or s.owner == owner)
        ]
        return sorted(found, key=lambda s: s.created_at)

    # --- changing ------------------------------------------------------------------------------
    async def add(self, schedule: Schedule, *, by: str = "", trusted: bool = False) -> Schedule:
        """Store a new schedule after the access check and the caps (`trusted`: the terminal operator).
        A Teams schedule made without a tenant (the terminal's, without `--team`) is stored with the bot's
        own tenant when it has one: its runs are messages of that tenant, which the access rules check
        (stored without one, every run was refused as another organisation's, and posted so)."""
        if schedule.surface == "teams" and not schedule.team_id and self.access.home_tenant:
            schedule = replace(schedule, team_id=self.access.home_tenant)
        if not trusted:
            self.check_may_create(schedule)
            await self.check_caps(schedule)
        await self.store.put_record(KIND, schedule.id, schedule.to_dict())
        await self.audit("created", schedule, by=by or schedule.owner)
        return schedule

    def owner_refused(self, schedule: Schedule, *, placed_later: bool = False) -> str | None:
        """Why the access settings do not let the schedule's owner ask in its channel (the sentence for
        them), or None: checked when it is created, and before each run posts anything that does not
        look its owner up. A Teams schedule stored without a tenant (made by the terminal before `add`
        filled it in) posts in the bot's own tenant, when it has one, as its runs do
        (bot/schedule_teams.py). A Slack schedule is judged by its owner's organization too, as it was
        when they made it. `placed_later`: the platform says the owner's organization at run time (a
        Slack owner of a schedule stored without it: the terminal's), so only an owner whom no
        organization DATATHREAD_ALLOWED_TEAMS lists would let in is refused — listing the organization
        alone refused every such schedule."""
        known = schedule.enterprise_id
        candidates = (known, *sorted(self.access.teams)) if placed_later and not known else (known,)
        refusals = [self.standing_refused(schedule, outsider="", enterprise=org) for org in candidates]
        return None if None in refusals else refusals[0]

    def check_may_create(self, schedule: Schedule) -> None:
        """ScheduleError unless the access settings let the creator ask in that channel."""
        if denial := self.owner_refused(schedule):
            raise ScheduleError(denial)

    def standing_refused(self, schedule: Schedule, *, outsider: str, enterprise: str = "") -> str | None:
        """`owner_refused`, given who the platform says the owner is now (`IncomingMessage.outsider`,
        their organization): a guest, a person of another organization. Slack's runs ask it before one
        posts anything (bot/schedule_slack.py): checked by the allowlists alone, a Slack Connect
        partner's schedule made before they were refused kept posting answers into the shared channel."""
        team = schedule.team_id or (self.access.home_tenant if schedule.surface == "teams" else "")
        return self.access.check(
            IncomingMessage(
                text=schedule.question,
                surface=schedule.surface,
                thread_key=(team, schedule.channel),
                user_id=schedule.owner,
                channel_id=schedule.channel,
                team_id=team,
                enterprise_id=enterprise,
                outsider=outsider,
            )
        )

    async def check_caps(self, schedule: Schedule) -> None:
        """ScheduleError when the channel or the owner already has the most active schedules allowed."""
        if self.access.is_admin(schedule.owner):
            return
        active = [s for s in await self.list() if not s.paused]
        lim = self.limits
        if lim.per_channel and sum(s.channel == schedule.channel for s in active) >= lim.per_channel:
            raise OverCap(
                f"This channel already has {counted(lim.per_channel, 'active schedule')}; their owners or an admin "
                "can pause or remove one."
            )
        if lim.per_user and sum(s.owner == schedule.owner for s in active) >= lim.per_user:
            raise OverCap(
                f"You already have {counted(lim.per_user, 'active schedule')}; pause or remove one first."
            )

    async def update(self, schedule_id: str, **fields: object) -> Schedule:
        data = await self.store.update_record(KIND, schedule_id, fields)
        if data is None:
            raise UnknownSchedule(
                f"No schedule has the id {schedule_id!r}; `datathread schedule list` shows them."
            )
        return Schedule.from_dict(data)

    async def pause(self, schedule_id: str, *, reason: str = "paused by hand", by: str = "") -> Schedule:
        schedule = await self.update(schedule_id, paused=True, paused_reason=reason)
        await self.audit("paused", schedule, by=by, note=reason)
        return schedule

    async def resume(self, schedule_id: str, *, by: str = "") -> Schedule:
        """Resume from now: what was missed while paused is not replayed; the failure count restarts."""
        schedule = await self.update(
            schedule_id, paused=False, paused_reason="", failures=0, cursor=iso(self.now())
        )
        await self.audit("resumed", schedule, by=by)
        return schedule

    async def remove(self, schedule_id: str, *, by: str = "") -> Schedule:
        schedule = await self.get(schedule_id)
        if not await self.store.delete_record(KIND, schedule_id):
            raise UnknownSchedule(
                f"No schedule has the id {schedule_id!r}; `datathread schedule list` shows them."
            )
        await self.audit("removed", schedule, by=by)
        return schedule

    async def audit(
        self, event: str, schedule: Schedule, *, by: str = "", note: str = "", ok: bool = True
    ) -> None:
        """A record in the audit trail (`datathread audit` lists it with the turns)."""
        now = time.time()
        await self.store.record_turn(
            {
                "turn_id": f"schedule-{schedule.id}-{event}-{int(now * 1000)}",
                "kind": "schedule",
                "event": event,
                "schedule_id": schedule.id,
                "session_id": f"schedule:{schedule.id}",
                "surface": schedule.surface,
                "team_id": schedule.team_id,
                "channel_id": schedule.channel,
                "user_id": by or schedule.owner,
                "question": schedule.question,
                "answer": note,
                "ok": ok,
                "error": "" if ok else note,
                "started": now,
                "finished": now,
                "cron": schedule.cron,
                "tz": schedule.tz,
                "steps": [],
                "feedback": {},
            }
        )


def to_listing(schedule: Schedule, now: datetime) -> dict:
    """One object of `schedule list --json`: the stored fields plus `next_run` (ISO 8601, schedule's zone)."""
    upcoming = schedule.next_run(now)
    return {**schedule.to_dict(), "next_run": iso(upcoming) if upcoming else None}
