"""The Teams turn, run by the runner after `/api/messages` answered: continue the conversation
proactively (a stored conversation reference), then answer a question, run a command (`new`/`reset`,
`help`), or handle a card action (Show SQL & code, 👍/👎, Export notebook, Run/Cancel, file consent).

Sessions: a channel thread (conversation id `…;messageid=<root>`) is one session; a group or personal
chat is one session per *generation* — `new`/`reset` or 8 idle hours start the next generation.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from typing import TYPE_CHECKING

import httpx
from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes

from bot import teams_render as render
from bot.teams_sink import TeamsOut, TeamsSink
from core.confirm import ask, give_answer, wait_for_answer
from core.events import ConfirmRequest, IncomingMessage
from core.runner import TurnJob
from core.sessions import SessionStore, session_id_for

if TYPE_CHECKING:
    from bot.server import AppState
    from bot.teams_app import TeamsBot

log = logging.getLogger("datathread.teams")

IDLE_RESET_S = 8 * 3600
CONFIRM_TIMEOUT_S = 300.0
RESET_WORDS = {"new", "reset", "/new", "/reset", "new chat", "start over"}
WELCOME = (
    "Hi, I'm **datathread**. Ask me data questions here and I'll query the warehouse, run the analysis "
    "and reply with the answer, charts and CSVs. Try: *which carriers had the most delayed departures? "
    "chart it*, then follow up in the same thread: *only the top 3, as a CSV*. In channels, @-mention me."
)


async def run_job(bot: TeamsBot, state: AppState, job: TurnJob) -> None:
    """Continue the activity's conversation proactively and handle the activity in it."""
    activity = Activity().deserialize(job.payload["activity"])
    reference = TurnContext.get_conversation_reference(activity)

    async def logic(context: TurnContext) -> None:
        connector = context.turn_state[bot.connector_key()]
        out = TeamsOut(connector=connector, reference=reference)
        try:
            await dispatch(bot, state, activity, out)
        finally:  # msrest's async ConnectorClient has no close(): __aexit__ closes its requests.Session
            await connector.__aexit__(None, None, None)

    await bot.adapter.continue_conversation(reference, logic, bot_app_id=bot.app_id)


async def dispatch(bot: TeamsBot, state: AppState, activity: Activity, out: TeamsOut) -> None:
    """Route one activity: file consent, a card action, a command, or a question."""
    if activity.type == ActivityTypes.invoke and activity.name == "fileConsent/invoke":
        await _file_consent(state, activity, out)
        return
    value = activity.value if isinstance(activity.value, dict) else {}
    if activity.type == ActivityTypes.message and render.ACTION_KEY in value:
        await _card_action(bot, state, activity, value, out)
        return
    if activity.type == ActivityTypes.conversation_update:
        await out.send(WELCOME)  # only bot-added updates get this far (teams_app.bot_was_added)
        return
    if activity.type != ActivityTypes.message:
        return
    text = question_text(activity)
    if text.lower().strip(" .!") in RESET_WORDS:
        await new_generation(state, activity)
        await out.send("Started a fresh conversation — earlier questions here are forgotten.")
    else:  # `help` and an empty message too: the core answers those without the model
        await _answer(bot, state, activity, text, out)


def question_text(activity: Activity) -> str:
    """The text without the bot's @-mention (Teams sends `<at>name</at>` plus a mention entity)."""
    text = activity.text or ""
    if activity.entities and activity.recipient:
        with contextlib.suppress(KeyError, TypeError, AttributeError):  # malformed entity: keep raw text
            text = TurnContext.remove_recipient_mention(activity) or ""
    text = re.sub(r"<at>(.*?)</at>", r"\1", text)  # other people's mentions keep their names
    return re.sub(r"\s+", " ", text).strip()


def tenant_of(activity: Activity) -> str:
    if activity.conversation and activity.conversation.tenant_id:
        return activity.conversation.tenant_id
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    return str((data.get("tenant") or {}).get("id", ""))


def is_channel(activity: Activity) -> bool:
    return bool(activity.conversation and activity.conversation.conversation_type == "channel")


def is_personal(activity: Activity) -> bool:
    return bool(activity.conversation and activity.conversation.conversation_type == "personal")


def _pointer_id(activity: Activity) -> str:
    return session_id_for("teams", ("generation", tenant_of(activity), activity.conversation.id))


def _key(activity: Activity, generation: int) -> tuple[str, ...]:
    base = (tenant_of(activity), activity.conversation.id)
    return (*base, f"g{generation}") if generation else base


async def thread_key(state: AppState, activity: Activity, *, now: float | None = None) -> tuple[str, ...]:
    """The session key of this conversation; chats idle for 8 hours move to a fresh generation."""
    store = state.analyst.store
    meta = await store.get_meta(_pointer_id(activity)) or {}
    generation = int(meta.get("generation", 0))
    key = _key(activity, generation)
    if not is_channel(activity):
        session = await store.get_meta(session_id_for("teams", key))
        if session and (now or time.time()) - float(session.get("updated", 0)) > IDLE_RESET_S:
            key = _key(activity, await new_generation(state, activity))
    return key


async def new_generation(state: AppState, activity: Activity) -> int:
    """Start a fresh session for this conversation (the old one stays in the store for audit)."""
    store = state.analyst.store
    meta = await store.get_meta(_pointer_id(activity)) or {}
    generation = int(meta.get("generation", 0)) + 1
    await store.update_meta(_pointer_id(activity), generation=generation, surface="teams")
    return generation


def _user_id(activity: Activity) -> str:
    who = activity.from_property
    return (who.aad_object_id or who.id or "") if who else ""


def _channel_id(activity: Activity) -> str:
    data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    channel = (data.get("channel") or {}).get("id")
    return channel or activity.conversation.id.split(";", 1)[0]


async def _answer(bot: TeamsBot, state: AppState, activity: Activity, text: str, out: TeamsOut) -> None:
    message = IncomingMessage(
        text=text,
        surface="teams",
        thread_key=await thread_key(state, activity),
        user_id=_user_id(activity),
        channel_id=_channel_id(activity),
        team_id=tenant_of(activity),
        user_name=activity.from_property.name if activity.from_property else "",
        is_direct=is_personal(activity),
        user_tz=activity.local_timezone or "",  # Teams sends the client's IANA zone with each message
    )
    await out.typing()
    sink = TeamsSink(state=state, out=out, personal=is_personal(activity))
    await state.analyst.handle(
        message, sink, confirm=_confirmer(state.analyst.store, out, _user_id(activity))
    )


def _confirmer(store: SessionStore, out: TeamsOut, asker: str):
    """Ask with a Run/Cancel card; the answer arrives through the store (any replica may get the click)."""

    async def confirm(request: ConfirmRequest) -> bool:
        key = f"{request.turn_id}:{request.step_id}"
        await ask(store, key, asker=asker)
        await out.send(attachments=[render.confirm_card(request.prompt, key, request.yes)])
        answer = await wait_for_answer(store, key, timeout_s=CONFIRM_TIMEOUT_S)
        if answer is None:
            await out.send("No answer, so I skipped that query.")
        return bool(answer)

    return confirm


async def _card_action(
    bot: TeamsBot, state: AppState, activity: Activity, value: dict, out: TeamsOut
) -> None:
    action = value.get(render.ACTION_KEY)
    if action == "confirm":
        run = value.get("answer") == "run"
        user = _user_id(activity)
        result = await give_answer(
            state.analyst.store,
            str(value.get("key")),
            run=run,
            user_id=user,
            admin=state.analyst.access.is_admin(user),
        )
        if result != "ok":
            await out.send(
                "Only the person who asked (or an admin) can run or cancel this query."
                if result == "not yours"
                else "That question has already been answered or has expired."
            )
            return
        await out.send("Running it." if value.get("answer") == "run" else "Cancelled.")
        return
    store = state.analyst.store
    record = await store.get_turn(str(value.get("turn_id", "")))
    if record is not None and record.get("channel_id") != _channel_id(activity):
        record = None  # a turn of another conversation: never show it here
    if action == "show_steps":
        await out.send(render.steps_markdown(record))
    elif action == "feedback" and record is not None:
        vote = "up" if value.get("value") == "up" else "down"
        await store.set_feedback(record["turn_id"], user_id=_user_id(activity), value=vote)
        await out.send(await state.analyst.vote(record, user_id=_user_id(activity), value=vote))
    elif action == "export_notebook" and record is not None:
        await _export_notebook(state, record, out)
    else:
        await out.send("I can't find that answer any more.")


async def _export_notebook(state: AppState, record: dict, out: TeamsOut) -> None:
    from bot import files

    try:
        from core.notebook import notebook_bytes
    except ImportError:
        await out.send("Notebook export is not available yet.")
        return
    session_id = record["session_id"]
    try:
        data = await notebook_bytes(state.analyst, session_id)
    except LookupError as exc:  # core.notebook.NothingToExport: one sentence for a person
        await out.send(str(exc))
        return
    path = f"exports/{record['turn_id']}.ipynb"
    await state.analyst.parts.sandbox.write_file(session_id, path, data)
    url = await files.download_link(state, session_id, path, data)
    await out.send(render.link_text("notebook.ipynb", url, state.settings.link_ttl_seconds))


async def _file_consent(state: AppState, activity: Activity, out: TeamsOut) -> None:
    """The person accepted (or declined) a CSV in personal chat: upload it to their OneDrive.
    https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4"""
    from bot import files

    value = activity.value if isinstance(activity.value, dict) else {}
    context = value.get("context") or {}
    session_id, path = str(context.get("session_id", "")), str(context.get("path", ""))
    if value.get("action") != "accept":
        await out.send(f"OK, I won't upload {path.rsplit('/', 1)[-1]}.")
        return
    problem = files.signer_for(state).check(
        session_id, path, str(context.get("exp", "")), str(context.get("sig", ""))
    )
    info = value.get("uploadInfo") or {}
    if problem or not info.get("uploadUrl"):
        await out.send("That file offer has expired; ask again and I'll make a new one.")
        return
    data = await state.analyst.parts.sandbox.read_file(session_id, path)
    headers = {"Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}"}
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.put(info["uploadUrl"], content=data, headers=headers)
    if response.status_code >= 300:
        log.warning("teams: file upload failed with HTTP %s", response.status_code)
        await out.send("I couldn't upload the file to your OneDrive. Please try again.")
        return
    await out.send(attachments=[render.file_info_card(info)])
