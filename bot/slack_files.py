"""A turn's files into its Slack thread: uploaded as they are made, or a note saying why not.

Uploaded as they are: any conversion (parquet → CSV) happens inside the sandbox (`attach_file`). An
image goes with its alt text (`alt_txt`), what a screen reader says for it in Slack.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack_client import failure_words
from bot.transcript import format_bytes
from core.events import ArtifactReady
from core.wording import cut_at_word

log = logging.getLogger("datathread.slack")

UPLOAD_LIMIT_BYTES = 200 * 1024 * 1024  # well under Slack's 1 GB; bigger results belong in the warehouse
# files.getUploadURLExternal refuses a longer `alt_txt` ("alt_txt_too_large": 1000 characters), and the
# whole upload with it: the chart would not arrive. https://docs.slack.dev/reference/methods/files.getUploadURLExternal
ALT_TXT_LIMIT = 1000


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
            alt_txt=slack_alt_text(artifact.alt_text),
        )
    except (SlackClientError, OSError, ValueError) as exc:
        log.warning("upload of %s failed: %s", name, failure_words(exc))
        return f"I couldn't upload `{name}` ({failure_words(exc, for_people=True)})."
    return ""


def slack_alt_text(text: str) -> str | None:
    """An image's alt text (already one plain line: core/attachment_words.py) as `alt_txt` takes it, None
    for none. Within 1000 UTF-8 bytes, which are never fewer than the characters or UTF-16 units Slack may
    count. Without `<` and `>`: the field is plain text, but should Slack ever read it as a message's
    text, a `<!channel>` or `<@U…>` in it is still no mention (‹ › look the same to a reader)."""
    if not text:
        return None
    plain = text.replace("<", "‹").replace(">", "›")
    fitted, limit = plain, len(plain)
    while len(fitted.encode()) > ALT_TXT_LIMIT:  # a character is at most 4 bytes: a few rounds at most
        limit -= max(1, (len(fitted.encode()) - ALT_TXT_LIMIT) // 4)
        fitted = cut_at_word(plain, limit)
    return fitted
