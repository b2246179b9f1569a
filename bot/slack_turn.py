"""The work Slack listeners hand to the runner: turns, button actions, exports and App Home.

Every job's payload is plain data (it can cross to a Modal function as-is); handlers rebuild what
they need from it: a Web API client from settings, the Analyst from `state.analyst`.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.schedule_slack import slack_user_tz
from bot.slack_confirm import build_confirmer
from bot.slack_progress import SlackProgress, SlackTarget
from core.config import Settings
from core.events import IncomingMessage
from core.runner import TurnJob
from core.sessions import session_id_for

log = logging.getLogger("datathread.slack")

JOB_TURN = "slack.turn"
JOB_MESSAGE = "slack.message"  # a message event: de-duplicated after the ack, then a turn
JOB_ACTION = "slack.action"
JOB_EXPORT = "slack.export"
JOB_HOME = "slack.home"
JOB_PROMPTS = "slack.prompts"

NOT_IN_CHANNEL = (
    "_I'm not a member of this channel, so only you can see this answer. "
    "Invite me with `/invite @datathread` to answer in the channel._"
)


def build_client(settings: Settings, session: aiohttp.ClientSession | None = None) -> AsyncWebClient:
    """The Web API client: the bot token, `DATATHREAD_SLACK_API_URL`, retries on HTTP 429."""
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    client = AsyncWebClient(token=token, base_url=settings.slack_api_url, session=session)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    return client


def client_for(state: Any) -> AsyncWebClient:
    """This process's shared client. One aiohttp session keeps connections alive across calls and turns;
    without it slack_sdk opens a new session (and TCP connection) for every single API call."""
    client = state.extras.get("slack_client")
    if client is None or client.session is None or client.session.closed:
        client = build_client(state.settings, aiohttp.ClientSession())
        state.extras["slack_client"] = client
    return client


async def close_client(state: Any) -> None:
    """Close the shared session at shutdown."""
    client = state.extras.pop("slack_client", None)
    if client is not None and client.session is not None:
        await client.session.close()


def register_jobs(state: Any) -> None:
    """Name the handlers of every Slack job kind on the state's runner (here and on remote workers)."""
    handlers = {
        JOB_TURN: run_turn,
        JOB_ACTION: run_action,
        JOB_EXPORT: run_export,
        JOB_HOME: publish_home,
        JOB_PROMPTS: set_prompts,
    }
    for kind, handler in handlers.items():
        state.runner.register(kind, _bind(handler, state))


def _bind(handler, state):
    async def run(job: TurnJob) -> None:
        await handler(state, job.payload)

    return run


async def run_turn(state: Any, p: dict) -> None:
    """One question → one turn, with progress, files and the answer in the thread."""
    client = client_for(state)
    private, thread_ts, note = bool(p.get("private")), p.get("thread_ts") or "", ""
    if p.get("slash") and not private:
        try:  # the question becomes the thread root, so follow-ups in its thread continue the session
            root = await client.chat_postMessage(
                channel=p["channel"], text=f"<@{p['user']}> asked: {render.escape(p['text'])}"
            )
            thread_ts = root["ts"]
        except SlackApiError as exc:
            log.info("slash command in %s: cannot post (%s); answering privately", p["channel"], exc)
            private, note = True, NOT_IN_CHANNEL
    key = (p["team"], p["channel"], thread_ts if not private else f"private:{p['user']}")
    target = SlackTarget(
        channel=p["channel"],
        thread_ts=thread_ts,
        team_id=p["team"],
        user_id=p["user"],
        private=private,
        response_url=p.get("response_url", ""),
    )
    message = IncomingMessage(
        text=p["text"],
        surface="slack",
        thread_key=key,
        user_id=p["user"],
        channel_id=p["channel"],
        team_id=p["team"],
        is_direct=bool(p.get("is_direct")),
        user_tz=await slack_user_tz(client, state.analyst.store, p["team"], p["user"]),
    )
    sink = SlackProgress(client, target, state.analyst.read_artifact)
    if note:
        sink.notes.append(note.strip("_"))
    confirm = build_confirmer(client, target, state.analyst.store)
    await state.analyst.handle(message, sink, confirm=confirm)


async def run_action(state: Any, p: dict) -> None:
    """A footer button: Show SQL & code, or 👍/👎. Replies are ephemeral to the person who clicked."""
    client = client_for(state)
    store = state.analyst.store
    turn_id, action = p["value"], p["action"]
    record = await store.get_turn(turn_id)
    if record is None or record.get("channel_id") != p["channel"]:
        messages = render.answer_messages("I no longer have the details of that answer.")
    elif action == render.ACTION_SHOW_SQL:
        messages = render.steps_messages(record)
    else:
        value = "up" if action == render.ACTION_FEEDBACK_UP else "down"
        await store.set_feedback(turn_id, user_id=p["user"], value=value)
        reply = await state.analyst.vote(
            record, user_id=p["user"], value=value
        )  # verified query / "what was wrong?"
        messages = render.answer_messages(reply)
    for msg in messages:
        await _ephemeral(client, p, msg)


async def run_export(state: Any, p: dict) -> None:
    """Export the thread's session as a notebook and upload it into the thread."""
    client = client_for(state)
    try:
        from core.notebook import notebook_bytes
    except ImportError:
        await _ephemeral(client, p, {"text": "Notebook export is not available yet."})
        return
    record = await state.analyst.store.get_turn(p["value"])
    if record is None or record.get("channel_id") != p["channel"]:
        await _ephemeral(client, p, {"text": "I no longer have that conversation."})
        return
    session_id = record["session_id"]
    if p.get("ephemeral") or is_private_session(record):
        # A private answer's session must never be uploaded into the channel for everyone to see.
        await _ephemeral(client, p, {"text": "Private answers can't be exported into the channel."})
        return
    data = await notebook_bytes(state.analyst, session_id)
    await client.files_upload_v2(
        channel=p["channel"],
        thread_ts=p.get("thread_ts") or None,
        file=data,
        filename=f"datathread-{session_id}.ipynb",
        title="This thread as a notebook",
    )


def is_private_session(record: dict) -> bool:
    """True when the turn belongs to someone's `/ask private` session (keyed `private:<user>`)."""
    key = (record.get("team_id") or "", record.get("channel_id") or "", f"private:{record.get('user_id')}")
    return record.get("session_id") == session_id_for("slack", key)


async def _ephemeral(client: AsyncWebClient, p: dict, msg: dict) -> None:
    await client.chat_postEphemeral(
        channel=p["channel"], user=p["user"], thread_ts=p.get("thread_ts") or None, **msg
    )


async def publish_home(state: Any, p: dict) -> None:
    """App Home: what datathread does, the tables it sees, and example questions."""
    analyst = state.analyst
    tables = await analyst.parts.warehouse.list_tables(analyst.access.datasets)
    view = render.home_view(tables, list(render.EXAMPLE_QUESTIONS), state.settings.slash_command)
    await client_for(state).views_publish(user_id=p["user"], view=view)


async def set_prompts(state: Any, p: dict) -> None:
    """Suggested prompts when someone opens an assistant thread (DM) with datathread."""
    await client_for(state).assistant_threads_setSuggestedPrompts(
        channel_id=p["channel"],
        thread_ts=p["thread_ts"],
        title="Try asking",
        prompts=render.suggested_prompts(),
    )
