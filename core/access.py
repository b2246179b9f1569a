"""Access control: which teams, channels and users may ask, who is an admin, and which datasets a
channel may see. Denials are short sentences for the person, never silence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.config import Settings, split_list
from core.config_types import parse_channel_datasets
from core.events import IncomingMessage
from core.policy import TableAllowlist


@dataclass(frozen=True)
class AccessPolicy:
    """Allowlists (empty = everyone), admins, and per-channel dataset allowlists."""

    teams: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()
    datasets: TableAllowlist = field(default_factory=TableAllowlist)
    channel_datasets: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        """Read the access settings once."""
        base = split_list(settings.bigquery_datasets) if settings.warehouse == "bigquery" else ()
        return cls(
            teams=frozenset(split_list(settings.allowed_teams)),
            channels=frozenset(split_list(settings.allowed_channels)),
            users=frozenset(split_list(settings.allowed_users)),
            admins=frozenset(split_list(settings.admin_users)),
            datasets=TableAllowlist(patterns=tuple(_dataset_pattern(p) for p in base)),
            channel_datasets=parse_channel_datasets(settings.channel_datasets),
        )

    def is_admin(self, user_id: str) -> bool:
        return user_id in self.admins

    def check(self, message: IncomingMessage) -> str | None:
        """None when the message may be answered; else a short explanation for the person."""
        if message.surface == "terminal" or self.is_admin(message.user_id):
            return None
        if self.teams and message.team_id not in self.teams:
            return "datathread isn't enabled for this workspace. Ask your admin to add it."
        if self.channels and message.channel_id not in self.channels and not message.is_direct:
            return "datathread isn't enabled in this channel. Ask an admin to add it, or message me directly."
        if self.users and message.user_id not in self.users:
            return "You're not on the list of people who can use datathread yet. Ask an admin for access."
        return None

    def allowlist_for(self, message: IncomingMessage) -> TableAllowlist:
        """The tables this conversation may see: the channel's datasets when set, else the default."""
        patterns = self.channel_datasets.get(message.channel_id)
        if patterns is not None:
            return TableAllowlist(patterns=tuple(_dataset_pattern(p) for p in patterns))
        return self.datasets


def _dataset_pattern(entry: str) -> str:
    """'proj.dataset' means every table of it; an explicit table or pattern stays as written."""
    entry = entry.strip().lower()
    return entry if entry.endswith("*") or entry.count(".") >= 2 else f"{entry}.*"
