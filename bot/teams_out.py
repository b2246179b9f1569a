"""Where a Teams turn's messages go: `TeamsOut` sends, edits and streams activities in the one
conversation a question came from, each call bounded (bot/teams_connector.py) and signed in first
(bot/teams_login.py); `StreamInfo` is the entity of Teams' streaming protocol. What is sent — the
progress card, the answer and its cards — is bot/teams_progress.py's to decide; card clicks, commands
and file consent (bot/teams_clicks.py, bot/teams_jobs.py, bot/teams_consent.py) reply through it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes, ConversationReference, Entity

from bot import teams_connector as bf
from bot.teams_login import sign_in
from bot.teams_words import summary_of

# Why Teams refused a streaming update, or the message that closes a stream (both 403
# ContentStreamNotAllowed; the message tells them apart, https://learn.microsoft.com/microsoftteams/
# platform/bots/streaming-ux#response-codes):
STOPPED_BY_PERSON = "stopped"  # "Content stream was cancelled by user." — the person pressed Stop
TIMED_OUT = "timed out"  # "Content stream finished due to exceeded streaming time." — two minutes


def stream_refusal(exc: bf.ConnectorFailed) -> str:
    """STOPPED_BY_PERSON, TIMED_OUT or "" (any other refusal: streaming not allowed for this tenant or
    client, a message too large) for a refused streaming update or stream end. Teams' SDKs tell a
    person's Stop by the message too (microsoft/teams.py's http_stream); "canceled" is also seen."""
    if exc.status != 403 or exc.code != "ContentStreamNotAllowed":
        return ""
    try:
        said = str((exc.response.json().get("error") or {}).get("message") or "").lower()  # type: ignore[attr-defined]
    except Exception:  # no body, not JSON: not one we can tell
        return ""
    if "cancel" in said:
        return STOPPED_BY_PERSON
    return TIMED_OUT if "streaming time" in said else ""


class StreamInfo(Entity):
    """The `streaminfo` entity of Teams' streaming protocol (botbuilder's Entity keeps only `type`)."""

    _attribute_map = {
        "type": {"key": "type", "type": "str"},
        "stream_id": {"key": "streamId", "type": "str"},
        "stream_type": {"key": "streamType", "type": "str"},
        "stream_sequence": {"key": "streamSequence", "type": "int"},
    }

    def __init__(self, *, stream_type: str, stream_id: str = "", stream_sequence: int | None = None):
        super().__init__(type="streaminfo")
        self.stream_type, self.stream_id, self.stream_sequence = (
            stream_type,
            stream_id or None,
            stream_sequence,
        )


@dataclass
class TeamsOut:
    """Sends and edits activities in the one conversation a question came from (connector client).
    Every call is bounded (`bot/teams_connector.py`) and raises `ConnectorFailed`: a short one (typing,
    streaming, the progress card and its edits) waits PROGRESS_TIMEOUT_S and is never retried; a
    message waits SEND_TIMEOUT_S and is tried once more when Teams refuses it as transient."""

    connector: object  # botframework.connector.aio.ConnectorClient
    reference: ConversationReference

    @property
    def host(self) -> str:
        """The Bot Connector's host, for the log (smba.trafficmanager.net in Teams)."""
        return urlsplit(self.reference.service_url or "").hostname or ""

    def _address(self, activity: Activity) -> Activity:
        TurnContext.apply_conversation_reference(activity, self.reference)
        activity.reply_to_id = None  # post into the conversation (a channel thread is its own id)
        return activity

    async def _signed_in(self) -> None:
        """Have the token the SDK is about to read cached and good past msal's five-minute margin. A
        turn can outlive the token fetched as it began; msal would then fetch a new one inside the SDK's
        call, synchronously on the event loop, and a silent login froze every turn of the process while
        the failure was blamed on the Bot Connector. Here it is fetched off the loop, within its deadline,
        and a failure says "Microsoft sign-in" (bot/teams_login.py). A good cached token costs a look at
        msal's cache on the loop; at its expiry, one sign-in for all the turns that send at that moment."""
        credentials = getattr(getattr(self.connector, "config", None), "credentials", None)
        if getattr(credentials, "microsoft_app_id", None):  # no app id: the loopback-only mode, no token
            await sign_in(credentials)

    async def _post(self, activity: Activity, *, short: bool, answer: bool = False) -> str:
        conversations = self.connector.conversations  # type: ignore[attr-defined]
        conversation, activity = self.reference.conversation.id, self._address(activity)

        async def send(timeout: tuple[float, float]) -> object:
            await self._signed_in()  # each try: a retry may come after the token's margin ran out
            return await conversations.send_to_conversation(conversation, activity, timeout=timeout)

        response = await bf.call(
            send,
            read_s=bf.PROGRESS_TIMEOUT_S if short else bf.SEND_TIMEOUT_S,
            retry=not short,
            host=self.host,
            answer=answer,
        )
        return getattr(response, "id", "") or ""

    async def send(
        self,
        text: str = "",
        *,
        attachments: list[dict] | None = None,
        entities: list | None = None,
        short: bool = False,
        answer: bool = False,
    ) -> str:
        """Post a message (Markdown text and/or attachments); returns its activity id. `short`: bounded
        and tried like progress (a progress card; a sentence while the process stops). `answer`: the
        answer itself, which waits out a longer Retry-After (bot/teams_connector.py)."""
        activity = Activity(type=ActivityTypes.message, text=text or None, text_format="markdown")
        activity.summary = summary_of(text, attachments)  # a card alone: words, not "sent a card"
        if attachments:
            activity.attachments = attachments
        if entities:
            activity.entities = entities
        return await self._post(activity, short=short, answer=answer)

    async def update(self, activity_id: str, *, attachments: list[dict], text: str = "") -> None:
        """Edit a message we sent, in place (progress: bounded, never retried)."""
        activity = self._address(
            Activity(type=ActivityTypes.message, id=activity_id, text=text or None, attachments=attachments)
        )
        if text:  # as it was sent (an answer's last part, under its card)
            activity.text_format = "markdown"
        activity.summary = summary_of(text, attachments)
        conversations = self.connector.conversations  # type: ignore[attr-defined]
        conversation = self.reference.conversation.id

        async def edit(timeout: tuple[float, float]) -> object:
            await self._signed_in()
            return await conversations.update_activity(conversation, activity_id, activity, timeout=timeout)

        await bf.call(
            edit,
            read_s=bf.PROGRESS_TIMEOUT_S,
            retry=False,
            host=self.host,
        )

    async def stream(self, text: str, *, sequence: int, stream_id: str = "") -> str:
        """One streaming update: all the text so far; the first one's id is the stream's id."""
        info = StreamInfo(stream_type="streaming", stream_id=stream_id, stream_sequence=sequence)
        return await self._post(Activity(type=ActivityTypes.typing, text=text, entities=[info]), short=True)

    async def typing(self) -> None:
        """Show 'datathread is typing…' while the first step starts."""
        await self._post(Activity(type=ActivityTypes.typing), short=True)
