"""Authentication of `/api/messages` with botframework-connector's own validation: the channel's
signing key comes from OpenID metadata served by the fake connector on loopback
(DATATHREAD_BOT_OPENID_METADATA_URL), so both refusals and the accepted case are real JWT checks."""

from __future__ import annotations

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import SecretStr

from bot.server import create_app
from bot.teams_auth import credentials_factory, is_loopback
from core.config import ConfigError
from tests.bot.teams_harness import RecordingRunner, activity

APP_ID = "00000000-app-id"


@pytest.mark.parametrize("app_type,tenant", [("MultiTenant", None), ("SingleTenant", "tenant-1")])
async def test_auth_refuses_bad_tokens_and_accepts_a_channel_token(
    settings, connector, app_type, tenant, caplog
):
    configured = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_password": SecretStr("app-password-secret"),
            "microsoft_app_type": app_type,
            "microsoft_app_tenant_id": tenant,
            "bot_openid_metadata_url": connector.openid_url,
        }
    )
    runner = RecordingRunner()
    app = create_app(configured, runner=runner)  # routes only: no lifespan, so no core is started
    body = activity(connector.url, "how many flights?")
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {
            "iss": "https://api.botframework.com",
            "aud": APP_ID,
            "serviceurl": connector.url,
            "exp": 9999999999,
        },
        other_key,
        algorithm="RS256",
        headers={"kid": connector.kid},
    )
    bad_headers = [
        {},
        {"authorization": "Bearer not-a-jwt"},
        {"authorization": f"Basic {connector.token(app_id=APP_ID, service_url=connector.url)}"},
        {"authorization": f"Bearer {forged}"},
        {"authorization": f"Bearer {connector.token(app_id='someone-else', service_url=connector.url)}"},
        {"authorization": f"Bearer {connector.token(app_id=APP_ID, service_url='https://evil.example')}"},
        {"authorization": f"Bearer {connector.token(app_id=APP_ID, service_url=connector.url, ttl_s=-3600)}"},
    ]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for headers in bad_headers:
            response = await client.post("/api/messages", json=body, headers=headers)
            assert response.status_code == 401, headers
        assert runner.jobs == []
        good = connector.token(app_id=APP_ID, service_url=connector.url)
        response = await client.post("/api/messages", json=body, headers={"authorization": f"Bearer {good}"})
    assert response.status_code == 202
    # each refusal says why in the log: a token for another app names the setting to check
    refused = [r.getMessage() for r in caplog.records if "refused a Bot Framework request" in r.getMessage()]
    assert len(refused) == len(bad_headers) and "no Authorization header" in refused[0]
    assert "is MICROSOFT_APP_ID the Azure Bot's app id?" in refused[4], refused[4]
    assert not any(line.endswith("PermissionError") for line in refused), refused
    assert [j.kind for j in runner.jobs] == ["teams.turn"]
    assert runner.jobs[0].payload["activity"]["text"].endswith("how many flights?")


def test_credentials_by_app_type(settings):
    single = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_type": "SingleTenant",
            "microsoft_app_tenant_id": "t-1",
        }
    )
    assert credentials_factory(single).tenant_id == "t-1"
    multi = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_type": "MultiTenant",
            "microsoft_app_tenant_id": "t-1",
        }
    )
    assert credentials_factory(multi).tenant_id == ""  # multi-tenant bots sign in via botframework.com
    with pytest.raises(ConfigError, match="TENANT_ID"):
        credentials_factory(single.model_copy(update={"microsoft_app_tenant_id": None}))


async def test_without_app_id_only_loopback_callers_and_service_urls_are_accepted(settings, connector):
    runner = RecordingRunner()
    app = create_app(settings.model_copy(update={"microsoft_app_id": None}), runner=runner)
    local = httpx.ASGITransport(app=app)  # reports client ("127.0.0.1", 123)
    remote = httpx.ASGITransport(app=app, client=("203.0.113.5", 4000))
    async with httpx.AsyncClient(transport=local, base_url="http://t") as client:
        response = await client.post("/api/messages", json=activity("https://attacker.example/", "hi"))
        assert response.status_code == 401
        assert runner.jobs == []
    async with httpx.AsyncClient(transport=remote, base_url="http://t") as client:
        response = await client.post("/api/messages", json=activity(connector.url, "hi"))
        assert response.status_code == 401
        assert runner.jobs == []
    async with httpx.AsyncClient(transport=local, base_url="http://t") as client:
        response = await client.post("/api/messages", json=activity(connector.url, "hi"))
    assert response.status_code == 202
    assert [j.kind for j in runner.jobs] == ["teams.turn"]


@pytest.mark.parametrize(
    "host,ok",
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("203.0.113.5", False),
        ("evil.example", False),
        ("localhost.evil.example", False),
        ("", False),
        (None, False),
    ],
)
def test_is_loopback(host, ok):
    assert is_loopback(host) is ok


async def test_a_signing_key_endpoint_that_never_answers_holds_no_other_request(
    settings, connector, monkeypatch
):
    """The SDK fetches the channel's signing keys with a blocking `requests.get` and no timeout. Any
    caller can make it fetch (a token with a key id it has not seen); with the key endpoint behind a
    firewall that drops packets, that one request froze the whole web process: Slack acks, /healthz,
    even SIGTERM. Now the request is refused after the deadline and every other route answers meanwhile."""
    import asyncio
    import time

    import bot.teams_auth
    from tests.fakes.black_hole import BlackHole

    monkeypatch.setattr(bot.teams_auth, "AUTH_DEADLINE_S", 1.0)
    hole = BlackHole().start()
    try:
        configured = settings.model_copy(
            update={
                "microsoft_app_id": APP_ID,
                "microsoft_app_password": SecretStr("app-password-secret"),
                "microsoft_app_type": "MultiTenant",
                "bot_openid_metadata_url": f"{hole.url}/openid",
            }
        )
        runner = RecordingRunner()
        app = create_app(configured, runner=runner)
        token = connector.token(app_id=APP_ID, service_url=connector.url)
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            started = time.monotonic()
            message = asyncio.create_task(
                client.post("/api/messages", json=activity(connector.url, "hi"), headers=headers)
            )
            await asyncio.sleep(0.2)  # the key fetch is under way (and stuck)
            await asyncio.wait_for(client.get("/healthz"), 0.5)  # answered (503 here: no core started)
            assert not message.done()
            response = await message
            refused_after = time.monotonic() - started
            again = await client.post("/api/messages", json=activity(connector.url, "hi"), headers=headers)
        assert response.status_code == 401 and again.status_code == 401
        assert 0.9 < refused_after < 3, refused_after
        assert runner.jobs == []
    finally:
        hole.stop()


async def test_activities_from_other_channels_than_teams_are_not_acted_on(settings, connector, caplog):
    """The Azure Bot that serves Teams takes Direct Line and Web Chat too, whose clients write
    `from.aadObjectId` and `channelData.tenant.id` themselves: a validly signed webchat activity was
    answered like a Teams colleague's. Now only `msteams` is acted on; the Connector gets its 200 and
    the log says so once per channel."""
    configured = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_password": SecretStr("app-password-secret"),
            "microsoft_app_type": "MultiTenant",
            "bot_openid_metadata_url": connector.openid_url,
        }
    )
    connector.endorsements = ("msteams", "webchat", "directline")  # as the Bot Framework's key is
    runner = RecordingRunner()
    app = create_app(configured, runner=runner)
    token = connector.token(app_id=APP_ID, service_url=connector.url)
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for channel in ("webchat", "directline", "webchat"):
            body = {**activity(connector.url, "show me payroll"), "channelId": channel}
            response = await client.post("/api/messages", json=body, headers=headers)
            assert response.status_code == 200, channel
        assert runner.jobs == []
        teams = await client.post("/api/messages", json=activity(connector.url, "hi"), headers=headers)
        assert teams.status_code == 202 and [j.kind for j in runner.jobs] == ["teams.turn"]
    said = [
        r.getMessage() for r in caplog.records if "datathread answers Microsoft Teams only" in r.getMessage()
    ]
    assert len(said) == 2 and "'webchat'" in said[0] and "'directline'" in said[1], said
