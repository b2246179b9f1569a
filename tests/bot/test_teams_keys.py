"""The channel's signing keys behind every Teams token check (`bot/teams_keys.py`), end to end: the
real app's `/api/messages`, botframework-connector's own JWT validation, and the fake Bot Connector's
OpenID metadata and key set on loopback — one that hangs, one that rotates its key."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr

import bot.teams_auth
import bot.teams_keys
from bot.server import create_app
from tests.bot.teams_harness import RecordingRunner, activity
from tests.fakes.bot_connector import CHANNEL_ISSUER, FakeConnector

APP_ID = "00000000-app-id"


def configured(settings, connector: FakeConnector):
    return settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_password": SecretStr("app-password-secret"),
            "microsoft_app_type": "MultiTenant",
            "bot_openid_metadata_url": connector.openid_url,
        }
    )


async def post(client: httpx.AsyncClient, connector: FakeConnector) -> int:
    token = connector.token(app_id=APP_ID, service_url=connector.url)
    body = activity(connector.url, "hi")
    response = await client.post("/api/messages", json=body, headers={"authorization": f"Bearer {token}"})
    return response.status_code


async def test_a_key_fetch_that_hangs_once_is_given_up_and_the_next_message_is_accepted(
    settings, connector, monkeypatch, caplog
):
    """The key endpoint accepts the first connection and never answers, then answers normally. The
    SDK's fetch (`requests`, no timeout) held the one checking thread for good: 8 messages in 8.7 s,
    all refused, for ever, until a restart. Now that fetch is given up at its deadline (its connection
    closed), the message is refused, and the next fetch is a new one: the next message is accepted."""
    monkeypatch.setattr(bot.teams_auth, "AUTH_DEADLINE_S", 2.0)
    monkeypatch.setattr(bot.teams_keys, "FETCH_DEADLINE_S", 0.5)
    connector.hang_openid = 1
    runner = RecordingRunner()
    app = create_app(configured(settings, connector), runner=runner)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert (await client.get("/healthz")).json()["teams_signing_keys"] == "not fetched yet"
        started = time.monotonic()
        first = await post(client, connector)
        refused_after = time.monotonic() - started
        health = (await client.get("/healthz")).json()
        after = [await post(client, connector) for _ in range(3)]
        loaded = (await client.get("/healthz")).json()["teams_signing_keys"]
    assert first == 401 and 0.4 < refused_after < 1.5, refused_after
    assert health["teams_signing_keys"] == "not loaded"
    assert after == [202, 202, 202] and loaded == "loaded"
    assert len(runner.jobs) == 3
    # the stuck fetch ended at its deadline: the bot closed the connection it had been waiting on
    assert len(connector.abandoned) == 1 and connector.abandoned[0] - started < 1.5
    assert connector.key_fetches == ["/openid", "/keys"]  # fetched once, for the three messages
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "signing keys could not be fetched" in line and "no answer within 0.5 s" in line for line in said
    )


async def test_keys_held_are_used_while_a_refresh_fails(settings, connector, monkeypatch):
    """A day later the keys are fetched again, in the background: a refresh that hangs neither delays
    the messages nor throws away the keys that check them."""
    monkeypatch.setattr(bot.teams_keys, "FETCH_DEADLINE_S", 0.5)
    app = create_app(configured(settings, connector), runner=RecordingRunner())
    keys = app.state.teams.channel_keys
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert await post(client, connector) == 202
        monkeypatch.setattr(bot.teams_keys, "REFRESH_AFTER_S", 0.0)  # the keys are a day old
        connector.hang_openid = 1
        started = time.monotonic()
        assert [await post(client, connector) for _ in range(3)] == [202, 202, 202]
        assert time.monotonic() - started < 0.5  # nobody waited for the refresh
        while not connector.abandoned and time.monotonic() - started < 5:  # the refresh given up
            await asyncio.sleep(0.05)
        assert await post(client, connector) == 202
    assert keys.state() == "loaded" and len(connector.abandoned) == 1


def test_every_url_the_sdk_checks_tokens_against_has_bounded_keys(settings):
    """Tokens with the channel's issuer are checked against the channel's keys; a token with an
    Emulator's or a skill's issuer (anyone can send one) against another URL: both are fetched by
    `SigningKeys`, never by the SDK's unbounded fetch."""
    from botframework.connector.auth import AuthenticationConstants, JwtTokenExtractor

    from bot.teams_auth import build_bot

    assert (
        bot.teams_keys.CHANNEL_METADATA_URL == AuthenticationConstants.TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL
    )
    update = {
        "microsoft_app_id": APP_ID,
        "microsoft_app_type": "MultiTenant",
        "bot_openid_metadata_url": None,
    }
    build_bot(settings.model_copy(update=update))
    for url in (
        AuthenticationConstants.TO_BOT_FROM_CHANNEL_OPENID_METADATA_URL,
        AuthenticationConstants.TO_BOT_FROM_EMULATOR_OPENID_METADATA_URL,
    ):
        assert isinstance(JwtTokenExtractor.get_open_id_metadata(url), bot.teams_keys.SigningKeys), url


async def test_a_token_signed_with_a_new_key_fetches_the_keys_again_at_most_so_often(
    settings, connector, monkeypatch, caplog
):
    """Microsoft rotates its signing key. botbuilder's lookup raised IndexError for a key id it did not
    hold, before its own "refresh when not found" ran: tokens signed with the new key were refused
    until the daily refresh, up to 24 h. Now the keys are fetched again — at most once per
    UNKNOWN_KEY_REFRESH_S, as anyone may send made-up key ids."""
    monkeypatch.setattr(bot.teams_keys, "UNKNOWN_KEY_REFRESH_S", 1.0)
    caplog.set_level(logging.INFO, logger="datathread.teams")
    app = create_app(configured(settings, connector), runner=RecordingRunner())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert await post(client, connector) == 202
        connector.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        connector.kid = "fake-key-2"  # published, and the channel's tokens signed with it
        too_soon = await post(client, connector)  # within a second of the last fetch: not fetched again
        await asyncio.sleep(1.0)
        rotated = [await post(client, connector) for _ in range(2)]
        fetches = len(connector.key_fetches)
        made_up = []
        for n in range(3):  # anyone's made-up key ids, right after: no fetch for them
            claims = {
                "iss": CHANNEL_ISSUER,
                "aud": APP_ID,
                "serviceurl": connector.url,
                "exp": time.time() + 600,
            }
            token = jwt.encode(claims, connector.key, algorithm="RS256", headers={"kid": f"nope-{n}"})
            body = activity(connector.url, "hi")
            response = await client.post(
                "/api/messages", json=body, headers={"authorization": f"Bearer {token}"}
            )
            made_up.append(response.status_code)
    assert too_soon == 401 and rotated == [202, 202] and made_up == [401, 401, 401]
    assert fetches == len(connector.key_fetches) == 4  # the first fetch, and one for the new key
    said = [r.getMessage() for r in caplog.records]
    assert "a token signed with a key id we don't know yet (fake-key-2): refreshing the keys" in said
    assert any("key id we do not know (nope-0)" in line for line in said), said
    assert not any("IndexError" in line for line in said)


@pytest.mark.parametrize(
    ("path", "published", "said"),
    [
        ("/openid", {"issuer": CHANNEL_ISSUER}, "is not OpenID metadata (no jwks_uri)"),
        ("/openid", ["not", "metadata"], "is not OpenID metadata (no jwks_uri)"),
        ("/keys", {"keys": {"kid": "fake-key-1"}}, "lists no signing keys"),
        ("/keys", {"keys": 5}, "lists no signing keys"),
    ],
    ids=["no-jwks_uri", "metadata-a-list", "keys-an-object", "keys-a-number"],
)
async def test_key_metadata_of_another_shape_is_a_failed_fetch(
    settings, connector, caplog, path, published, said
):
    """Metadata without `jwks_uri` raised KeyError, a `keys` that is no list TypeError: neither was a
    failed fetch, so `/healthz` said "not fetched yet" after it had failed, and a refresh in the
    background ended with an exception nobody retrieved. Now each is a failed fetch, in words."""
    connector.published[path] = published
    with pytest.raises(bot.teams_keys.KeysNotFetched, match=re.escape(said)):
        await bot.teams_keys.fetch_keys(connector.openid_url, deadline_s=5)
    app = create_app(configured(settings, connector), runner=RecordingRunner())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        assert await post(client, connector) == 401
        assert (await client.get("/healthz")).json()["teams_signing_keys"] == "not loaded"
    assert any(
        "signing keys could not be fetched" in r.getMessage() and said in r.getMessage()
        for r in caplog.records
    )


async def test_a_fetch_that_fails_in_any_other_way_is_a_failed_fetch_too(monkeypatch):
    """Whatever a fetch raises is a failure kept in words, never an exception left in its task."""

    async def broken(url: str, *, deadline_s: float) -> dict:
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(bot.teams_keys, "fetch_keys", broken)
    keys = bot.teams_keys.SigningKeys("https://keys.invalid/openid")
    with pytest.raises(bot.teams_keys.SigningKeysUnavailable, match="RuntimeError: something nobody foresaw"):
        await keys.get("kid-1")
    assert keys.state() == "not loaded" and keys._fetch.done() and keys._fetch.exception() is None
