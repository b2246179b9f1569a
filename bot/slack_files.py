"""A turn's files into its Slack thread: uploaded as they are made, or a note saying why not.

Uploaded as they are: any conversion (parquet → CSV) happens inside the sandbox (`attach_file`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import failure_words
from bot.transcript import format_bytes
from core.events import ArtifactReady

log = logging.getLogger("datathread.slack")

UPLOAD_LIMIT_BYTES = 200 * 1024 * 1024  # well under Slack's 1 GB; bigger results belong in the warehouse


async def share_file(
    client: AsyncWebClient,
    artifact: ArtifactReady,
    read_file: Callable[[ArtifactReady], Awaitable[bytes]],
    *,
    channel: str,
    thread_ts: str,
    private: bool,
    refused_here: str = "",
) -> str:
    """Upload one file into the thread; the note for the answer when it was not ("" when it was).
    `private`: the answer is the asker's alone; `refused_here`: why Slack refuses the bot's messages
    in this channel (the answer went private for it)."""
    name = artifact.name
    if refused_here:
        return f"I can't share `{name}` here ({refused_here}): ask me in a DM for it."
    if private:
        return f"`{name}` isn't shared in private answers; ask without `private` to get it."
    if artifact.size > UPLOAD_LIMIT_BYTES:
        return (
            f"`{name}` is {format_bytes(artifact.size)}, too large to upload "
            f"(limit {format_bytes(UPLOAD_LIMIT_BYTES)}). Ask for a smaller extract."
        )
    try:
        await client.files_upload_v2(
            channel=channel,
            thread_ts=thread_ts,
            file=await read_file(artifact),
            filename=name,
            title=artifact.title or name,
        )
    except (SlackClientError, OSError, ValueError) as exc:
        log.warning("upload of %s failed: %s", name, failure_words(exc))
        return f"I couldn't upload `{name}` ({failure_words(exc, for_people=True)})."
    return ""
