"""Files people share with a question in Slack: fetched with the bot token, after the ack, into `SharedFile`s.

A message event carries its files as Slack file objects (https://docs.slack.dev/reference/objects/file-object).
`file_refs` keeps, inside the ack, the few fields the fetch needs (a job's payload is plain data);
`fetch_shared_files` runs when the core calls the turn's fetch (once the turn holds its thread's lock,
core/file_fetch.py) and fetches them at once, each bounded in size (streamed, cut
at DATATHREAD_SHARED_FILE_MB) and in time. Slack states each file's size, so which files fit the
message's DATATHREAD_SHARED_FILES_MB together is decided before any is fetched, in the order they were
shared; the bytes counted as they arrive are the backstop (core/shared_files.py's `FilesBudget`). The
bytes are only carried to the core: they are parsed in the sandbox, never here. While they download
(up to FETCH_TIMEOUT_S), the thread's status says so ("is fetching sales.csv…"; bot/slack_status.py
says what follows it): without it, a big file on a slow link was two minutes of nothing.

The bot token goes only to Slack's own file hosts (files.slack.com, files.slack-gov.com) or to the
origin of DATATHREAD_SLACK_API_URL (tests, proxies): a file object names its URL, and an external file's
URL is someone else's server. Redirects are followed by hand, each hop checked the same way. A file not
fetched is a `SharedFile` with a refusal sentence the core passes on; the turn goes on.
"""

from __future__ import annotations

import asyncio
import io
import logging
from urllib.parse import urljoin, urlsplit

import aiohttp
from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot import slack_render as render
from bot.slack_client import failure_words
from bot.slack_status import ThreadStatus
from core.events import SharedFile
from core.shared_files import MAX_FILES, READABLE, Claim, FilesBudget, kind_of, refusal_before_fetch
from core.wording import os_reason

log = logging.getLogger("datathread.slack")

# Module constants, read at each fetch: tests shorten them. A file's whole fetch, redirects included;
# and how long it may send nothing at all (the shared session's 10 s read timeout is for API answers).
FETCH_TIMEOUT_S = 120.0
STALL_TIMEOUT_S = 20.0
CONNECT_TIMEOUT_S = 5.0
MAX_REDIRECTS = 3
CHUNK_BYTES = 64 * 1024
STATUS_NAME_CHARS = 60  # of a file's name in the thread's status

SLACK_FILE_HOSTS = frozenset({"files.slack.com", "files.slack-gov.com"})  # GovSlack's is slack-gov.com
SLACK_DOMAINS = ("slack.com", "slack-gov.com")
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# What a file object's fields say, for the payload: nothing else of it is needed.
KEPT = (
    "id",
    "name",
    "title",
    "size",
    "mode",
    "file_access",
    "is_external",
    "url_private",
    "url_private_download",
)

HIDDEN = "Slack hides it from apps: it is older than your workspace's plan lets apps see."
DELETED = "It was deleted from Slack."
EXTERNAL = "It is a link to a file kept outside Slack (Google Drive, Dropbox…); upload the file itself and ask again."
NO_LINK = "Slack gave me no link to fetch it from."
NOT_SLACK = "Its link is not on Slack's file server, and I send my Slack login to Slack alone."
SENT_ELSEWHERE = "Slack sent me on to another site for it, where I don't take my Slack login."
TOO_MANY_HOPS = "Slack sent me from link to link for it without ever sending the file."
NEEDS_FILES_READ = (
    "Slack sent me its sign-in page instead of the file: the Slack app needs the `files:read` scope; "
    "whoever runs datathread must add it and reinstall the app."
)


def file_refs(files: object) -> list[dict]:
    """An event's `files` as the job carries them: each file object's needed fields (not its previews,
    thumbnails and permalinks), at most MAX_FILES + 1 (one more is enough to say there were too many).
    A bare name is a file known by name alone (a job queued by an older release carried names)."""
    if not isinstance(files, list):
        return []
    refs = [{"name": f} if isinstance(f, str) else f for f in files[: MAX_FILES + 1]]
    return [{k: f[k] for k in KEPT if k in f} for f in refs if isinstance(f, dict)]


def display_name(ref: dict) -> str:
    return str(ref.get("name") or ref.get("title") or "a file")


def none_readable(refs: list[dict]) -> bool:
    """No file here is of a kind the bot reads (a screenshot dropped in the thread): with no words,
    not a question, and with words nothing to fetch (`refused_by_name`). A Slack Connect file not
    looked up (`looked_up`) has no name yet: it may be one."""
    return not any(_unnamed(r) or kind_of(display_name(r)) in READABLE for r in refs)


def refused_by_name(refs: list[dict], *, limit_mb: int) -> tuple[SharedFile, ...]:
    """Files `none_readable` says the bot won't read, each refused by its name alone (no call to
    Slack): for the core to say why, without a fetch that would make `help` a question about them."""
    return tuple(
        refusal_before_fetch(display_name(ref), None, limit_mb=limit_mb, index=i)
        or SharedFile(display_name(ref), refusal=NO_LINK)  # a kind it reads: never, after none_readable
        for i, ref in enumerate(refs)
    )


def _unnamed(ref: dict) -> bool:
    return ref.get("file_access") == "check_file_info"


async def looked_up(client: AsyncWebClient, refs: list[dict]) -> list[dict]:
    """The refs with each Slack Connect file's (`file_access: check_file_info`: the event carries its
    id alone) replaced by what files.info says of it, so a file shared without words is judged by its
    name: such a CSV was refused as "a file without an extension". One Slack will not describe stays
    as it was; its fetch asks again, and says why if it still can't."""
    unnamed = [i for i, ref in enumerate(refs) if _unnamed(ref)]
    said = await asyncio.gather(*(_file_info(client, refs[i]) for i in unnamed))
    described = dict(zip(unnamed, said, strict=True))
    return [f if isinstance(f := described.get(i, ref), dict) else ref for i, ref in enumerate(refs)]


def unreadable_note(refs: list[dict], *, limit_mb: int) -> str:
    """What a message of unreadable files alone is told instead of a turn: each file and why."""
    said = [f"`{render.inert(f.name)}`: {f.refusal}" for f in refused_by_name(refs, limit_mb=limit_mb)]
    return "I can't read the files you shared. " + " ".join(said)


def token_may_go_to(url: str, api_url: str) -> bool:
    """Whether the bot token may be sent to `url`: https on Slack's file hosts, or exactly the origin
    (scheme, host, port) of the Web API the bot is configured with. No user part (`user@host`) at all."""
    try:
        u, api = urlsplit(url), urlsplit(api_url)
        if u.username is not None or u.password is not None or not u.hostname:
            return False
        if u.scheme == "https" and u.hostname in SLACK_FILE_HOSTS and u.port in (None, 443):
            return True
        return (u.scheme, u.hostname, u.port) == (api.scheme, api.hostname, api.port)
    except ValueError:  # a port that is not a number
        return False


def is_slack_page(url: str) -> bool:
    """A page on a workspace's own Slack domain (`acme.slack.com/?redir=…`): where Slack sends a request
    for a file the token may not read."""
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith(f".{d}") for d in SLACK_DOMAINS)


async def fetch_shared_files(
    client: AsyncWebClient,
    refs: list[dict],
    *,
    limit_mb: int,
    total_mb: int,
    status: ThreadStatus | None = None,
) -> tuple[SharedFile, ...]:
    """Every shared file, fetched at once; a refusal sentence for each that is not. Each file's size as
    Slack states it is claimed from the message's budget in the order they were shared, before any byte
    is fetched: the files that fit are fetched, the rest refused by name. `status`: the turn's thread
    status, which says which files are being fetched meanwhile, and gives way once they are in."""
    if not refs:
        return ()
    session, own = client.session, None
    if session is None or session.closed:
        session = own = aiohttp.ClientSession()
    try:
        found = await asyncio.gather(
            *(_found(client, ref, index=i, limit_mb=limit_mb) for i, ref in enumerate(refs))
        )
        budget = FilesBudget(file_mb=limit_mb, total_mb=total_mb)
        claimed = [f if isinstance(f, SharedFile) else _claimed(f, budget) for f in found]
        fetches = [_fetched(client, session, *c) for c in claimed if isinstance(c, tuple)]
        names = [c[1].name for c in claimed if isinstance(c, tuple)]
        shown = [show_fetching(status, names)] if fetches and status is not None else []
        fetched = iter((await asyncio.gather(*fetches, *shown))[: len(fetches)])
        if shown:
            await status.resume()
        return tuple(next(fetched) if isinstance(c, tuple) else c for c in claimed)
    finally:
        if own is not None:
            await own.close()


async def _found(client: AsyncWebClient, ref: dict, *, index: int, limit_mb: int) -> dict | SharedFile:
    """The file object to fetch (a Slack Connect file's looked up), or its refusal."""
    name = display_name(ref)
    if index >= MAX_FILES:
        return refusal_before_fetch(name, None, limit_mb=limit_mb, index=index) or SharedFile(name)
    if ref.get("file_access") == "check_file_info":  # Slack Connect: the event has the id alone
        ref = await _file_info(client, ref)
        if isinstance(ref, SharedFile):
            return ref
        name = display_name(ref)
    if quirk := platform_refusal(ref):
        return SharedFile(name, refusal=quirk)
    if refused := refusal_before_fetch(name, _size(ref), limit_mb=limit_mb, index=index):
        return refused
    url = str(ref.get("url_private_download") or ref.get("url_private") or "")
    if not url:
        return SharedFile(name, refusal=NO_LINK)
    if not token_may_go_to(url, client.base_url):
        log.warning("slack: file %s not fetched: its link is on %s", ref.get("id"), urlsplit(url).hostname)
        return SharedFile(name, refusal=NOT_SLACK)
    return {**ref, "url": url}


async def show_fetching(status: ThreadStatus, names: list[str]) -> None:
    """The thread's status while its files download: "is fetching sales.csv…" (two names, or how many).
    Decoration, as "is thinking…" is: bounded, and a refusal changes nothing."""
    shown = [" ".join(n.split())[:STATUS_NAME_CHARS] for n in names]
    what = " and ".join(shown) if len(shown) <= 2 else f"{len(shown)} files"
    await status.show(f"is fetching {what}…")


def _size(ref: dict) -> int | None:
    size = ref.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _claimed(ref: dict, budget: FilesBudget) -> tuple[dict, Claim] | SharedFile:
    """The file with its claim on the message's budget, for the size Slack states; or its refusal."""
    claim = budget.claim(display_name(ref))
    refused = claim.refusal(_size(ref) or 0)
    if refused is not None:
        log.info("slack: file %s not fetched: %s", ref.get("id"), refused.refusal)
    return refused or (ref, claim)


async def _fetched(
    client: AsyncWebClient, session: aiohttp.ClientSession, ref: dict, claim: Claim
) -> SharedFile:
    fetched = claim.settle(
        await download(session, ref["url"], client.token or "", claim=claim, api_url=client.base_url)
    )
    if fetched.refusal:
        log.info("slack: file %s not fetched: %s", ref.get("id"), fetched.refusal)
    return fetched


def platform_refusal(ref: dict) -> str:
    """What Slack's own marks on a file say about fetching it ("" when nothing)."""
    mode = ref.get("mode")
    if mode == "hidden_by_limit":  # https://docs.slack.dev/reference/objects/file-object
        return HIDDEN
    if mode == "tombstone":
        return DELETED
    if mode == "external" or ref.get("is_external"):
        return EXTERNAL
    return ""


async def _file_info(client: AsyncWebClient, ref: dict) -> dict | SharedFile:
    """The whole file object (https://docs.slack.dev/reference/methods/files.info), or the refusal."""
    name = display_name(ref)
    try:
        said = await client.files_info(file=str(ref.get("id") or ""))
    except SlackClientError as exc:
        log.info("slack: files.info for %s failed: %s", ref.get("id"), failure_words(exc))
        return SharedFile(
            name, refusal=f"Slack would not tell me about it ({failure_words(exc, for_people=True)})."
        )
    file = said.get("file")
    if not isinstance(file, dict):
        return SharedFile(name, refusal=NO_LINK)
    described = file_refs([file])[0]
    described.pop("file_access", None)  # looked up: never asked about again
    return described


async def download(
    session: aiohttp.ClientSession, url: str, token: str, *, claim: Claim, api_url: str
) -> SharedFile:
    """One file's bytes, or the sentence why not: bounded by FETCH_TIMEOUT_S in all, STALL_TIMEOUT_S of
    silence, and `claim` (its own cap and what its message has left, counted as the bytes arrive; a
    bigger file is cut off, not read)."""
    name, bound = claim.name, asyncio.timeout(FETCH_TIMEOUT_S)
    try:
        async with bound:
            return await _follow(session, url, token, claim=claim, api_url=api_url)
    except TimeoutError as exc:  # the whole fetch's bound, or aiohttp's connect or read timeout
        if bound.expired():
            return SharedFile(name, refusal=f"Slack did not send it within {FETCH_TIMEOUT_S:g} s.")
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return SharedFile(
                name, refusal=f"Slack's file server did not answer within {CONNECT_TIMEOUT_S:g} s."
            )
        return SharedFile(name, refusal=f"Slack stopped sending it for {STALL_TIMEOUT_S:g} s.")
    except (aiohttp.ClientError, OSError) as exc:  # never the exception's text: it holds the URL
        reason = os_reason(exc) or type(exc).__name__
        return SharedFile(name, refusal=f"I could not fetch it from Slack ({reason}).")


async def _follow(
    session: aiohttp.ClientSession, url: str, token: str, *, claim: Claim, api_url: str
) -> SharedFile:
    name = claim.name
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=STALL_TIMEOUT_S)
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(url, headers=headers, allow_redirects=False, timeout=timeout) as resp:
            if resp.status in REDIRECTS:
                target = urljoin(url, resp.headers.get("Location", ""))
                if token_may_go_to(target, api_url):
                    url = target
                    continue
                return SharedFile(name, refusal=NEEDS_FILES_READ if is_slack_page(target) else SENT_ELSEWHERE)
            return await _read(resp, claim)
    return SharedFile(name, refusal=TOO_MANY_HOPS)


async def _read(resp: aiohttp.ClientResponse, claim: Claim) -> SharedFile:
    name = claim.name
    if resp.status != 200:
        return SharedFile(name, refusal=f"Slack would not send it (HTTP {resp.status}).")
    if resp.content_type == "text/html":  # the sign-in page, for a token without files:read
        return SharedFile(name, refusal=NEEDS_FILES_READ)
    if refused := claim.refusal(resp.content_length or 0):
        return refused
    # A BytesIO's value is its own buffer, not a copy (CPython): the file is held once, not twice.
    data = io.BytesIO()
    async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
        if refused := claim.refusal(data.tell() + len(chunk)):
            resp.close()  # the rest is never read: the connection is dropped, not drained
            return refused
        data.write(chunk)
    return SharedFile(name, data=data.getvalue())
