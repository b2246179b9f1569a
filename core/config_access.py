"""Settings for who may ask: the allowlists of workspaces or tenants, channels and people, the admins,
and people from outside the organization datathread is installed in (Slack Connect's and Teams shared
channels' people from other organizations, a workspace's or tenant's guests).

Mixed into `core.config.Settings` (which reads them from the environment); `core/access.py` applies
them, with who someone is as bot/slack_access.py and bot/teams_members.py find out. An answer comes
from the organization's warehouse, and anyone in a channel the bot is in could ask it — a Slack
Connect channel or a Teams shared channel holds people of another company, who were answered as if
they were colleagues.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field

_env = AliasChoices  # a field's environment variable names (the contract's)


class AccessSettings(BaseModel):
    """DATATHREAD_ALLOWED_*, DATATHREAD_ADMIN_USERS, DATATHREAD_ALLOW_EXTERNAL_USERS and DATATHREAD_ALLOW_GUESTS."""

    allowed_teams: str = Field(
        "",
        validation_alias=_env("DATATHREAD_ALLOWED_TEAMS"),
        description=(
            "Comma-separated Slack workspace / Teams tenant ids allowed (empty = every Slack workspace; in "
            "Teams a SingleTenant or UserAssignedMSI bot's own tenant, a MultiTenant bot's any tenant). "
            "Slack judges the asker's own workspace, not the channel's; an Enterprise Grid organization id "
            "(E…) allows its people of every workspace."
        ),
    )
    allowed_channels: str = Field(
        "",
        validation_alias=_env("DATATHREAD_ALLOWED_CHANNELS"),
        description="Comma-separated channel ids allowed.",
    )
    allowed_users: str = Field(
        "",
        validation_alias=_env("DATATHREAD_ALLOWED_USERS"),
        description="Comma-separated user ids allowed: Slack's member ids (`U0123ABC`), Teams' Microsoft "
        "Entra object ids (a GUID: the person's `aadObjectId`, not the `29:…` id of a conversation).",
    )
    admin_users: str = Field(
        "",
        validation_alias=_env("DATATHREAD_ADMIN_USERS"),
        description="Comma-separated user ids (as DATATHREAD_ALLOWED_USERS) exempt from rate limits, who "
        "may confirm anyone's queries.",
    )

    allow_external_users: bool = Field(
        False,
        validation_alias=_env("DATATHREAD_ALLOW_EXTERNAL_USERS"),
        description="Answer people from other organizations: in Slack, Slack Connect channels' and DMs'; in "
        "Teams, a shared channel's members of another tenant and anonymous meeting participants, as Teams' "
        "member lookup says (off: they are told why not, as is anyone the lookup could not place; listing "
        "their workspace or tenant in DATATHREAD_ALLOWED_TEAMS, or them in DATATHREAD_ALLOWED_USERS, "
        "allows just those).",
    )
    allow_guests: bool = Field(
        True,
        validation_alias=_env("DATATHREAD_ALLOW_GUESTS"),
        description="Answer guests in the conversations they were invited to: a Slack workspace's multi- and "
        "single-channel guests, a Teams tenant's guests (Microsoft Entra B2B) (off: they are told why not, "
        "as is anyone whose lookup failed; DATATHREAD_ALLOWED_USERS still allows one).",
    )
