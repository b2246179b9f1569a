"""The one rule for a scheduled run whose owner the platform has just looked up (Slack's `users.info`,
Teams' members route): written once for both posters, in each platform's words."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.access import DEACTIVATED, EXTERNAL, GUEST, MAYBE_GUEST, UNCONFIRMED, AccessPolicy
from core.schedules import new_schedule
from core.schedules_owner import refused_owner
from core.schedules_store import ScheduleBook


def schedule(surface: str, owner: str = "U1"):
    return new_schedule(
        cron="0 9 * * mon",
        tz="UTC",
        surface=surface,
        channel="C1" if surface == "slack" else "19:general@thread.tacv2",
        question="q",
        owner=owner,
        team_id="T1",
        now=datetime(2031, 1, 1, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("surface", "access", "outsider", "error", "lasting"),
    [
        ("slack", AccessPolicy(), "", None, None),
        ("slack", AccessPolicy(guests=False), GUEST, "its owner (U1) is a guest of the workspace", True),
        (
            "teams",
            AccessPolicy(guests=False),
            GUEST,
            "its owner (U1) is a guest of the organization's tenant",
            True,
        ),
        ("teams", AccessPolicy(), EXTERNAL, "its owner (U1) is from another organization", True),
        (
            "slack",
            AccessPolicy(admins=frozenset({"U1"})),
            DEACTIVATED,
            "their Slack account is deactivated",
            True,
        ),
        # the platform could not say: this run fails, the next may do better
        (
            "slack",
            AccessPolicy(),
            UNCONFIRMED,
            "I couldn't confirm who its owner (U1) is: Slack did not say",
            False,
        ),
        ("teams", AccessPolicy(guests=False), MAYBE_GUEST, "its owner (U1) is: Teams did not say", False),
        # … unless the allowlists refuse them whoever they are: that no later run changes
        ("teams", AccessPolicy(users=frozenset({"U9"})), UNCONFIRMED, "do not let its owner (U1) ask", True),
    ],
)
def test_an_owner_is_refused_in_their_platforms_words(surface, access, outsider, error, lasting):
    book = ScheduleBook(store=None, access=access)  # the rule reads the access settings only
    refused = refused_owner(book, schedule(surface), outsider=outsider, turn_id="t1")
    if error is None:
        assert refused is None
        return
    assert refused is not None and error in refused.error and not refused.ok, refused
    assert (refused.lasting, refused.retry) == ((True, False) if lasting else (False, True))
