"""A turn's files into its Teams conversation, or a note for the answer saying why not (as
bot/slack_files.py does for Slack).

A chart goes inline, as a base64 data URI, only when its whole message fits what the Bot Connector
takes (about 28 KB as sent; base64 makes a 19 KB PNG 26 KB): a 40 KB chart was
refused with 413 and the person read "the chart above" under nothing. A larger one comes on a card that
shows it from a signed download link (the `/files` route, or an S3 presigned URL), with an "Open chart"
button. A CSV comes as a file-consent card in personal chat and as a download link elsewhere.
"""

from __future__ import annotations

import logging

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


async def deliver(out, artifact: ArtifactReady, *, threads: Threads, links: FileLinks, personal: bool) -> str:
    """Send one file into the conversation (`out`: a TeamsOut); the note for the answer when it did
    not arrive ("" when it did). Never raises for a file: the turn goes on and the answer says so."""
    name = artifact.name
    try:
        if artifact.mime.startswith("image/"):
            await _image(out, artifact, threads=threads, links=links)
        elif personal:
            await _offer(out, artifact, threads=threads, links=links)
        else:
            url = await links.download_link(artifact.session_id, artifact.path)
            ttl = links.settings.link_ttl_seconds
            await out.send(render.link_text(artifact.title or name, url, ttl))
    except ConnectorFailed as exc:
        if exc.gone:  # nothing reaches this conversation: the sink stops the turn (no note to add)
            raise
        log.warning("teams: %s did not reach conversation %s: %s", name, _where(out), exc)
        return f"I couldn't attach `{render.inert(name)}` ({refusal_words(exc)})."
    except LinkUnavailable as exc:  # the files bucket refused or was silent: logged where it was raised
        return f"I couldn't attach `{render.inert(name)}` ({render.inert(str(exc))})."
    except (OSError, ValueError) as exc:  # gone, or a CSV that cannot be made spreadsheet-safe
        return f"I couldn't attach `{render.inert(name)}` ({render.inert(str(exc)) or type(exc).__name__})."
    except Exception:  # a link that could not be signed (the store), S3 refusing: said, and logged
        log.exception("teams: could not deliver %s", name)
        return f"I couldn't attach `{render.inert(name)}` (something went wrong on my side)."
    return ""


async def _image(out, artifact: ArtifactReady, *, threads: Threads, links: FileLinks) -> None:
    """Inline when the whole message fits; else a card showing the image from a signed link."""
    data = await threads.read_artifact(artifact)
    inline = render.image_attachment(artifact.name, data, artifact.mime)
    if size(inline) + size(artifact.title) <= MAX_INLINE_BYTES:
        await out.send(artifact.title, attachments=[inline])
        return
    url = await links.download_link(artifact.session_id, artifact.path, data)
    await out.send(attachments=[image_card(artifact.title or artifact.name, url)])


async def _offer(out, artifact: ArtifactReady, *, threads: Threads, links: FileLinks) -> None:
    # the size of the bytes the upload will send: a CSV's formula cells are made safe first
    length = len(await threads.read_artifact(artifact))
    if not length:  # OneDrive takes no empty range (the upload said `bytes 0--1/0`): nothing to offer
        raise ValueError("it is empty, so there is nothing to upload")
    context = await links.offer(artifact.session_id, artifact.path)
    await out.send(attachments=[render.file_consent_card(artifact.name, length, context)])


def image_card(title: str, url: str) -> dict:
    """A chart too large to send inline: an Adaptive Card that shows it from `url` (Teams fetches it),
    and a button that opens it full size."""
    body = [
        {"type": "TextBlock", "text": render.inert(title), "weight": "Bolder", "wrap": True},
        {"type": "Image", "url": url, "altText": title, "size": "Stretch"},
    ]
    return render.card(body, [{"type": "Action.OpenUrl", "title": "Open chart", "url": url}])


def refusal_words(exc: ConnectorFailed) -> str:
    """Why Teams did not take a message, for the person who expected it."""
    if exc.status == 413:
        return "too large for a Teams message"
    if exc.status is not None:
        return f"Teams refused it, HTTP {exc.status}"
    return "Teams did not answer in time"


def _where(out) -> str:
    return out.reference.conversation.id
