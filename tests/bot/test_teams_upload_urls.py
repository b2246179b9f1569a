"""Where the bot PUTs a file a person accepted in Teams (bot/teams_consent.py), end to end through the
real app: only into OneDrive's upload sessions (SharePoint Online's hosts), over https to public
addresses, the rules a shared file's download follows (bot/url_vetting.py). The invoke's `uploadUrl`
is the sender's client's word (a Direct Line client can accept its own card with any URL), so each
refused one is shown to send nothing: a loopback `Tripwire` stands where it points, or as the
environment's proxy, the way a client that honours `HTTPS_PROXY` would have gone there. The person
gets the sentence an upload OneDrive refused gets (and a new card); the log, the URL without its query.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import httpx
import pytest
from pydantic import SecretStr

from bot import teams_app, url_vetting
from bot.server import create_app
from bot.teams_auth import build_bot
from tests.bot.teams_harness import CHAT, Teams, activity, consent_invoke
from tests.fakes.anthropic_api import text, tool
from tests.fakes.bot_connector import FakeConnector
from tests.fakes.microsoft_login import FakeLogin
from tests.fakes.tripwire import Tripwire

CSV = b"carrier,n\nF9,3\n"
WRITE_AND_ATTACH = [
    tool("run_python", {"code": "open('delays.csv', 'w').write('carrier,n\\nF9,3\\n')"}),
    tool("attach_file", {"path": "delays.csv"}),
    text("Attached."),
]
AGAIN = "I couldn't upload delays.csv to your OneDrive; accept this one to try again."
TOKEN = "t0ken-in-the-query"  # OneDrive's tempauth stands in the query: never in a log line

APP_ID = "11111111-2222-3333-4444-555555555555"
SECRET = "app-password-secret"


@pytest.fixture
def tripwire():
    fake = Tripwire().start()
    yield fake
    fake.stop()


async def offer_of_a_csv(teams: Teams, fake_model, **headers: str) -> dict:
    """A turn in personal chat that attaches delays.csv: the signed context of its consent card."""
    fake_model.enqueue(*WRITE_AND_ATTACH)
    before = len(teams.connector.sent())
    assert (
        await teams.post(activity(teams.connector.url, "a csv please", conversation=CHAT), **headers)
    ).status_code == 202
    await teams.state.runner.drain(timeout=60)
    cards = [a for m in teams.connector.sent()[before:] for a in m.get("attachments") or []]
    [card] = [a for a in cards if "file.consent" in a["contentType"]]
    return card["content"]["acceptContext"]


async def accept(teams: Teams, context: dict, url: str, **headers: str) -> dict:
    """Accept a new offer of the file (the same file, a card of its own) with `url` as uploadInfo's
    uploadUrl; the message the bot answered with."""
    offer = await teams.state.links.offer(context["session_id"], context["path"])
    invoke = consent_invoke(teams.connector.url, offer, "delays.csv", uploadUrl=url)
    assert (await teams.post(invoke, **headers)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    return teams.connector.sent()[-1]


async def refusals(teams: Teams, context: dict, urls: list[str], tripwire: Tripwire, **headers: str):
    """Each URL accepted in turn: how many connections reached the tripwire for it, and whether the
    person got the sentence and a new card for it."""
    reached, said = {}, {}
    for url in urls:
        before = tripwire.connections
        answer = await accept(teams, context, url, **headers)
        reached[url] = tripwire.connections - before
        cards = [a["contentType"] for a in answer.get("attachments") or []]
        said[url] = answer.get("text") == AGAIN and cards == [
            "application/vnd.microsoft.teams.card.file.consent"
        ]
    return reached, said


async def test_without_an_app_id_only_loopback_or_sharepoint_over_https_is_uploaded_to(
    teams, fake_model, tripwire, monkeypatch, caplog
):
    """No app id (the Emulator, these tests): loopback URLs pass, as the Bot Connector's address does
    there, and the fake OneDrive on loopback still takes the file. Nothing else but https to a
    SharePoint host with public addresses: the tripwire is every proxy the environment names, so a
    client that went anywhere for these URLs would have come through it."""
    monkeypatch.setenv("HTTPS_PROXY", f"http://{tripwire.address}")
    monkeypatch.setenv("HTTP_PROXY", f"http://{tripwire.address}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the fake Bot Connector and model stay direct
    real_resolve = url_vetting.resolve

    async def resolve(host: str, port: int) -> list[str]:  # the bot's own network, by a SharePoint name
        return ["10.1.2.3"] if host == "contoso-my.sharepoint.com" else await real_resolve(host, port)

    monkeypatch.setattr(url_vetting, "resolve", resolve)
    context = await offer_of_a_csv(teams, fake_model)
    urls = [
        f"http://ada:secret@{tripwire.address}/upload/delays.csv",  # loopback, but with a login
        f"https://evil.example/upload?tempauth={TOKEN}",  # not where OneDrive keeps files
        f"https://contoso-my.sharepoint.com.evil.example/u?tempauth={TOKEN}",  # SharePoint's name, not its host
        f"https://notsharepoint.com/u?tempauth={TOKEN}",
        f"http://169.254.169.254/latest/meta-data/?tempauth={TOKEN}",  # the cloud's metadata service
        f"http://contoso-my.sharepoint.com/personal/ada/u?tempauth={TOKEN}",  # SharePoint, not https
        f"https://contoso-my.sharepoint.com/personal/ada/u?tempauth={TOKEN}",  # resolving to 10.1.2.3
    ]
    with caplog.at_level(logging.WARNING, logger="datathread.teams"):
        reached, said = await refusals(teams, context, urls, tripwire)
    assert reached == dict.fromkeys(urls, 0)
    assert said == dict.fromkeys(urls, True)
    refused = [r.getMessage() for r in caplog.records if "upload URL was refused" in r.getMessage()]
    assert len(refused) == len(urls)
    assert "https://evil.example/upload" in caplog.text and "10.1.2.3" not in caplog.text
    assert TOKEN not in caplog.text and "secret" not in caplog.text
    # the control: the fake OneDrive (the Bot Connector's loopback address) still takes the file
    teams.connector.uploads.clear()
    answer = await accept(teams, context, f"{teams.connector.url}/upload/delays.csv")
    assert teams.connector.uploads == {"delays.csv": CSV}
    assert "file.info" in answer["attachments"][0]["contentType"]
    assert tripwire.connections == 0


@contextlib.asynccontextmanager
async def signed_teams(settings, tmp_path, monkeypatch):
    """The Teams app as deployed, with an app id: each request carries a channel token (from the fake
    Bot Connector's key) and the bot signs in at a fake Microsoft login to answer."""
    connector = FakeConnector().start()
    login = FakeLogin(tmp_path, client_id=APP_ID, client_secret=SECRET).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(login.ca_file))  # msal's `requests` trusts the fake
    monkeypatch.setattr(teams_app, "build_bot", functools.partial(build_bot, login_url=login.login_url))
    configured = settings.model_copy(
        update={
            "microsoft_app_id": APP_ID,
            "microsoft_app_password": SecretStr(SECRET),
            "microsoft_app_type": "MultiTenant",
            "bot_openid_metadata_url": connector.openid_url,
            "link_ttl_seconds": 120,
        }
    )
    app = create_app(configured)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
                yield Teams(app, client, connector, app.state.datathread)
    finally:
        connector.stop()
        login.stop()


async def test_with_an_app_id_nothing_goes_to_the_bots_own_host(
    settings, fake_model, tripwire, tmp_path, monkeypatch
):
    """As deployed (an app id), a URL on loopback — a service beside the bot: Redis, the cloud's
    agent — is refused like any address that is not public, over http or https, by address or name."""
    async with signed_teams(settings, tmp_path, monkeypatch) as teams:
        token = teams.connector.token(app_id=APP_ID, service_url=teams.connector.url)
        auth = {"authorization": f"Bearer {token}"}
        context = await offer_of_a_csv(teams, fake_model, **auth)
        urls = [
            f"http://{tripwire.address}/upload/delays.csv",
            f"https://{tripwire.address}/upload/delays.csv",
            f"https://localhost:{tripwire.port}/upload/delays.csv",
        ]
        reached, said = await refusals(teams, context, urls, tripwire, **auth)
    assert reached == dict.fromkeys(urls, 0)
    assert said == dict.fromkeys(urls, True)
