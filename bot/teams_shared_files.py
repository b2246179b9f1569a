"""The files a person shared with a question in Teams, as the core takes them (`IncomingMessage.files`).

What Teams gives a bot (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4):
- **Personal chat:** a file attached to the message comes as an attachment of content type
  `application/vnd.microsoft.teams.file.download.info` with its `name` and `content.downloadUrl`, a
  pre-authenticated link to the copy in the sender's OneDrive. It is fetched (bot/teams_download.py),
  unless core/shared_files.py refuses it first (a kind the bot can't read, more than ten).
- **Channels and group chats:** nothing of the file. The bot gets only the `text/html` copy of the
  message that Teams adds to every formatted message; the file stays in SharePoint, where a bot needs
  Graph permissions to read it (reported: microsoft/botbuilder-dotnet#6710, MicrosoftDocs/msteams-docs
  #1470). Where that copy links to a SharePoint or OneDrive file of a kind the bot reads — a file
  shared as a link, from any chat — the person is told where it works instead. A file attached
  without a link leaves no trace at all; docs/TEAMS.md says so.
- **Pasted images** (`image/*`, from the Bot Connector's attachment store) are pictures, not data:
  each is refused by kind rather than passed over, or the model answers a screenshot it never saw.
The `text/html` copy is the question itself, never a file: it makes no sentence of its own.
"""

from __future__ import annotations

import asyncio
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

from botbuilder.schema import Activity

from bot.teams_download import download
from bot.teams_render import inert
from core.config import Settings
from core.events import SharedFile
from core.shared_files import MAX_FILES, READABLE, FilesBudget, kind_of, refusal_before_fetch

FILE_DOWNLOAD_INFO = "application/vnd.microsoft.teams.file.download.info"
# Where SharePoint and OneDrive keep files: the commercial, government and 21Vianet clouds.
FILE_HOSTS = (
    "sharepoint.com",
    "sharepoint.us",
    "sharepoint-mil.us",
    "sharepoint.cn",
    "1drv.ms",
    "onedrive.live.com",
)

IMAGE = (
    "It is an image, and I read data, not pictures; attach the data as a file "
    f"({', '.join(READABLE)}), or paste the numbers as text."
)
LINK_HERE = (
    "Teams gave me only a link to it, which I can't open; attach the file itself "
    "(Attach file › Upload from this device)."
)
LINK_THERE = (
    "In a {where} Teams gives me only a link to it, which I can't open; attach the file to a message "
    "in a personal chat with me instead."
)
UNKNOWN = (
    "Teams sent it in a form I can't open; attach the file itself to a message in a personal chat with me."
)


def has_files(activity: Activity) -> bool:
    """Whether the message shares anything besides its text: a question with only a file is a question."""
    return any(_sorted(activity.attachments)) or bool(_linked_files(activity))


def none_readable(activity: Activity) -> bool:
    """Nothing here is a file the bot would fetch (a pasted screenshot, a slide deck): with no words,
    not a question, as on Slack (`unreadable_note`, and no turn)."""
    offered, _, _ = _sorted(activity.attachments)
    return not any(kind_of(_name(a)) in READABLE for a in offered)


def unreadable_note(files: tuple[SharedFile, ...]) -> str:
    """What a message of unreadable files alone is told instead of a turn: each file and why (the
    names inert: a name is the sender's text)."""
    said = " ".join(f"`{inert(f.name)}`: {f.refusal}" for f in files if f.refusal)
    return f"I can't read the files you shared. {said}"


async def shared_files(activity: Activity, settings: Settings) -> tuple[SharedFile, ...]:
    """Every file shared with this message, fetched or refused in a sentence each (downloads side by
    side, sharing the message's DATATHREAD_SHARED_FILES_MB as their bytes arrive; none raises): at
    most MAX_FILES, files to fetch first, and one sentence for all the rest (300 pasted images were
    300 notes)."""
    offered, images, others = _sorted(activity.attachments)
    said = [
        SharedFile(_name(a) or ("pasted image" if len(images) == 1 else f"pasted image {n}"), refusal=IMAGE)
        for n, a in enumerate(images, 1)
    ]
    said += [SharedFile(_name(a), refusal=UNKNOWN) for a in others]
    fetched = {_name(a) for a in offered}
    link = _link_sentence(activity)
    said += [SharedFile(name, refusal=link) for name in _linked_files(activity) if name not in fetched]
    taken, kept = offered[:MAX_FILES], said[: max(0, MAX_FILES - len(offered))]
    left = [*(_name(a) or "file" for a in offered[MAX_FILES:]), *(f.name for f in said[len(kept) :])]
    budget = FilesBudget(file_mb=settings.shared_file_mb, total_mb=settings.shared_files_mb)
    files = await asyncio.gather(*(_fetch(a, i, settings, budget) for i, a in enumerate(taken)))
    return (*files, *kept, *([too_many(left[0], len(left))] if left else []))


def too_many(first: str, left: int) -> SharedFile:
    """The one refusal for every file past MAX_FILES, named by the first of them."""
    more = f"; nor did I read the {left - 1} after it" if left > 1 else ""
    return SharedFile(first, refusal=f"I read at most {MAX_FILES} files shared with one question{more}.")


def _sorted(attachments: list | None) -> tuple[list, list, list]:
    """Files to fetch, pasted images, and other attachments with a file's name. Not shared files: the
    message's own html, and cards (they have no name)."""
    offered, images, others = [], [], []
    for attachment in attachments or []:
        kind = _content_type(attachment)
        if kind == FILE_DOWNLOAD_INFO:
            offered.append(attachment)
        elif kind.startswith("image/"):
            images.append(attachment)
        elif kind != "text/html" and _name(attachment):
            others.append(attachment)
    return offered, images, others


async def _fetch(attachment, index: int, settings: Settings, budget: FilesBudget) -> SharedFile:
    name = _name(attachment) or "file"
    if refused := refusal_before_fetch(name, None, limit_mb=settings.shared_file_mb, index=index):
        return refused
    content = attachment.content if isinstance(attachment.content, dict) else {}
    url = str(content.get("downloadUrl") or "")
    if not url:
        return SharedFile(name, refusal=UNKNOWN)
    # Loopback links only where the Bot Connector's address may be loopback: no app id (bot/teams_auth.py)
    loopback_ok = not settings.microsoft_app_id
    return await download(budget.claim(name), url, loopback_ok=loopback_ok)


def _link_sentence(activity: Activity) -> str:
    kind = activity.conversation.conversation_type if activity.conversation else ""
    if kind == "personal":
        return LINK_HERE
    return LINK_THERE.format(where="channel" if kind == "channel" else "group chat")


def _content_type(attachment) -> str:
    return str(getattr(attachment, "content_type", "") or "").strip().lower()


def _name(attachment) -> str:
    return str(getattr(attachment, "name", "") or "").strip()


def _linked_files(activity: Activity) -> list[str]:
    """Names of SharePoint or OneDrive files of a readable kind that the message's html links to."""
    names: list[str] = []
    for attachment in activity.attachments or []:
        if _content_type(attachment) != "text/html" or not isinstance(attachment.content, str):
            continue
        links = _Links()
        links.feed(attachment.content)
        for href, text in links.found:
            parts = urlsplit(href)  # the parser has unescaped it
            host = (parts.hostname or "").lower()
            if parts.scheme != "https" or not any(host == h or host.endswith("." + h) for h in FILE_HOSTS):
                continue
            name = next(
                (n for n in (text, unquote(parts.path.rsplit("/", 1)[-1])) if kind_of(n) in READABLE), ""
            )
            if name and name not in names:
                names.append(name)
    return names


class _Links(HTMLParser):
    """`<a href>` targets in a message's html, with their text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href, self._text = dict(attrs).get("href") or "", []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.found.append((self._href, "".join(self._text).strip()))
            self._href = None
