"""Settings for people from outside the organization datathread is installed in: Slack Connect's
people from other organizations, and a workspace's guests.

Mixed into `core.config.Settings` (which reads them from the environment). An answer comes from the
organization's warehouse, and anyone in a channel the bot is in could ask it — a Slack Connect channel
holds people of another company, who were answered as if they were colleagues.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field

_env = AliasChoices  # a field's environment variable names (the contract's)


class OutsiderSettings(BaseModel):
    """DATATHREAD_ALLOW_EXTERNAL_USERS and DATATHREAD_ALLOW_GUESTS (core/access.py applies them)."""

    allow_external_users: bool = Field(
        False,
        validation_alias=_env("DATATHREAD_ALLOW_EXTERNAL_USERS"),
        description="Answer people from other organizations in Slack Connect channels and DMs (off: they are told "
        "why not; listing their workspace in DATATHREAD_ALLOWED_TEAMS, or them in DATATHREAD_ALLOWED_USERS, "
        "allows just those).",
    )
    allow_guests: bool = Field(
        True,
        validation_alias=_env("DATATHREAD_ALLOW_GUESTS"),
        description="Answer the workspace's guests (Slack multi- and single-channel guests) in the channels they "
        "were invited to (off: they are told why not; DATATHREAD_ALLOWED_USERS still allows one).",
    )
