"""Downloading a file a person shared with the bot in a Teams personal chat. Teams puts a
`downloadUrl` on the message: a pre-authenticated, short-lived link to the file in the sender's
OneDrive (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/bots-filesv4).

Why a client of its own, and so careful:
- The link is its own credential (a `tempauth` token in its query). Nothing else goes with it: no bot
  token, no cookie, no netrc login (`trust_env=False`), and it never reaches a log line or a sentence.
- The link is data from the activity. The activity is signed by the Bot Framework, but its attachments
  are what the sender's client put there (a Direct Line or Web Chat client can send any attachment),
  so it could name the cloud's metadata address or a service on the bot's own network. Only https to
  public addresses is followed: the host is resolved and every address vetted before connecting, and
  the address actually connected to is checked again before a byte of the body is read (a name that
  resolves differently the second time). Redirects are followed by hand, each hop vetted the same way.
  Without MICROSOFT_APP_ID the bot serves only loopback callers whose serviceUrl is loopback
  (bot/teams_auth.py); then, and only then, loopback links are followed too, http included — the
  rule the Bot Connector's own address follows there (the Bot Framework Emulator, the tests).
  Environment proxies are not used: the address checked must be the one connected to.
- Teams says nothing of the size up front: the stream stops at DATATHREAD_SHARED_FILE_MB, or where
  the message's files together would pass DATATHREAD_SHARED_FILES_MB (each download holds a `Claim` on
  the message's budget, grown by the length the host declares, then by the bytes as they arrive).
- Time: opening the connection, each silence between chunks, and the whole download are bounded.
Every way it can fail is one sentence about the file ("it"), as core/shared_files.py words refusals.
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import logging
import socket
import ssl
from urllib.parse import urlsplit

import httpx

from bot.teams_auth import is_loopback
from core.events import SharedFile
from core.shared_files import Claim
from core.wording import os_reason

log = logging.getLogger("datathread.teams")

# Module constants, read at each call: tests shorten them.
CONNECT_TIMEOUT_S = 10.0  # to open the connection (TLS included)
READ_TIMEOUT_S = 30.0  # the longest silence between two chunks of the file
DOWNLOAD_DEADLINE_S = 180.0  # the whole file, redirects included: 100 MB at under 1 MB/s is over it
MAX_REDIRECTS = 5
# Whom https trusts: httpx's default (certifi's CAs); a test serving https on loopback trusts its own CA.
TRUST: ssl.SSLContext | bool = True

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
    except TimeoutError:
        return _refused(
            name, f"It did not finish downloading within {DOWNLOAD_DEADLINE_S:g} s; please try again."
        )
    except httpx.TimeoutException:
        return _refused(name, "Where Teams keeps it stopped answering; please try again.")
    except httpx.InvalidURL:  # what urlsplit took and httpx does not
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
    async with httpx.AsyncClient(
        trust_env=False, follow_redirects=False, verify=TRUST, timeout=timeouts, headers=headers
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            await _vet(url, loopback_ok=loopback_ok)
            async with client.stream("GET", url) as response:
                _vet_peer(response, loopback_ok=loopback_ok)
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


async def _vet(url: str, *, loopback_ok: bool) -> None:
    """Refuse a link that is not https (http only to loopback, without an app id), carries a login, or
    names a host any of whose addresses is not public."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # `https://[::1/`, a port that is not a number
        raise DownloadRefused(NOT_FOLLOWED) from None
    plain_local = parts.scheme == "http" and loopback_ok and is_loopback(host)
    if not host or parts.username or parts.password or not (parts.scheme == "https" or plain_local):
        raise DownloadRefused(NOT_FOLLOWED)
    addresses = await resolve(host, port)
    if not addresses or not all(permitted(a, loopback_ok=loopback_ok) for a in addresses):
        raise DownloadRefused(NOT_FOLLOWED)


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (a literal address is itself)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError:  # a name IDNA cannot encode (`a..b`, a label over 63 characters)
        raise DownloadRefused(NOT_FOLLOWED) from None
    except socket.gaierror as exc:
        raise DownloadRefused(
            f"I couldn't reach where Teams keeps it ({os_reason(exc) or 'its host is unknown'}); "
            "please try again."
        ) from None
    return [str(sockaddr[0]) for *_, sockaddr in found]


def permitted(address: str, *, loopback_ok: bool) -> bool:
    """A public unicast address; or loopback, when `loopback_ok`. An IPv6 address that carries an
    IPv4 one (`embedded_ipv4`) is held to that address's rule too: the route ends there."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope (`fe80::1%eth0`) aside
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    if isinstance(ip, ipaddress.IPv6Address) and ip in NAT64_LOCAL:
        return False  # where its IPv4 address sits is the network's choice: it can't be checked
    if isinstance(ip, ipaddress.IPv6Address) and (inner := embedded_ipv4(ip)):
        return all(_public(v4) for v4 in inner) and _public(ip)
    return _public(ip) or (loopback_ok and ip.is_loopback)


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 in the last 32 bits
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215's: a prefix of /48 to /96, the IPv4 after it
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated (RFC 4291), still routed by some stacks
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT's (RFC 2765), beside the mapped ones


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to, where it has one inside (Python's `is_global` takes
    these for public whatever they carry: `64:ff9b::a9fe:a9fe` is 169.254.169.254 through a NAT64
    gateway, `2002:a9fe:a9fe::1` through 6to4, `::a9fe:a9fe` as IPv4-compatible). Teredo's server and
    client both. (The local-use NAT64 prefix is refused whole, in `permitted`.)"""
    value = int(ip)
    # (`::` and `::1` are in the IPv4-compatible range, and are themselves)
    if ip in NAT64 or ip in IPV4_TRANSLATED or (ip in IPV4_COMPATIBLE and value > 1):
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    return []


def _vet_peer(response: httpx.Response, *, loopback_ok: bool) -> None:
    """The address this response came from, checked again: the name may have resolved elsewhere when
    httpx connected than when `_vet` looked (DNS rebinding). Unknown means refused."""
    stream = response.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if not peer or not permitted(str(peer[0]), loopback_ok=loopback_ok):
        raise DownloadRefused(NOT_FOLLOWED)


def _tls_reason(exc: BaseException) -> str:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return "its certificate could not be verified"
        if isinstance(seen, ssl.SSLError):
            return "a TLS error"
        seen = seen.__cause__ or seen.__context__
    return ""
