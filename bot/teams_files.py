"""A turn's files into its Teams conversation, or a note for the answer saying why not (as
bot/slack_files.py does for Slack).

A chart goes inline, as a base64 data URI, only when its whole message fits what the Bot Connector
takes (about 28 KB as sent; base64 makes a 19 KB PNG 26 KB): a 40 KB chart was
refused with 413 and the person read "the chart above" under nothing. A larger one comes on a card that
shows it from a signed download link (the `/files` route, or an S3 presigned URL), with an "Open chart"
button. A CSV comes as a file-consent card in personal chat and as a download link elsewhere.

Each file's message is made as the file is attached (`prepare`) and sent after the answer
(`send_file`): the answer says "the chart and CSV are below", and they came before it. A file that
cannot be made (empty, no link) is said in the answer; one Teams then refuses, in a line after it. A chart's
alt text is the card image's `altText`; inline, the model's description is said in the message's text.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bot import teams_render as render
from bot.files import FileLinks, LinkUnavailable
from bot.teams_answer_cards import size
from bot.teams_connector import ConnectorFailed
from core.events import ArtifactReady
from core.thread import Threads

log = logging.getLogger("datathread.teams")

# An activity over about 28 KB as sent is refused (413); its envelope (addresses, ids, type) takes
# about 0.5 KB, so an inline image and its title get the rest less a margin.
MAX_INLINE_BYTES = 26_000


@dataclass(frozen=True)
class FileMessage:
    """The message that carries one file, made while the turn runs (so a file that cannot be made is
    said in the answer) and sent after the answer, which speaks of its files as below."""

    name: str
    text: str = ""
    attachments: tuple[dict, ...] = ()


async def prepare(
    artifact: ArtifactReady, *, threads: Threads, links: FileLinks, personal: bool
) -> FileMessage | str:
    """The message for one file, or the note for the answer saying why there is none. Never raises for
    a file: the turn goes on and the answer says so."""
    name = artifact.name
    try:
        if artifact.mime.startswith("image/"):
            return await _image(artifact, threads=threads, links=links)
        if personal:
            return await _offer(artifact, threads=threads, links=links)
        url = await links.download_link(artifact.session_id, artifact.path)
        return FileMessage(
            name, render.link_text(artifact.title or name, url, links.settings.link_ttl_seconds)
        )
    except LinkUnavailable as exc:  # the files bucket refused or was silent: logged where it was raised
        return f"I couldn't attach `{render.inert(name)}` ({render.inert(str(exc))})."
    except (OSError, ValueError) as exc:  # gone, or a CSV that cannot be made spreadsheet-safe
        return f"I couldn't attach `{render.inert(name)}` ({render.inert(str(exc)) or type(exc).__name__})."
    except Exception:  # a link that could not be signed (the store), S3 refusing: said, and logged
        log.exception("teams: could not deliver %s", name)
        return f"I couldn't attach `{render.inert(name)}` (something went wrong on my side)."


async def send_file(out, message: FileMessage, *, short: bool = False) -> str:
    """Post one prepared file (`out`: a TeamsOut); the note saying it did not arrive ("" when it did).
    Raises only where nothing reaches the conversation (the bot removed): the sink stops the turn."""
    try:
        await out.send(message.text, attachments=list(message.attachments) or None, short=short)
    except ConnectorFailed as exc:
        if exc.gone:
            raise
        log.warning("teams: %s did not reach conversation %s: %s", message.name, _where(out), exc)
        return f"I couldn't attach `{render.inert(message.name)}` ({refusal_words(exc)})."
    return ""


async def send_files(out, files: list[FileMessage], *, short: bool = False) -> None:
    """A turn's files, after its answer; one line after them names those Teams did not take."""
    missing = [note for message in files if (note := await send_file(out, message, short=short))]
    if missing:
        await out.send("\n\n".join(f"_{note}_" for note in missing), short=short)


async def _image(artifact: ArtifactReady, *, threads: Threads, links: FileLinks) -> FileMessage:
    """Inline when the whole message fits; else a card showing the image from a signed link."""
    data = await threads.read_artifact(artifact)
    inline = render.image_attachment(artifact.name, data, artifact.mime)
    words = image_words(artifact)
    if size(inline) + size(words) <= MAX_INLINE_BYTES:
        return FileMessage(artifact.name, words, (inline,))
    url = await links.download_link(artifact.session_id, artifact.path, data)
    card = image_card(artifact.title or artifact.name, url, artifact.alt_text)
    return FileMessage(artifact.name, attachments=(card,))


def image_words(artifact: ArtifactReady) -> str:
    """The text sent with an inline chart: its title, then the model's description of it. A Bot Framework
    image attachment has a name and no alt text, so the description goes in the message, where a screen
    reader reads it with the image (one made from the title alone would only repeat it). Plain: no
    markup, and no Markdown link (`](` is spaced out)."""
    title = render.inert(artifact.title or artifact.name)
    if not artifact.described:
        return title
    return f"{title}\n\n{render.inert(artifact.alt_text).replace('](', '] (')}"


async def _offer(artifact: ArtifactReady, *, threads: Threads, links: FileLinks) -> FileMessage:
    # the size of the bytes the upload will send: a CSV's formula cells are made safe first
    length = len(await threads.read_artifact(artifact))
    if not length:  # OneDrive takes no empty range (the upload said `bytes 0--1/0`): nothing to offer
        raise ValueError("it is empty, so there is nothing to upload")
    context = await links.offer(artifact.session_id, artifact.path)
    return FileMessage(artifact.name, attachments=(render.file_consent_card(artifact.name, length, context),))


def image_card(title: str, url: str, alt_text: str = "") -> dict:
    """A chart too large to send inline: an Adaptive Card that shows it from `url` (Teams fetches it),
    with its alt text (a plain JSON string: no markup is read in it), and a button that opens it full
    size. https://learn.microsoft.com/adaptive-cards/schema-explorer/image"""
    body = [
        {"type": "TextBlock", "text": render.inert(title), "weight": "Bolder", "wrap": True},
        {"type": "Image", "url": url, "altText": alt_text or title, "size": "Stretch"},
    ]
    return render.card(
        body, [{"type": "Action.OpenUrl", "title": "Open chart", "url": url}], words=f"Chart: {title}"
    )


def refusal_words(exc: ConnectorFailed) -> str:
    """Why Teams did not take a message, for the person who expected it."""
    if exc.status == 413:
        return "too large for a Teams message"
    if exc.status is not None:
        return f"Teams refused it, HTTP {exc.status}"
    return "Teams did not answer in time"


def _where(out) -> str:
    return out.reference.conversation.id
