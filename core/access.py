"""Access control: which teams, channels and users may ask, who is an admin, how many questions an
hour they may ask, and which datasets a channel may see. Refusals are short sentences for the
person, never silence.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.config import Settings, split_list
from core.config_types import parse_channel_datasets
from core.events import IncomingMessage
from core.policy import TableAllowlist
from core.turn_records import in_words

log = logging.getLogger("datathread.turn")

# `IncomingMessage.outsider`: who the asker is to the organization the bot is installed in.
GUEST = (
    "guest"  # a guest of the workspace (Slack's multi- and single-channel guests; Teams' Entra B2B guests)
)
# a person of another organization (Slack Connect; Teams: another tenant's, an anonymous meeting participant)
EXTERNAL = "external"
UNCONFIRMED = "unconfirmed"  # not one of its people by what the platform sent, and it could not be asked
# One of its workspace's people by what the platform sent, but whether a guest could not be asked while
# guests are refused: a listed workspace does not vouch for that (its guests are of it too).
MAYBE_GUEST = "maybe-guest"
# Their account is deactivated (Slack's `users.info` says `deleted`): someone who has left. Refused
# whatever else is set, admins and people allowed by name included: a leaver's schedules kept posting
# the organization's data into its channels for good.
DEACTIVATED = "deactivated"
# Why, in the words the person reads: the answer would come from an organization's data.
EXTERNAL_REFUSED = (
    "I only answer people of the organization I'm installed in, whose data my answers come from, and "
    "you're here from another organization. An admin can allow people from other organizations."
)
UNCONFIRMED_REFUSED = (
    "I couldn't confirm that you're part of the organization I'm installed in, whose data my answers "
    "come from, and I only answer its own people. Try again later, or ask an admin to allow you."
)
# Where someone is a guest, in their surface's word: a Slack workspace, a Teams organization (tenant).
GUEST_REFUSED = (
    "I don't answer guests of this workspace: my answers come from the organization's data. An admin "
    "can allow guests, or you by name."
)
TEAMS_GUEST_REFUSED = (
    "I don't answer guests of this organization: my answers come from its data. An admin can allow "
    "guests, or you by name."
)
DEACTIVATED_REFUSED = (
    "Your account in this workspace is deactivated, and I only answer the organization's current people."
)
MAYBE_GUEST_REFUSED = (
    "I couldn't confirm that you're a member of this workspace rather than a guest, and I don't answer "
    "guests: my answers come from the organization's data. Try again later, or ask an admin to allow you."
)
TEAMS_MAYBE_GUEST_REFUSED = (
    "I couldn't confirm that you're a member of this organization rather than a guest, and I don't answer "
    "guests: my answers come from its data. Try again later, or ask an admin to allow you."
)


@dataclass(frozen=True)
class Refusal:
    """A question refused on purpose: not allowed here, or over an hourly limit.

    Expected, not a fault, so it carries no error id: an id exists so that a person's report leads to
    a log line with what they were not shown, and a refusal's sentence is its whole reason. Shown with
    an id it read like a failure of the bot. The refusal is still in the audit trail (who, where, the
    sentence) and in an INFO log line, which also names the setting behind it (`setting`)."""

    text: str
    setting: str = ""
    retry_after_s: float | None = None


class RateCounter(Protocol):
    async def hit_rates(
        self, limits: Sequence[tuple[str, int]], *, window_s: float
    ) -> tuple[int, float] | None: ...


ONE_TENANT_APP_TYPES = ("SingleTenant", "UserAssignedMSI")  # Azure Bot types whose app lives in one tenant


def home_tenant(settings: Settings) -> str:
    """The one Teams tenant a bot of one tenant answers while DATATHREAD_ALLOWED_TEAMS is empty
    (lowercase), or "" when there is none to hold it to: a MultiTenant bot answers any tenant that
    installs it, and a tenant id given as a domain (contoso.onmicrosoft.com) cannot be compared,
    since Teams names the conversation's tenant by its GUID.

    Why: with DATATHREAD_ALLOWED_TEAMS empty (everyone), a SingleTenant bot answered people of any
    organisation that installed or sideloaded its app. Guests and shared-channel members from other
    organisations still ask: their messages come from a conversation of the host tenant, and the
    tenant checked is the conversation's (`channelData.tenant.id`), not the sender's own: who they
    are is bot/teams_members.py's to find out (DATATHREAD_ALLOW_EXTERNAL_USERS, DATATHREAD_ALLOW_GUESTS)."""
    tenant = (settings.microsoft_app_tenant_id or "").strip().lower()
    if settings.microsoft_app_type not in ONE_TENANT_APP_TYPES or "." in tenant:
        return ""
    return tenant


@dataclass(frozen=True)
class AccessPolicy:
    """Allowlists (empty = everyone; Teams: a bot of one tenant, its tenant), admins, and per-channel
    dataset allowlists."""

    teams: frozenset[str] = frozenset()
    home_tenant: str = ""  # Teams' only tenant while `teams` is empty (`home_tenant()`)
    channels: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    datasets: TableAllowlist = field(default_factory=TableAllowlist)
    channel_datasets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    table_parts: int = 3  # the parts of a table's full name: project.dataset.table; DuckDB's main.table
    external_users: bool = False  # DATATHREAD_ALLOW_EXTERNAL_USERS
    guests: bool = True  # DATATHREAD_ALLOW_GUESTS

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        """Read the access settings once."""
        base = split_list(settings.bigquery_datasets) if settings.warehouse == "bigquery" else ()
        return cls(
            teams=frozenset(split_list(settings.allowed_teams)),
            home_tenant=home_tenant(settings),
            channels=frozenset(split_list(settings.allowed_channels)),
            users=frozenset(split_list(settings.allowed_users)),
            admins=frozenset(split_list(settings.admin_users)),
            # compared as the warehouse's names compare (BigQuery's are case-sensitive), whoever asks
            datasets=TableAllowlist(
                patterns=tuple(q for p in base for q in _dataset_patterns(p, 3))
            ).for_dialect(settings.warehouse),
            channel_datasets=parse_channel_datasets(settings.channel_datasets),
            table_parts=2 if settings.warehouse == "duckdb" else 3,
            external_users=settings.allow_external_users,
            guests=settings.allow_guests,
        )

    def is_admin(self, user_id: str) -> bool:
        return user_id in self.admins

    def check(self, message: IncomingMessage) -> str | None:
        """None when the message may be answered; else a short explanation for the person."""
        if message.surface == "terminal":
            return None
        if message.outsider == DEACTIVATED:  # before the admins: an admin who left is no admin
            return DEACTIVATED_REFUSED
        if self.is_admin(message.user_id):
            return None
        if refusal := self._outsider_refusal(message):
            return refusal
        teams = message.surface == "teams"  # a tenant and chats, not a workspace and channels
        other_tenant = teams and not self.teams and self.home_tenant not in ("", message.team_id.lower())
        if other_tenant or (self.teams and not self._listed(message)):
            where = "your organization's Teams" if teams else "this workspace"
            return f"datathread isn't enabled for {where}. Ask your admin to add it."
        if self.channels and message.channel_id not in self.channels and not message.is_direct:
            where = "this channel or chat" if teams else "this channel"
            return f"datathread isn't enabled in {where}. Ask an admin to add it, or message me directly."
        if self.users and message.user_id not in self.users:
            return "You're not on the list of people who can use datathread yet. Ask an admin for access."
        return None

    def _outsider_refusal(self, message: IncomingMessage) -> str | None:
        """Someone from outside the organization, unless allowed: all such people by the setting, or
        this one by name (DATATHREAD_ALLOWED_USERS) or, for another organization, by their workspace
        (DATATHREAD_ALLOWED_TEAMS). One the platform could not place is refused as a stranger would be;
        one it places at home but could not say is no guest, while guests are refused, as a guest would
        be — their workspace listed does not let them in: it lists the workspaces, not their guests.

        In Teams a message's `team_id` is the conversation's tenant, not the asker's own: listed, it
        let every outsider asking in it through. There a person of a listed tenant is no outsider in
        the first place (bot/teams_members.py counts the listed tenants as the organization's)."""
        named = message.user_id in self.users
        teams = message.surface == "teams"  # guests of a tenant: "this workspace" told them nothing
        if message.outsider == GUEST and not (self.guests or named):
            return TEAMS_GUEST_REFUSED if teams else GUEST_REFUSED
        if message.outsider == MAYBE_GUEST and not (self.guests or named):
            return TEAMS_MAYBE_GUEST_REFUSED if teams else MAYBE_GUEST_REFUSED
        if message.outsider in (EXTERNAL, UNCONFIRMED):
            listed = message.surface != "teams" and self._listed(message)
            if self.external_users or named or listed:
                return None
            return EXTERNAL_REFUSED if message.outsider == EXTERNAL else UNCONFIRMED_REFUSED
        return None

    def _listed(self, message: IncomingMessage) -> bool:
        """Whether DATATHREAD_ALLOWED_TEAMS names the asker's workspace (or tenant), or their Enterprise
        Grid organization: judged by the asker's own workspace, a colleague of a sibling workspace was
        refused where only ours was listed, and an organization id listed matched nobody."""
        return bool(
            (message.team_id and message.team_id in self.teams)
            or (message.enterprise_id and message.enterprise_id in self.teams)
        )

    def allowlist_for(self, message: IncomingMessage) -> TableAllowlist:
        """The tables this conversation may see: the channel's datasets when set, else the default."""
        patterns = self.channel_datasets.get(message.channel_id)
        if patterns is not None:
            return TableAllowlist(
                patterns=tuple(q for p in patterns for q in _dataset_patterns(p, self.table_parts))
            ).for_dialect("bigquery" if self.table_parts == 3 else "duckdb")
        return self.datasets


def _dataset_patterns(entry: str, table_parts: int) -> tuple[str, ...]:
    """The patterns one allowlist entry stands for. An entry that names a table (as many parts as the
    warehouse's full names: `proj.dataset.table`, or DuckDB's `main.airlines`) or ends in `*` stays as
    written; a shorter one means every table under it (`proj.dataset` → `proj.dataset.*`, DuckDB's
    `main` → `main.*`). With one rule for both, DuckDB's `main.airlines` became `main.airlines.*`,
    which matches no table: the channel saw nothing.

    In DuckDB, whose tables live in `main` unless a schema is named, a name without a dot is also a
    table (or pattern) there: `C3=airlines` meant only a schema `airlines`, and `C3=air*` only names
    starting with `air` before any dot — neither matched a table, and the channel silently saw none.

    BigQuery's entries keep their case: its dataset and table names are case-sensitive, and lower-cased
    `proj.Analytics` named a dataset that does not exist (TableAllowlist folds the project id)."""
    entry = entry.strip().lower() if table_parts == 2 else entry.strip()
    written = entry if entry.endswith("*") or entry.count(".") >= table_parts - 1 else f"{entry}.*"
    if table_parts == 2 and "." not in entry and entry != "main":
        return (written, f"main.{entry}")
    return (written,)


async def rate_limited(
    store: RateCounter, settings: Settings, message: IncomingMessage, *, admin: bool
) -> Refusal | None:
    """None while the asker and the channel are under their hourly limits (admins have none).

    In Slack and Teams the sentence says the limit and when to come back, and that an admin sets it:
    people there cannot act on a variable name. In the terminal whoever reads it runs the bot, so it
    names the setting that raises it.

    Both limits count a question in one step, or neither does: counted one after the other, a person
    refused by a full channel had spent one of their own questions on nothing."""
    if admin:
        return None
    every = (
        ("user", message.user_id, settings.user_turns_per_hour, "DATATHREAD_USER_TURNS_PER_HOUR"),
        ("channel", message.channel_id, settings.channel_turns_per_hour, "DATATHREAD_CHANNEL_TURNS_PER_HOUR"),
    )
    limits = [limit for limit in every if limit[2] > 0]  # 0 = no limit
    if not limits:
        return None
    keys = [(f"{scope}:{message.surface}:{who}", limit) for scope, who, limit, _ in limits]
    refused = await store.hit_rates(keys, window_s=3600)
    if refused is None:
        return None
    index, wait = refused
    scope, _, limit, setting = limits[index]
    per = "person" if scope == "user" else "channel"
    if message.surface == "terminal":
        said = f"You've reached the limit of questions for now ({limit} an hour per {per}, set by {setting})"
    elif scope == "user":
        said = f"You've reached the limit of questions for now: {limit} an hour per person, set by an admin"
    else:
        said = f"This channel has reached the limit of questions for now: {limit} an hour, set by an admin"
    return Refusal(f"{said}. Try again in {in_words(wait)}.", f"{setting}={limit}", wait)


def log_refusal(message: IncomingMessage, turn_id: str, session_id: str, refusal: Refusal) -> None:
    """The operator's line for a refusal: who, where, the sentence and the setting behind it."""
    log.info(
        "turn refused turn=%s session=%s surface=%s channel=%s user=%s: %s%s",
        turn_id,
        session_id,
        message.surface,
        message.channel_id,
        message.user_id,
        refusal.text,
        f" ({refusal.setting})" if refusal.setting else "",
    )
