"""Teams as a test drives it: real-shaped Bot Framework activities POSTed to `/api/messages` of the
real app (`create_app`), whose botframework-connector client talks to a fake Bot Connector on loopback.
Shared by the Teams end-to-end tests and the cross-surface ones (help, access, votes, auth); the
`teams` fixture itself lives in tests/bot/conftest.py."""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette

from bot.server import AppState, create_app
from bot.teams_shared_files import FILE_DOWNLOAD_INFO
from core.runner import TurnJob
from core.schedules import teams_conversation_type
from tests.fakes.bot_connector import FakeConnector

BOT = {"id": "28:bot-app-id", "name": "datathread"}
ADA = {"id": "29:ada", "name": "Ada Lovelace", "aadObjectId": "aad-ada"}
THREAD = "19:general@thread.tacv2;messageid=1700000000001"
CHAT = "a:1personal-chat-ada"


def activity(
    service_url: str,
    text_: str = "",
    *,
    conversation: str = THREAD,
    value: dict | None = None,
    kind: str = "",
) -> dict:
    """A message activity as Teams sends it: in a channel thread or a group (or meeting) chat with an
    @-mention of the bot, in a personal chat without. `kind`: Teams' conversationType, else the one the
    id's shape says (`teams_conversation_type`). Only a channel's carries `channelData.channel` and
    `team`: any `19:` id was a channel here, so a group chat's had the general channel's, and its
    questions met that channel's settings (DATATHREAD_CHANNEL_DATASETS) instead of the chat's."""
    kind = kind or teams_conversation_type(conversation)
    channel = kind == "channel"
    body = {
        "type": "message",
        "id": f"{int(time.time() * 1000)}{uuid.uuid4().hex[:4]}",
        "timestamp": "2025-01-01T12:00:00.000Z",
        "serviceUrl": service_url,
        "channelId": "msteams",
        "from": ADA,
        "recipient": BOT,
        "conversation": {
            "id": conversation,
            "conversationType": kind,
            "isGroup": kind != "personal",
            "tenantId": "tenant-1",
        },
        "textFormat": "plain",
        "locale": "en-US",
        "channelData": {"tenant": {"id": "tenant-1"}},
    }
    if channel:
        body["channelData"].update(channel={"id": conversation.partition(";")[0]}, team={"id": "19:team"})
    if text_:
        mention = "<at>datathread</at>"  # where others read along, the bot hears only its mentions
        body["text"] = f"{mention} {text_}" if kind != "personal" else text_
        if kind != "personal":
            body["entities"] = [{"type": "mention", "mentioned": BOT, "text": mention}]
    if value is not None:
        body["value"] = value
    return body


def file_info(name: str, url: str) -> dict:
    """A file attached in personal chat, as Teams sends it (bots-filesv4)."""
    return {
        "contentType": FILE_DOWNLOAD_INFO,
        "contentUrl": f"https://contoso-my.sharepoint.com/personal/ada/Documents/Microsoft Teams Chat Files/{name}",
        "name": name,
        "content": {"downloadUrl": url, "uniqueId": "1150D938-8870-4044", "fileType": name.rsplit(".")[-1]},
    }


async def post(teams: Teams, body: dict) -> None:
    """POST one activity and wait for everything it started."""
    assert (await teams.post(body)).status_code == 202
    await teams.state.runner.drain(timeout=60)


def consent_invoke(service_url: str, context: object, name: str, **upload: str) -> dict:
    """The invoke Teams sends when the person accepts a file-consent card in personal chat: where to
    upload `name` (`upload`: more of uploadInfo's fields, as Teams fills them)."""
    invoke = activity(service_url, conversation=CHAT)
    info = {"uploadUrl": f"{service_url}/upload/{name}", "name": name, **upload}
    invoke.update(
        type="invoke",
        name="fileConsent/invoke",
        value={"type": "fileUpload", "action": "accept", "context": context, "uploadInfo": info},
    )
    return invoke


@dataclass
class Teams:
    app: Starlette
    client: httpx.AsyncClient
    connector: FakeConnector
    state: AppState

    async def post(self, body: dict, **headers: str) -> httpx.Response:
        started = time.monotonic()
        response = await self.client.post("/api/messages", json=body, headers=headers)
        assert time.monotonic() - started < 2.0  # ack first, work after
        return response

    async def say(self, text_: str, *, conversation: str = THREAD, value: dict | None = None) -> list[dict]:
        """Post one activity, wait for the turn, and return the activities the bot sent for it."""
        before = len(self.connector.sent())
        response = await self.post(
            activity(self.connector.url, text_, conversation=conversation, value=value)
        )
        assert response.status_code == 202
        await self.state.runner.drain(timeout=60)
        return self.connector.sent()[before:]


@contextlib.asynccontextmanager
async def serve_teams(settings):
    """The app's lifespan running in this event loop, its Bot Connector the fake one."""
    connector = FakeConnector().start()
    app = create_app(settings.model_copy(update={"link_ttl_seconds": 120}))
    state: AppState = app.state.datathread
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield Teams(app, client, connector, state)
    connector.stop()


class RecordingRunner:
    """A runner that only records the jobs accepted requests would start (with auth on, a refused
    request must start nothing)."""

    def __init__(self) -> None:
        self.jobs: list[TurnJob] = []

    def register(self, kind, handler) -> None:
        return None

    async def submit(self, job: TurnJob) -> None:
        self.jobs.append(job)

    async def drain(self, timeout=None) -> None:
        return None
