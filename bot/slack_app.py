"""The Slack surface on Bolt (async): listeners that translate, de-duplicate and hand work to the runner.

Listeners stay short and never wait for a turn: Slack needs its HTTP 200 within 3 s
(https://docs.slack.dev/apis/events-api/#responding). `process_before_response=True` makes Bolt send
the response only after the listener returned, so the de-dup bookkeeping is done by then and nothing
runs in the web process after the response (which a serverless host could freeze); the slow work is a
`TurnJob` on `state.runner`.

`POST /slack/events` checks a request before Bolt sees it (`bot/slack_http.py`), and Bolt authorizes
with the identity known at start, never with a Web API call inside the ack (`bot/slack_identity.py`).
"""

from __future__ import annotations

import logging
import re
import uuid

from slack_bolt.async_app import AsyncApp
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk.web.async_client import AsyncWebClient
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from bot.schedule_slack import JOB_SCHEDULE_ANSWER, schedule_command
from bot.slack_access import WHO, who_asks
from bot.slack_blocks import (
    ACTION_CONFIRM_CANCEL,
    ACTION_CONFIRM_RUN,
    ACTION_EXPORT,
    ACTION_FEEDBACK_DOWN,
    ACTION_FEEDBACK_UP,
    ACTION_SCHEDULE,
    ACTION_SHOW_SQL,
)
from bot.slack_client import SharedClient
from bot.slack_confirm import remember_click
from bot.slack_file_deleted import JOB_FILE_DELETED, drop_deleted
from bot.slack_http import events_endpoint
from bot.slack_identity import KnownBot, OtherInstalls
from bot.slack_jobs import (
    JOB_ACTION,
    JOB_EXPORT,
    JOB_HOME,
    JOB_MESSAGE,
    JOB_PROMPTS,
    JOB_TURN,
    register_jobs,
    run_turn,
)
from bot.slack_revoked import on_revoked
from bot.slack_shared_files import file_refs
from bot.slack_slash_threads import thread_team
from bot.slack_text import decoded
from bot.surface import AppState
from bot.surface_settings import slack_half_configured
from core.runner import TurnJob
from core.schedules_parse import is_schedule_command
from core.thread import CONFIRM_EXPIRED, CONFIRM_NOT_YOURS, ConfirmAnswer, ConfirmResult

log = logging.getLogger("datathread.slack")

# Message subtypes that are a person asking something; every other subtype (edits, deletions, joins,
# bot messages…) is ignored. https://docs.slack.dev/reference/events/message#subtypes
ANSWERED_SUBTYPES = {None, "file_share", "thread_broadcast"}
HELP = "Ask me a data question, e.g. `{cmd} how many flights left JFK in 2013?` (`{cmd} private …` answers only you)."


def is_ignored(event: dict, bot_user_id: str | None) -> bool:
    """Bot messages (this bot included), edits, deletions, joins and other non-questions."""
    return (
        bool(event.get("bot_id") or event.get("bot_profile"))
        or event.get("subtype") not in ANSWERED_SUBTYPES
        or (bot_user_id is not None and event.get("user") == bot_user_id)
        or not event.get("user")
    )


def addressed_to_someone_else(text: str, bot_user_id: str | None) -> bool:
    """Whether a message starts by @-mentioning someone other than the bot ("<@U2> can you check this
    with finance?"): in a thread datathread answered, every message was taken as a follow-up, and a
    team discussing the answer got one answer per remark. A mention further on ("split it by month,
    as <@U2> asked") is still a question for the bot."""
    first = re.match(r"\s*<@([A-Z0-9]+)(?:\|[^>]*)?>", text)
    return first is not None and first.group(1) != bot_user_id


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """The question without the leading `<@BOT>` mention(s)."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text)
    return text.strip()


def action_payload(body: dict, action: dict) -> dict:
    """Plain data for a button job: who clicked, where, and the turn id in the button's value."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    return {
        "ephemeral": bool(container.get("is_ephemeral")),
        "action": action["action_id"],
        "value": action.get("value") or (action.get("selected_option") or {}).get("value", ""),
        "user": body["user"]["id"],
        "response_url": body.get("response_url", ""),  # reaches the clicker where the bot is no member
        "team": (body.get("team") or {}).get("id", ""),
        "channel": container.get("channel_id") or (body.get("channel") or {}).get("id", ""),
        "thread_ts": container.get("thread_ts")
        or message.get("thread_ts")
        or container.get("message_ts")
        or "",
    }


def click_payload(body: dict, action: dict, context: dict) -> dict:
    """`action_payload` and who clicked: their own workspace is the click's `user.team_id` (a Slack
    Connect partner's click carries theirs), the payload's `team` where it has none."""
    clicked_from = (body.get("user") or {}).get("team_id") or (body.get("team") or {}).get("id")
    return {**action_payload(body, action), **who_asks(clicked_from, context)}


async def admit(state: AppState, body: dict, event: dict, context: dict, *, mentioned: bool) -> None:
    """Inside the ack: pure checks only, then hand the message to a job. No store I/O here, so a busy
    store can never delay Slack's 200 (https://docs.slack.dev/apis/events-api/#responding).

    `team` keys the thread's session: the event's outer `team_id` (the channel's creator in a shared
    channel), as it always did, so every thread keeps its history; who asks is the sender's own
    workspace (`user_team`, `team`), which the access rules judge (bot/slack_access.py). An event that
    names neither is looked up there: the outer `team_id` is the channel's creator, not the sender's."""
    bot_user_id = context.get("bot_user_id")
    if is_ignored(event, bot_user_id):
        return
    if not mentioned and event.get("channel_type") != "im" and not event.get("thread_ts"):
        return  # a channel message without a mention is not for us
    if (
        not mentioned
        and event.get("channel_type") != "im"
        and addressed_to_someone_else(event.get("text", ""), bot_user_id)
    ):
        return  # "<@U2> can you check this with finance?" in our thread: theirs, not a question for us
    words = strip_mention(event.get("text", ""), bot_user_id)
    files = file_refs(event.get("files"))  # fetched by the job, after this ack
    payload = {
        **who_asks(event.get("user_team") or event.get("team"), context),
        "team": body.get("team_id") or event.get("team", ""),
        "channel": event["channel"],
        "user": event["user"],
        "text": decoded(words) or ("" if files else "help"),  # help: answered locally
        "thread_ts": event.get("thread_ts") or event["ts"],
        "ts": event["ts"],
        "event_id": body.get("event_id", ""),
        "follow_up_only": not mentioned and event.get("channel_type") != "im",
        "is_direct": event.get("channel_type") == "im",
        "files": files,
        "said_nothing": not words,  # files alone: a question about them, not "help"
    }
    await state.runner.submit(TurnJob(kind=JOB_MESSAGE, payload=payload))


async def run_message(state: AppState, client: AsyncWebClient, p: dict) -> None:
    """After the ack: start a turn at most once per message, across retries and replicas."""
    threads = state.threads
    team = await thread_team(threads, p)  # an /ask thread's replies continue the /ask's session
    thread = (team, p["channel"], p["thread_ts"])
    if p["follow_up_only"] and not await threads.follows_up("slack", thread, p["user"]):
        return  # a thread datathread is not part of, or someone who has not asked it anything there
    if not await threads.claim(f"slack:event:{p['event_id']}"):
        return  # Slack's retry (X-Slack-Retry-Num) of an event already taken
    if not await threads.claim(f"slack:msg:{p['channel']}:{p['ts']}"):
        return  # the other half of an app_mention + message pair
    if not p["follow_up_only"] and not p.get("is_direct"):
        await threads.joined("slack", thread, p["user"])
    keys = ("channel", "user", "text", "thread_ts", "ts")  # ts: names the answer's stream
    extra = {k: p.get(k) for k in ("is_direct", "files", "said_nothing", *WHO)}
    await run_turn(state, client, {**{k: p[k] for k in keys}, **extra, "team": team})


class _BoltNotices(logging.Filter):
    """Drops two of Bolt's warnings nobody can act on. "As you gave `client` as well, `token` will be
    unused", logged at every start (twice under `serve`): Bolt reads SLACK_BOT_TOKEN from the
    environment itself, and the token reaches it through `authorize`. "Unhandled request (…)" with a
    multi-line suggestion to add a listener: `POST /slack/events` says it in one line of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return text != warning_client_prioritized_and_token_skipped() and not text.startswith(
            "Unhandled request"
        )


_BOLT_NOTICES = _BoltNotices()


def build_bolt_app(state: AppState, identity: dict | None = None) -> AsyncApp:
    """The Bolt app with every listener wired; used by both HTTP (`serve`) and Socket Mode. `identity`:
    what `auth.test` said at start, if it was asked (see bot/slack_identity.py): whose installation the
    bot is, for the access rules and to name events of another installation in the log."""
    s = state.settings
    logging.getLogger("slack_bolt.AsyncApp").addFilter(_BOLT_NOTICES)  # once: the same filter object
    token = s.slack_bot_token.get_secret_value() if s.slack_bot_token else ""
    app = AsyncApp(
        signing_secret=s.slack_signing_secret.get_secret_value() if s.slack_signing_secret else "",
        # Bolt copies this client for each request and gives the copy the token `authorize` returns.
        client=AsyncWebClient(base_url=s.slack_api_url),
        authorize=KnownBot(token, identity),
        process_before_response=True,
    )
    submit = state.runner.submit
    installs = OtherInstalls(identity)

    @app.event("app_mention")
    async def on_mention(body: dict, event: dict, context: dict) -> None:
        installs.check(body)
        await admit(state, body, event, context, mentioned=True)

    @app.event("message")
    async def on_message(body: dict, event: dict, context: dict) -> None:
        installs.check(body)
        await admit(state, body, event, context, mentioned=False)

    @app.command(s.slash_command)
    async def on_command(ack, command: dict, context: dict) -> None:
        text = decoded(command.get("text") or "").strip()
        private = bool(re.match(r"(?i)private\b", text))
        text = text[len("private") :].strip() if private else text
        if not text:
            return await ack(text=HELP.format(cmd=s.slash_command))
        who = who_asks(command["team_id"], context)  # an external person's command carries their own
        if is_schedule_command(text) and not private:  # `/ask schedule weekly mon 09:00 …`
            return await schedule_command(ack, submit, command, text, who)
        await (ack(text=":hourglass_flowing_sand: Working on it…") if private else ack())
        payload = {
            **who,
            "team": command["team_id"],
            "channel": command["channel_id"],
            "user": command["user_id"],
            "response_url": command.get("response_url", ""),
            "job": uuid.uuid4().hex,  # names the thread root it posts, for the job's lost handler
        }
        await submit(
            TurnJob(kind=JOB_TURN, payload={**payload, "text": text, "slash": True, "private": private})
        )

    @app.action(re.compile(f"^({ACTION_SHOW_SQL}|{ACTION_FEEDBACK_UP}|{ACTION_FEEDBACK_DOWN})$"))
    async def on_footer_button(ack, body: dict, action: dict, context: dict) -> None:
        await ack()
        await submit(TurnJob(kind=JOB_ACTION, payload=click_payload(body, action, context), quick=True))

    @app.action(ACTION_SCHEDULE)
    async def on_schedule(ack, body: dict, action: dict, context: dict) -> None:
        await ack()
        payload = click_payload(body, action, context)
        await submit(TurnJob(kind=JOB_SCHEDULE_ANSWER, payload=payload, quick=True))

    @app.action(ACTION_EXPORT)
    async def on_export(ack, body: dict, action: dict, context: dict) -> None:
        await ack()
        await submit(TurnJob(kind=JOB_EXPORT, payload=click_payload(body, action, context), quick=True))

    @app.action(re.compile(f"^({ACTION_CONFIRM_RUN}|{ACTION_CONFIRM_CANCEL})$"))
    async def on_confirm(ack, body: dict, action: dict, respond) -> None:
        await ack()
        # Straight into the shared store: the turn waiting for it may run in another process.
        run = action["action_id"] == ACTION_CONFIRM_RUN
        if (body.get("container") or {}).get("is_ephemeral"):  # for the turn to replace its buttons
            await remember_click(state.threads, action["value"], body.get("response_url", ""))
        result = await state.threads.answer_confirmation(
            action["value"], ConfirmAnswer.RUN if run else ConfirmAnswer.CANCEL, user_id=body["user"]["id"]
        )
        if result is ConfirmResult.NOT_YOURS:
            await respond(text=CONFIRM_NOT_YOURS, response_type="ephemeral", replace_original=False)
        elif result is ConfirmResult.ALREADY_ANSWERED:  # a second click, after a restart or the timeout:
            await respond(
                text=CONFIRM_EXPIRED, response_type="ephemeral", replace_original=False
            )  # not silence

    @app.event("app_home_opened")
    async def on_home(event: dict) -> None:
        if event.get("tab", "home") == "home":
            await submit(TurnJob(kind=JOB_HOME, payload={"user": event["user"]}, quick=True))

    @app.event("assistant_thread_started")
    async def on_assistant_thread(event: dict) -> None:
        thread = event.get("assistant_thread") or {}
        payload = {"channel": thread.get("channel_id"), "thread_ts": thread.get("thread_ts")}
        await submit(TurnJob(kind=JOB_PROMPTS, payload=payload, quick=True))

    @app.event("assistant_thread_context_changed")
    async def on_context_changed() -> None:
        return None  # acknowledged; the thread key does not change

    @app.event("file_deleted")  # its copies leave the threads that took one (bot/slack_file_deleted.py)
    async def on_file_deleted(event: dict) -> None:
        await submit(TurnJob(kind=JOB_FILE_DELETED, payload={"file_id": event.get("file_id") or ""}))

    @app.event("app_uninstalled")
    @app.event("tokens_revoked")
    async def on_uninstalled(body: dict, event: dict) -> None:
        on_revoked(body, event)  # one ERROR: nothing there is answered until the app is reinstalled

    return app


class SlackSurface:
    """The Slack surface: `POST /slack/events` (events, slash commands and interactivity on one Request
    URL), the process's Web API client, and the Slack job kinds on the runner."""

    def __init__(self, state: AppState, identity: dict | None = None):
        self.state = state
        self.client = SharedClient(state.settings)
        self.identity = identity  # what `auth.test` said at start (`serve` asked), else None

    def routes(self) -> list[Route]:
        s = self.state.settings
        if not (s.slack_bot_token and s.slack_signing_secret):
            if problem := slack_half_configured(s):  # `serve` refuses it; a Modal web endpoint says it here
                log.error("%s", problem)
            return [Route("/slack/events", _not_configured, methods=["POST"])]
        app = build_bolt_app(self.state, self.identity)
        endpoint = events_endpoint(app, s.slack_signing_secret.get_secret_value())
        return [Route("/slack/events", endpoint, methods=["POST"])]

    async def start(self) -> None:
        """Register the Slack job handlers on the runner once the core is built."""
        register_jobs(self.state, self.client)

        async def message_job(job: TurnJob) -> None:
            await run_message(self.state, self.client.get(), job.payload)

        self.state.runner.register(JOB_MESSAGE, message_job)

        async def file_deleted_job(job: TurnJob) -> None:
            await drop_deleted(self.state, job.payload)

        self.state.runner.register(JOB_FILE_DELETED, file_deleted_job)

    async def stop(self) -> None:
        """Close the shared Slack HTTP session."""
        await self.client.close()


async def _not_configured(request: Request) -> PlainTextResponse:
    return PlainTextResponse("Slack is not configured: set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET.", 503)
