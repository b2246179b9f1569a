"""Whose installation SLACK_BOT_TOKEN is, where nothing asked at start (a Modal deployment): the job
asks `auth.test` and keeps the answer a day, in the store every process shares — for that token.
Signed events into `datathread serve`, the real slack_sdk against the fake Slack Web API."""

from __future__ import annotations

import hashlib

from tests.bot.slack_harness import mention, serve
from tests.fakes.anthropic_api import text
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

OTHER = "T0OTHER"  # the workspace a new SLACK_BOT_TOKEN belongs to


class MovingSlack(FakeSlackAPI):
    """The fake Slack Web API, whose `auth.test` names the workspace of the token it is asked with."""

    workspaces = {"xoxb-token-of-ours": TEAM_ID, "xoxb-token-of-another": OTHER}

    def respond(self, method: str, args: dict) -> dict:
        said = super().respond(method, args)
        if method == "auth.test" and said.get("ok"):
            asked = [c for c in self.calls if c.method == "auth.test"][-1]
            said["team_id"] = self.workspaces.get(asked.token, TEAM_ID)
        return said


async def test_the_installation_kept_a_day_is_that_of_the_token_that_asked(settings, fake_model):
    """SLACK_BOT_TOKEN pointed at another workspace (or two deployments on one Redis): the identity
    kept under one key for every token judged everyone against the old workspace for a day — our own
    people of the old one were still answered from a warehouse that is no longer theirs. Now it is kept
    per token (a hash of it, never the token), and the new token's own `auth.test` decides."""
    api = MovingSlack().start()
    try:
        fake_model.enqueue(text("336,776 flights."), text("again"))
        async with serve(settings, api, token="xoxb-token-of-ours") as slack:
            await slack.event(mention("how many flights?", ts="1700000001.000100"))
            await slack.drain()
        assert len(fake_model.requests) == 1
        async with serve(settings, api, token="xoxb-token-of-another") as slack:
            await slack.event(mention("how many flights?", ts="1700000002.000100"))
            await slack.drain()
            kept = await slack.state.threads.person(
                f"slack:install:{_hash('xoxb-token-of-another')}", _nothing
            )
        assert len(fake_model.requests) == 1  # T0001's person is not of the new token's workspace
        assert [c.token for c in api.calls if c.method == "auth.test"] == [
            "xoxb-token-of-ours",
            "xoxb-token-of-another",
        ]
        assert kept == {"team": OTHER, "enterprise": ""}
        stored = b"".join(p.read_bytes() for p in settings.home.glob("state.sqlite3*"))
        assert stored and b"xoxb-token-of" not in stored
    finally:
        api.stop()


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]  # as kept: a hash, never the token


async def _nothing() -> None:
    return None
