"""The Teams turn, run by the runner after `/api/messages` answered: continue the conversation
proactively (a stored conversation reference), then answer a question, run a command (`new`/`reset`,
`help`, `schedule …`), or hand a card click to bot/teams_clicks.py and a file consent to
bot/teams_consent.py.

Sessions: a channel thread (conversation id `…;messageid=<root>`) is one session; a group or personal
chat is one session per *generation* — `new`/`reset` or 8 idle hours start the next generation.
"""

from __future__ import annotations

import contextlib
import html
import logging
import re

from botbuilder.core import TurnContext
from botbuilder.schema import Activity, ActivityTypes

from bot import teams_render as render
from bot.surface import AppState
from bot.teams_auth import TeamsBot
from bot.teams_clicks import card_action, confirmer
from bot.teams_connector import ConnectorFailed
from bot.teams_consent import file_consent
from bot.teams_files import refusal_words
from bot.teams_later import REST_KIND, say_rest_lost, send_rest
from bot.teams_members import asker
from bot.teams_out import TeamsOut
from bot.teams_progress import TeamsSink
from bot.teams_shared_files import has_files, none_readable, shared_files, unreadable_note
from bot.teams_votes import keep_answer_card
from bot.teams_who import (
    base,
    channel_id,
    home,
    is_channel,
    is_personal,
    locale_of,
    mention_name,
    tenant_of,
    user_id,
)
from core.events import IncomingMessage, SharedFile
from core.help import FILES_NOT_READ, is_reset
from core.runner import ERROR_ID, STORE_DOWN, STORE_DOWN_TEXT, WHY, TurnJob
from core.schedules_manage import ManageCommand, manage, parse_manage
from core.thread import Threads

log = logging.getLogger("datathread.teams")

STOPPED = (
    "I stopped before finishing this answer (the process running it ended). "
    "Please ask again — the conversation still works."
)
STORE_UNREACHABLE = STORE_DOWN_TEXT
WELCOME = (
    "Hi, I'm **datathread**. Ask me data questions here and I'll query the warehouse, run the analysis "
    "and reply with the answer, charts and CSVs. Try: *which carriers had the most delayed departures? "
    "chart it*, then follow up: *only the top 3, as a CSV*. In channels and group chats I only see "
    "messages that @-mention me, so mention me in the thread for each follow-up too."
)


async def run_job(bot: TeamsBot, state: AppState, job: TurnJob) -> None:
    """Continue the activity's conversation proactively and handle the activity in it."""
    activity = Activity().deserialize(job.payload["activity"])

    async def work(out: TeamsOut) -> None:
        try:
            await dispatch(state, activity, out)
        except ConnectorFailed as exc:  # a reply to a card click or a command: logged by _continue
            await _not_sent(out, exc)
            raise

    await _continue(bot, activity, work)


async def _not_sent(out: TeamsOut, exc: ConnectorFailed) -> None:
    """A reply Teams did not take (too large, refused, no answer) is said in one sentence where Teams
    takes any: "Show SQL & code" on a large turn did nothing at all. Not where the bot was removed
    (403/404): nothing reaches that conversation."""
    if exc.gone or exc.status is None:  # removed; or no answer in time, and it may have arrived
        return
    with contextlib.suppress(ConnectorFailed):
        await out.send(f"I couldn't send my reply here ({refusal_words(exc)}).", short=True)


async def run_lost(bot: TeamsBot, state: AppState, job: TurnJob) -> None:
    """The worker handling this activity died (or, with `why`, the store was unreachable): a question
    hears that its answer stopped, or could not start."""
    del state
    activity = Activity().deserialize(job.payload["activity"])
    stopped = f"{STOPPED} (error id `{job.payload[ERROR_ID]}`)" if job.payload.get(ERROR_ID) else STOPPED
    text = STORE_UNREACHABLE if job.payload.get(WHY) == STORE_DOWN else stopped
    if activity.type == ActivityTypes.message and ((activity.text or "").strip() or has_files(activity)):
        # short: at shutdown this has TELL_LOST_S in all, and a silent Bot Connector must not take them
        await _continue(bot, activity, lambda out: out.send(text, short=True))


async def run_rest(bot: TeamsBot, state: AppState, job: TurnJob) -> None:
    """The rest of an answer Teams throttled part-way, after its turn (bot/teams_later.py)."""
    activity, turn_id = Activity().deserialize(job.payload["activity"]), str(job.payload.get("turn_id"))

    async def kept(activity_id: str, text: str, attachments: tuple[dict, ...]) -> None:
        await keep_answer_card(state.threads, turn_id, activity_id, text, attachments)  # for its votes

    await _continue(bot, activity, lambda out: send_rest(out, job.payload, kept))


async def run_rest_lost(bot: TeamsBot, state: AppState, job: TurnJob) -> None:
    """The process sending the rest of an answer stopped first: the progress card says what did not
    arrive, where it said the rest follows."""
    del state
    activity = Activity().deserialize(job.payload["activity"])
    await _continue(bot, activity, lambda out: say_rest_lost(out, job.payload))


async def _continue(bot: TeamsBot, activity: Activity, work) -> None:
    reference = TurnContext.get_conversation_reference(activity)

    async def logic(context: TurnContext) -> None:
        connector = context.turn_state[bot.connector_key()]
        out = TeamsOut(connector=connector, reference=reference)
        try:
            await work(out)
        except ConnectorFailed as exc:  # a reply outside a turn's answer (welcome, a card's reply)
            log.warning("teams: a reply did not reach conversation %s: %s", reference.conversation.id, exc)
        finally:  # msrest's async ConnectorClient has no close(): __aexit__ closes its requests.Session
            await connector.__aexit__(None, None, None)

    try:
        await bot.adapter.continue_conversation(reference, logic, bot_app_id=bot.app_id)
    except ConnectorFailed as exc:  # no connector at all: signing in to send failed (bot/teams_login.py)
        log.warning("teams: nothing could be sent to conversation %s: %s", reference.conversation.id, exc)


async def dispatch(state: AppState, activity: Activity, out: TeamsOut) -> None:
    """Route one activity: file consent, a card action, a command, or a question."""
    if activity.type == ActivityTypes.invoke and activity.name == "fileConsent/invoke":
        await file_consent(state, activity, out)
        return
    value = activity.value if isinstance(activity.value, dict) else {}
    if activity.type == ActivityTypes.message and render.ACTION_KEY in value:
        await card_action(state, activity, value, out)
        return
    if activity.type == ActivityTypes.conversation_update:
        await out.send(WELCOME)  # only bot-added updates get this far (teams_app.bot_was_added)
        return
    if activity.type != ActivityTypes.message:
        return
    text = question_text(activity)
    who = await asker(state.threads, activity, out)  # once per message: Teams may be asked who they are
    # someone the access rules refuse resets nothing: `_answer` gives them a question's refusal
    if is_reset(text) and not state.threads.refused(who):
        # Deletes only in a personal chat: a channel's or group chat's conversation is everyone's there,
        # and any member could type `reset` (it deleted the shared history for all); it starts afresh.
        fresh = await state.threads.reset("teams", base(activity), delete=is_personal(activity))
        await out.send(f"{fresh} {FILES_NOT_READ}" if has_files(activity) else fresh)
    elif (command := parse_manage(text)) is not None:  # `schedule list|pause|resume|remove ID`
        await _manage_schedules(state, activity, command, out, who)
    else:  # `help` and an empty message too: the core answers those without the model
        await _answer(state, activity, text, out, who)


def question_text(activity: Activity) -> str:
    """The text without the bot's @-mention (Teams sends `<at>name</at>` plus a mention entity)."""
    text = activity.text or ""
    as_html = (activity.text_format or "").lower() in ("xml", "html")  # `<p>reset</p>`, `&amp;`
    if as_html:  # tags off first, mentions kept: `<p><at>datathread</at> reset</p>` opens with its mention
        text = re.sub(r"(?i)<br\s*/?>|</(?:p|div|li|tr)>", "\n", text)  # a line ends: it stays a line
        text = re.sub(r"<(?!/?at\b)[^>]*>", " ", text)
    if activity.entities and activity.recipient:
        with contextlib.suppress(KeyError, TypeError, AttributeError):  # malformed entity: keep raw text
            text = _unaddressed(text, activity)
    if as_html:
        text = html.unescape(text)
    text = re.sub(r"<at>(.*?)</at>", r"\1", text)  # other people's mentions keep their names
    # Lines stay lines (pasted SQL's `-- comment` must not swallow the rest; a numbered list stays one);
    # spaces within a line, and blank lines beyond one, are folded.
    lines = (re.sub(r"[^\S\n]+", " ", line).strip() for line in text.replace("\r\n", "\n").split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _unaddressed(text: str, activity: Activity) -> str:
    """`text` without the mention that addresses the bot: the first run of the bot's mentions among
    those the message opens with ("@datathread delays", "@Data team @datathread delays"); a run, as new
    Teams clients mention a bot named in several words as one tag per word, each the bot's ("<at>Data</at>
    <at>Thread</at> reset": https://github.com/microsoft/botframework-sdk/issues/6617). Anywhere else
    the bot's name is part of the sentence and stays, as other people's names do. botbuilder's
    remove_recipient_mention removed the name everywhere (as a pattern, mention or not): "compare with
    what @datathread said" reached the model as "compare with what said"."""
    me = activity.recipient.id
    ours = {
        str(props.get("text") or f"<at>{props['mentioned'].get('name')}</at>")
        for entity in activity.entities or []
        if (entity.type or "").lower() == "mention"
        and isinstance(props := entity.additional_properties or {}, dict)
        and (props.get("mentioned") or {}).get("id") == me
    }
    opening = re.match(r"(?:\s*<at>.*?</at>)*", text)
    run: list[re.Match] = []  # the bot's first run of mentions among the opening ones
    for mention in re.finditer(r"<at>.*?</at>", opening.group(0) if opening else ""):
        if mention.group(0) in ours:
            run.append(mention)
        elif run:
            break
    return text[: run[0].start()] + text[run[-1].end() :] if run else text


async def thread_key(threads: Threads, activity: Activity, *, now: float | None = None) -> tuple[str, ...]:
    """The session key of this conversation; chats idle for 8 hours move to a fresh generation."""
    return await threads.current_key("teams", base(activity), idle_reset=not is_channel(activity), now=now)


async def _answer(
    state: AppState, activity: Activity, text: str, out: TeamsOut, who: IncomingMessage
) -> None:
    """A question (or `help`) → the core, from `who` (`teams_members.asker`). Someone the access rules
    refuse hears that alone, never a word about their files; files of no kind the bot reads are
    refused by name, not fetched (`help` with a screenshot is help)."""
    threads, with_files = state.threads, has_files(activity)
    unread = with_files and none_readable(activity)
    refused_files = await shared_files(activity, state.settings) if unread else ()  # nothing downloaded
    if unread and not text and not threads.refused(who):  # a screenshot alone: no question
        await out.send(unreadable_note(refused_files))
        return
    message = IncomingMessage(
        text=text,
        surface="teams",
        thread_key=await thread_key(threads, activity),
        user_id=user_id(activity),
        channel_id=channel_id(activity),
        team_id=tenant_of(activity),
        user_name=activity.from_property.name if activity.from_property else "",
        is_direct=is_personal(activity),
        user_tz=activity.local_timezone or "",  # Teams sends the client's IANA zone with each message
        user_locale=locale_of(activity),  # and its locale ("de-DE"): whose week "this week" is
        outsider=who.outsider,  # a guest, another organization's person: the core's access rules decide
        files=refused_files,
    )

    async def later(payload: dict) -> None:  # the rest of an answer Teams throttled: a quick job
        job = TurnJob(kind=REST_KIND, payload={"activity": activity.serialize(), **payload}, quick=True)
        await state.runner.submit(job)

    sink = TeamsSink(threads=threads, links=state.links, out=out, personal=is_personal(activity), later=later)
    await sink.typing()

    async def fetch() -> tuple[SharedFile, ...]:
        """Called by the core once this turn holds its conversation's lock, after its checks (a refused
        or rate-limited person downloads nothing), while the person sees typing."""
        await sink.typing()
        return await shared_files(activity, state.settings)

    confirm = confirmer(threads, out, user_id(activity))
    fetching = with_files and not unread  # a file that may be one it reads: fetched in the turn
    await state.analyst.handle(message, sink, confirm=confirm, fetch_files=fetch if fetching else None)


async def _manage_schedules(
    state: AppState, activity: Activity, command: ManageCommand, out: TeamsOut, who: IncomingMessage
) -> None:
    """What `/ask schedule list|pause|resume|remove` does in Slack: people who made a schedule here could
    neither see nor change it, and its pause notice sent them to a terminal they do not have. Only the
    owner or an admin changes one; Teams has no message for one person in a channel, so the answer is
    in the conversation, like every reply here."""
    if denial := state.threads.refused(who):
        await out.send(denial)
        return
    how = f"@{mention_name(activity)} schedule"
    said = await manage(
        state.threads.schedules(),
        command,
        user=user_id(activity),
        channel=home(activity),
        how=how,
    )
    await out.send(render.to_teams_markdown(said)[0])
