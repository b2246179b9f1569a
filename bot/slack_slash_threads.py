"""The thread a slash command starts: its question posted as the root, and the session its replies continue.

A thread's session is keyed (team, channel, thread ts). A message event's team is its outer `team_id`,
which in a channel shared between workspaces (an Enterprise Grid channel, Slack Connect) is the
workspace that created the channel (bolt-js#935); a slash command's `team_id` is the asker's workspace.
So `/ask` run from another workspace than the channel's started a session that the replies in its
thread never found: a follow-up without a mention was ignored, and a mention started afresh, without
the question it followed.

The keys stay as they were — every thread that exists keeps its history — and the root of an `/ask`
thread notes the team its session is keyed by; a message in that thread continues that session
(`thread_team`). In a channel of one workspace the two teams are the same, and nothing changes.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import failure_words
from core.thread import Threads

log = logging.getLogger("datathread.slack")

QUESTION_EVENT = "datathread_question"  # the metadata type marking a slash command's question (its root)
RECENT_MESSAGES = 100  # how far back in a channel the lost handler looks for a question's root


def _root_note(channel: str, ts: str) -> str:
    return f"slack:root-team:{channel}:{ts}"


async def thread_team(threads: Threads, p: dict) -> str:
    """The team a message's thread session is keyed by: the one its `/ask` root noted, else the
    message's own (`p["team"]`). A top-level message or a DM (one conversation, keyed apart) asks nothing."""
    thread_ts = p.get("thread_ts") or ""
    if not thread_ts or thread_ts == p.get("ts") or p.get("is_direct"):
        return p["team"]
    return await threads.noted(_root_note(p["channel"], thread_ts)) or p["team"]


async def post_question(client: AsyncWebClient, threads: Threads, p: dict) -> str:
    """A slash command's question as a channel message, the root of the thread its answer goes to;
    noted under the job's id, so if the worker dies the job's lost handler answers in that thread. The
    message also carries the job's id as metadata: a worker that dies after Slack took the message but
    before noting it leaves a root the lost handler can still find (`find_question`).

    The root also notes the team its session is keyed by, for as long as a thread's history is kept
    (DATATHREAD_HISTORY_TTL_DAYS from the question): the replies in its thread continue it."""
    job = p.get("job")
    root = await client.chat_postMessage(
        channel=p["channel"],
        text=f"<@{p['user']}> asked: {render.escape(p['text'])}",
        # https://docs.slack.dev/messaging/message-metadata
        metadata={"event_type": QUESTION_EVENT, "event_payload": {"job": job}} if job else None,
    )
    kept_s = threads.settings.history_ttl_days * 86_400
    await threads.note(_root_note(p["channel"], root["ts"]), p["team"], ttl_s=kept_s)
    if job:
        await threads.note(f"slack:slash:{job}", root["ts"])
    return root["ts"]


async def find_question(client: AsyncWebClient, threads: Threads, p: dict) -> str | None:
    """The root a slash command's job posted, or None if it never reached Slack: noted once posted, else
    found among the channel's newest messages by the job id it carries (the lost handler runs within
    seconds of the worker's death, or the lock's TTL with Redis, so the root is still among them)."""
    job = p.get("job")
    if not job:
        return None
    if noted := await threads.noted(f"slack:slash:{job}"):
        return noted
    try:
        recent = await client.conversations_history(
            channel=p["channel"], limit=RECENT_MESSAGES, include_all_metadata=True
        )
    except SlackApiError as exc:  # cannot look: posting the question again beats silence
        log.info("cannot look for the question of job %s in %s: %s", job, p["channel"], failure_words(exc))
        return None
    for message in recent.get("messages") or []:
        metadata = message.get("metadata") or {}
        if (
            metadata.get("event_type") == QUESTION_EVENT
            and (metadata.get("event_payload") or {}).get("job") == job
        ):
            return message["ts"]
    return None
