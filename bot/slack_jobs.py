"""The work Slack listeners hand to the runner: turns, button actions, exports and App Home.

Every job's payload is plain data (it can cross to a Modal function as-is); handlers rebuild what
they need from it: the process's shared Web API client, the core through `state.threads`.
"""

from __future__ import annotations

import contextlib
import logging

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_blocks
from bot import slack_render as render
from bot.slack_access import asker, clicker, refused_click, tell_clicker
from bot.slack_client import (
    SharedClient,
    SlackCallFailed,
    answer_via_response_url,
    failure_words,
    slack_error,
)
from bot.slack_confirm import build_confirmer
from bot.slack_file_deleted import note_fetched
from bot.slack_progress import SlackProgress
from bot.slack_shared_files import (
    fetch_shared_files,
    file_refs,
    looked_up,
    none_readable,
    refused_by_name,
    unreadable_note,
)
from bot.slack_slash_threads import find_question, post_question, thread_team
from bot.slack_target import SlackTarget
from bot.surface import AppState
from core.events import IncomingMessage, SharedFile
from core.help import FILES_NOT_READ, is_local, is_reset
from core.runner import ERROR_ID, STORE_DOWN, STORE_DOWN_TEXT, WHY, TurnJob
from core.runner_worker import lost_kind
from core.sessions import StoreUnavailable, session_id_for
from core.thread import NOTEBOOK_NAME, NOTEBOOK_TITLE, Threads
from core.turn_records import NothingToExport

log = logging.getLogger("datathread.slack")

JOB_TURN = "slack.turn"
JOB_MESSAGE = "slack.message"  # a message event: de-duplicated after the ack, then a turn
JOB_ACTION = "slack.action"
JOB_EXPORT = "slack.export"
JOB_HOME = "slack.home"
JOB_PROMPTS = "slack.prompts"

STOPPED = (
    ":warning: I stopped before finishing this answer (the process running it ended). "
    "Please ask again — the thread still works."
)
STORE_UNREACHABLE = f":warning: {STORE_DOWN_TEXT}"
NOT_IN_CHANNEL = (
    "_I'm not a member of this channel, so only you can see this answer. "
    "Invite me with `/invite @datathread` to answer in the channel._"
)


def answered_privately(refused: SlackApiError) -> str:
    """Why a slash command's answer is for the asker alone, in Slack's reason: a read-only channel
    the bot is a member of was told "I'm not a member of this channel… invite me", which nobody
    could act on."""
    if slack_error(refused) == "not_in_channel":
        return NOT_IN_CHANNEL
    why = failure_words(refused, for_people=True)
    return f"_I can't post in this channel ({why}), so only you can see this answer._"


def register_jobs(state: AppState, shared: SharedClient) -> None:
    """Name the handlers of every Slack job kind on the state's runner (here and on remote workers)."""
    handlers = {
        JOB_TURN: run_turn,
        JOB_ACTION: run_action,
        JOB_EXPORT: run_export,
        JOB_HOME: publish_home,
        JOB_PROMPTS: set_prompts,
    }
    for kind, handler in handlers.items():
        state.runner.register(kind, _bind(handler, state, shared))
    # a worker died with the turn: the thread must not stay silent
    state.runner.register(lost_kind(JOB_TURN), _bind(tell_stopped, state, shared))
    state.runner.register(lost_kind(JOB_MESSAGE), _bind(tell_message_stopped, state, shared))


def _bind(handler, state: AppState, shared: SharedClient):
    async def run(job: TurnJob) -> None:
        await handler(state, shared.get(), job.payload)

    return run


async def run_turn(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """One question → one turn, with progress, files and the answer in the thread. Someone the access
    rules refuse hears that alone: no word about their files, and nothing asked of Slack about them.
    The asker is judged by their own workspace (bot/slack_access.py); the thread's session by
    `p["team"]` (bot/slack_slash_threads.py)."""
    threads, limit_mb, refs = state.threads, state.settings.shared_file_mb, file_refs(p.get("files"))
    who = await asker(client, threads, p, tz=True)  # one users.info, kept a day: time zone and standing
    denied = threads.refused(clicker(p, who))
    if refs and p.get("said_nothing") and not denied:
        refs = await looked_up(client, refs)  # a Slack Connect file's name comes from files.info
        if none_readable(refs):
            return await tell_unreadable(client, p, refs, limit_mb)  # a screenshot alone: not a question
    private, thread_ts, note = bool(p.get("private")), p.get("thread_ts") or "", ""
    if (p.get("slash") and is_local(p["text"])) or denied:
        private = True  # help, or a refusal: for the person alone (a mention's refusal was streamed publicly)
    if p.get("slash") and not private:
        try:  # the question becomes the thread root, so follow-ups in its thread continue the session
            thread_ts = await post_question(client, threads, p)
        except SlackApiError as exc:
            log.info(
                "slash command in %s: cannot post (%s); answering privately", p["channel"], failure_words(exc)
            )
            private, note = True, answered_privately(exc)
        except SlackCallFailed as exc:  # its response_url may still reach the person
            log.warning(
                "slash command in %s: question not posted (%s); answering privately", p["channel"], exc
            )
            private = True
    if p.get("is_direct") and not p.get("slash"):
        # A DM is one conversation, typed top-level (the Messages tab, where each message began a new
        # one) or in the thread under an answer; a fresh one after 8 idle hours or `reset`, as Teams chats.
        base = (p["team"], p["channel"], "dm")
        if is_reset(p["text"]) and not denied:  # refused: the core says why, as for a question
            fresh = await threads.reset("slack", base)  # what it deleted, in its words
            typed_in = p.get("thread_ts") if p.get("thread_ts") != p.get("ts") else None
            said = f"{fresh} {FILES_NOT_READ}" if refs else fresh  # never dropped unsaid
            with contextlib.suppress(SlackClientError):  # where it was typed: top level, or the thread
                await client.chat_postMessage(channel=p["channel"], thread_ts=typed_in, text=said)
            return
        key = await threads.current_key("slack", base, idle_reset=True)
    else:
        key = (p["team"], p["channel"], thread_ts if not private else f"private:{p['user']}")
    target = SlackTarget(
        channel=p["channel"],
        thread_ts=thread_ts,
        team_id=who.team,  # the stream's `recipient_team_id`: the asker's workspace
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
        team_id=who.team,
        enterprise_id=who.enterprise,
        is_direct=bool(p.get("is_direct")),
        user_tz=who.tz,
        outsider=who.outsider,
        # None of a kind it reads (a screenshot): refused by name, not fetched, so `help` stays help
        files=refused_by_name(refs, limit_mb=limit_mb) if refs and none_readable(refs) else (),
    )
    sink = SlackProgress(client, target, threads.read_artifact, on_stream=_stream_noter(threads, p))
    if note:
        sink.notes.append(note.strip("_"))
    confirm = build_confirmer(client, target, threads)

    async def fetch() -> tuple[SharedFile, ...]:
        """Called by the core once this turn holds its thread's lock, after its checks (a refused or
        rate-limited person downloads nothing); the thread's status says so meanwhile."""
        files = await fetch_shared_files(
            client, refs, limit_mb=limit_mb, total_mb=state.settings.shared_files_mb, status=sink.status
        )
        await note_fetched(state, state.analyst.session_id(message), refs, files)  # for `file_deleted`
        return files

    fetching = bool(refs) and not message.files  # a file that may be one it reads: fetched in the turn
    await state.analyst.handle(message, sink, confirm=confirm, fetch_files=fetch if fetching else None)


async def tell_unreadable(client: AsyncWebClient, p: dict, refs: list[dict], limit_mb: int) -> None:
    """Files and no words, none of a kind the bot reads (a colleague's screenshot in the thread): why
    each is not read, in its thread, and no turn. A CSV alone is a question about it (`run_turn`)."""
    with contextlib.suppress(SlackClientError):
        await client.chat_postMessage(
            channel=p["channel"],
            thread_ts=p.get("thread_ts") or None,
            text=unreadable_note(refs, limit_mb=limit_mb),
        )


def _stream_key(p: dict) -> str | None:
    """What names a turn's answer stream for its lost handler: the slash command's job, or the message."""
    if p.get("job"):
        return f"slack:stream:{p['job']}"
    return f"slack:stream:{p['channel']}:{p['ts']}" if p.get("ts") else None


def _stream_noter(threads: Threads, p: dict):
    """Keeps the answer stream's ts: if this worker dies, the lost handler ends that stream with the
    notice (it was left open — "is typing" for good — while the notice came as a message below it)."""
    key = _stream_key(p)
    if key is None:
        return None

    async def noted(ts: str) -> None:
        with contextlib.suppress(StoreUnavailable):  # the turn says so itself when it saves
            await threads.note(key, ts)

    return noted


async def tell_stopped(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """The worker running this turn died: say so where the answer would have gone — for a slash
    command, the thread under its question (posted now if the worker died before Slack took it).
    A Slack that refuses or does not answer that too is one log line (it was the runner's traceback)."""
    try:
        await _tell_stopped(state, client, p)
    except SlackClientError as exc:
        log.warning(
            "slack: could not tell %s in %s that the answer stopped: %s", p.get("user"), p.get("channel"), exc
        )


async def _tell_stopped(state: AppState, client: AsyncWebClient, p: dict) -> None:
    if p.get(WHY) == STORE_DOWN:
        return await tell_store_down(client, p)
    said = slack_blocks.failure_text(STOPPED.removeprefix(":warning: "), p.get(ERROR_ID, ""))  # the log's id
    if p.get("private"):
        await client.chat_postEphemeral(channel=p["channel"], user=p["user"], text=said)
        return
    thread_ts = p.get("thread_ts") or ""
    if p.get("slash") and not thread_ts:
        try:
            thread_ts = await find_question(client, state.threads, p) or await post_question(
                client, state.threads, p
            )
        except SlackApiError:  # not a member of the channel: the answer would have been private
            await client.chat_postEphemeral(channel=p["channel"], user=p["user"], text=said)
            return
    stream = None
    if key := _stream_key(p):
        with contextlib.suppress(StoreUnavailable):  # then the notice comes as a message, as before
            stream = await state.threads.noted(key)
    if stream:
        try:  # the answer's stream, left open by the worker that died: ended with the notice
            await client.chat_stopStream(channel=p["channel"], ts=stream, markdown_text=said)
            return
        except SlackApiError as exc:  # no longer streaming (Slack ended it): the notice as a message
            log.info(
                "slack: the stream %s could not be ended (%s); posting the notice", stream, failure_words(exc)
            )
    await client.chat_postMessage(channel=p["channel"], thread_ts=thread_ts or None, text=said)


async def tell_store_down(client: AsyncWebClient, p: dict) -> None:
    """The job could not start: the session store is unreachable. Said without asking the store
    anything: in the thread of the message, or only to the asker for a slash command (its question
    was never posted) — through the command's response_url, which, unlike chat.postEphemeral, works
    in a channel the bot is not a member of. A follow-up without a mention may be in a thread
    datathread is not part of (only the store knows): not answered, the log line says why."""
    if p.get("follow_up_only"):
        return
    if p.get("response_url"):
        await answer_via_response_url(
            client,
            p["response_url"],
            what=f"The store-outage notice for {p['user']} in {p['channel']}",
            response_type="ephemeral",
            replace_original=False,
            text=STORE_UNREACHABLE,
        )
        return
    if p.get("private") or p.get("slash"):
        await client.chat_postEphemeral(channel=p["channel"], user=p["user"], text=STORE_UNREACHABLE)
        return
    await client.chat_postMessage(
        channel=p["channel"], thread_ts=p.get("thread_ts") or None, text=STORE_UNREACHABLE
    )


async def tell_message_stopped(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """A message's job died with its worker: said where a turn would have answered — not for a
    follow-up in a thread datathread is not part of, which would have been ignored."""
    if p.get(WHY) == STORE_DOWN:
        return await tell_store_down(client, p)
    thread = (await thread_team(state.threads, p), p["channel"], p["thread_ts"])
    if p.get("follow_up_only") and not await state.threads.follows_up("slack", thread, p["user"]):
        return
    await tell_stopped(state, client, p)


async def run_action(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """A footer button: Show SQL & code, or 👍/👎. Replies are ephemeral to the person who clicked."""
    threads = state.threads
    if await refused_click(threads, client, p):
        return
    record = await threads.turn(p["value"], channel_id=p["channel"])
    if record is None:
        messages = render.answer_messages("I no longer have the details of that answer.")
    elif p["action"] == slack_blocks.ACTION_SHOW_SQL:
        messages = slack_blocks.steps_messages(record)
    else:  # a 👍 saves a verified query, a 👎 asks what was wrong
        value = "up" if p["action"] == slack_blocks.ACTION_FEEDBACK_UP else "down"
        messages = render.answer_messages(await threads.vote(record, user_id=p["user"], value=value))
    for msg in messages:
        await tell_clicker(client, p, msg)


async def run_export(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """Export the thread's session as a notebook and upload it into the thread."""
    if await refused_click(state.threads, client, p):
        return
    record = await state.threads.turn(p["value"], channel_id=p["channel"])
    if record is None:
        await tell_clicker(client, p, {"text": "I no longer have that conversation."})
        return
    session_id = record["session_id"]
    if p.get("ephemeral") or is_private_session(record):
        # A private answer's session must never be uploaded into the channel for everyone to see.
        await tell_clicker(client, p, {"text": "Private answers can't be exported into the channel."})
        return
    try:
        data = await state.threads.export_notebook(session_id)
    except NothingToExport as exc:
        await tell_clicker(client, p, {"text": render.escape(str(exc))})
        return
    await client.files_upload_v2(
        channel=p["channel"],
        thread_ts=p.get("thread_ts") or None,
        file=data,
        filename=NOTEBOOK_NAME,  # as "export this as a notebook" names it: one export, two ways to ask
        title=NOTEBOOK_TITLE,
    )


def is_private_session(record: dict) -> bool:
    """True when the turn belongs to someone's `/ask private` session (keyed `private:<user>`)."""
    key = (record.get("team_id") or "", record.get("channel_id") or "", f"private:{record.get('user_id')}")
    return record.get("session_id") == session_id_for("slack", key)


async def publish_home(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """App Home: what datathread does, the tables it sees, and example questions."""
    tables = await state.threads.list_tables()
    view = slack_blocks.home_view(tables, list(slack_blocks.EXAMPLE_QUESTIONS), state.settings.slash_command)
    await client.views_publish(user_id=p["user"], view=view)


async def set_prompts(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """Suggested prompts when someone opens an assistant thread (DM) with datathread."""
    await client.assistant_threads_setSuggestedPrompts(
        channel_id=p["channel"],
        thread_ts=p["thread_ts"],
        title="Try asking",
        prompts=slack_blocks.suggested_prompts(),
    )
