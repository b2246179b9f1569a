"""Downloading a file a person shared with the bot in a Teams personal chat. Teams puts a
`downloadUrl` on the message: a pre-authenticated, short-lived link to the file in the sender's
OneDrive (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4).

Why a client of its own, and so careful:
- The link is its own credential (a `tempauth` token in its query). Nothing else goes with it: no bot
  token, no cookie, no netrc login, and it never reaches a log line or a sentence.
- The link is data from the activity (a Direct Line or Web Chat client can send any attachment), so
  it is held to bot/url_vetting.py's rules, the ones OneDrive's upload URL follows too: https to
  public addresses only, the address connected to checked again as the connection opens (before the
  request, and so the link's token, is sent), no environment proxy, loopback only without
  MICROSOFT_APP_ID. Redirects are followed by hand, each hop vetted the same way.
- Teams says nothing of the size up front: the stream stops at DATATHREAD_SHARED_FILE_MB, or where
  the message's files together would pass DATATHREAD_SHARED_FILES_MB (each download holds a `Claim` on
  the message's budget, grown by the length the host declares, then by the bytes as they arrive).
- Time: opening the connection, each silence between chunks, and the whole download are bounded.
Every way it can fail is one sentence about the file ("it"), as core/shared_files.py words refusals.
"""

from __future__ import annotations

import asyncio
import io
import logging
import ssl

import httpx

from bot import url_vetting
from bot.url_vetting import HostUnknown, Refused, vet
from core.events import SharedFile
from core.shared_files import Claim
from core.wording import os_reason

log = logging.getLogger("datathread.teams")

# Module constants, read at each call: tests shorten them.
CONNECT_TIMEOUT_S = 10.0  # to open the connection (TLS included)
READ_TIMEOUT_S = 30.0  # the longest silence between two chunks of the file
DOWNLOAD_DEADLINE_S = 180.0  # the whole file, redirects included: 100 MB at under 1 MB/s is over it
MAX_REDIRECTS = 5

NOT_FOLLOWED = "Teams gave me a link to it that I don't follow (only https to a public address)."
WEB_PAGE = (
    "Teams gave me a web page instead of the file (Teams on a phone shares some files that way); "
    "attach it from Teams on a computer or the web."
)


class DownloadRefused(Exception):
    """The download stopped, with the sentence for the person."""


class OverLimit(Exception):
    """More bytes than the file's claim allows (DATATHREAD_SHARED_FILE_MB, or the message's total)."""

    def __init__(self, refused: SharedFile):
        super().__init__(refused.refusal)
        self.refused = refused


async def download(claim: Claim, url: str, *, loopback_ok: bool) -> SharedFile:
    """The file at `url` as a `SharedFile` named as `claim` is, or a refused one saying why; never
    raises for the file. It holds on the message's budget exactly the bytes it returns.
    `loopback_ok`: the bot has no app id, so loopback links are followed too (see the docstring)."""
    return claim.settle(await _download(claim, url, loopback_ok=loopback_ok))


async def _download(claim: Claim, url: str, *, loopback_ok: bool) -> SharedFile:
    name = claim.name
    try:
        async with asyncio.timeout(DOWNLOAD_DEADLINE_S):
            data = await _fetch(url, claim, loopback_ok=loopback_ok)
    except OverLimit as exc:
        return exc.refused
    except DownloadRefused as exc:
        return _refused(name, str(exc))
    except HostUnknown as exc:
        return _refused(name, f"I couldn't reach where Teams keeps it ({exc}); please try again.")
    except Refused:  # bot/url_vetting.py: not https to a public address, nor the peer connected to
        return _refused(name, NOT_FOLLOWED)
    except TimeoutError:
        return _refused(
            name, f"It did not finish downloading within {DOWNLOAD_DEADLINE_S:g} s; please try again."
        )
    except httpx.TimeoutException:
        return _refused(name, "Where Teams keeps it stopped answering; please try again.")
    except httpx.InvalidURL:  # a redirect's target httpx itself does not take
        return _refused(name, NOT_FOLLOWED)
    except (httpx.HTTPError, OSError) as exc:  # refused, reset, TLS, a broken stream: the reason, no URL
        reason = os_reason(exc) or _tls_reason(exc) or type(exc).__name__
        return _refused(name, f"I couldn't download it ({reason}); please try again.")
    except Exception as exc:  # never the turn's end for one file; the type only (a message may hold the link)
        return _refused(name, f"I couldn't download it ({type(exc).__name__}); please try again.")
    return SharedFile(name, data)


def _refused(name: str, sentence: str) -> SharedFile:
    log.warning("teams: a shared file was not downloaded: %s", sentence)  # neither its name nor its link
    return SharedFile(name, refusal=sentence)


async def _fetch(url: str, claim: Claim, *, loopback_ok: bool) -> bytes:
    timeouts = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    # identity: the cap counts the bytes as they arrive, not a gzip stream that inflates past it
    headers = {"Accept-Encoding": "identity"}
    async with url_vetting.client(timeouts, loopback_ok=loopback_ok, headers=headers) as client:
        for _ in range(MAX_REDIRECTS + 1):
            await vet(url, loopback_ok=loopback_ok)
            async with client.stream("GET", url) as response:
                if response.next_request is not None:  # a redirect: its target is vetted in turn
                    url = str(response.next_request.url)
                    continue
                return await _body(response, claim)
    raise DownloadRefused("Its download link sent me on too many times; please send the file again.")


async def _body(response: httpx.Response, claim: Claim) -> bytes:
    """The body, stopped as soon as it passes what `claim` allows; a refusal or a web page as a sentence."""
    status = response.status_code
    if status in (401, 403, 404, 410):  # the tempauth link expired, or the file was moved or deleted
        raise DownloadRefused(
            f"Teams' link to it no longer works (HTTP {status}); please attach the file again."
        )
    if status >= 300:
        raise DownloadRefused(f"OneDrive did not give it to me (HTTP {status}); please try again.")
    if response.headers.get("content-type", "").split(";")[0].strip().lower() == "text/html":
        raise DownloadRefused(WEB_PAGE)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and (refused := claim.refusal(int(declared))):
        raise OverLimit(refused)
    # A BytesIO's value is its own buffer, not a copy (CPython): the file is held once, not twice.
    data = io.BytesIO()
    async for chunk in response.aiter_bytes():
        if refused := claim.refusal(data.tell() + len(chunk)):
            raise OverLimit(refused)
        data.write(chunk)
    return data.getvalue()


def _tls_reason(exc: BaseException) -> str:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return "its certificate could not be verified"
        if isinstance(seen, ssl.SSLError):
            return "a TLS error"
        seen = seen.__cause__ or seen.__context__
    return ""
