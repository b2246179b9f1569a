"""Whether the bot connects to a URL that came in a Teams activity, and the client it connects with.

Two URLs in an activity are written by the sender's client, not by Microsoft: the `downloadUrl` of a
file shared in personal chat (bot/teams_download.py) and the `uploadUrl` of an accepted file consent
(bot/teams_consent.py). The activity is signed by the Bot Framework, but a Direct Line or Web Chat
client can put any URL there, so it could name the cloud's metadata address or a service on the bot's
own network (a blind GET or PUT from inside). Both follow the same rules, kept here once:
- https only; no login in the URL; where the caller names domains, only hosts under them.
- The host is resolved and every address vetted before connecting: public unicast only, an IPv4
  address carried inside an IPv6 one held to its own rule (`permitted`).
- The address actually connected to is checked again the moment the TCP connection opens, before TLS
  and before a byte of the request (a name that resolves differently the second time: DNS
  rebinding). `client()` puts that check on every request it sends.
- The client sends nothing of its own: no environment proxy (the address checked must be the one
  connected to), no netrc login, no cookie; it follows no redirect (a caller that does vets each
  target with `vet` first).
Without MICROSOFT_APP_ID the bot serves only loopback callers whose serviceUrl is loopback
(bot/teams_auth.py); then, and only then, loopback URLs pass too, http included (`loopback_ok`) — the
rule the Bot Connector's own address follows there (the Bot Framework Emulator, the tests).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from urllib.parse import urlsplit

import httpx

from bot.teams_auth import is_loopback
from core.wording import os_reason

# Whom https trusts: httpx's default (certifi's CAs); a test serving https on loopback trusts its own CA.
TRUST: ssl.SSLContext | bool = True


class Refused(Exception):
    """A URL the bot does not connect to. The message says why, for a log line; never the URL."""


class HostUnknown(Refused):
    """Its host does not resolve; the message is the resolver's reason."""


def client(timeout: httpx.Timeout, *, loopback_ok: bool, headers: dict | None = None) -> httpx.AsyncClient:
    """An httpx client that sends only what its caller gives it, follows no redirect, and refuses a
    connection whose peer `permitted` refuses, before anything is sent on it."""

    async def check_peer(request: httpx.Request) -> None:
        request.extensions["trace"] = _peer_check(loopback_ok)

    return httpx.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        verify=TRUST,
        timeout=timeout,
        headers=headers,
        event_hooks={"request": [check_peer]},
    )


async def vet(url: str, *, loopback_ok: bool, domains: tuple[str, ...] = ()) -> None:
    """Raise `Refused` for a URL that is not https (http only to loopback, with `loopback_ok`), carries
    a login, names a host outside `domains` (when given; loopback passes with `loopback_ok`), or a host
    any of whose addresses is not public. Parsed as httpx parses it, so what is vetted is what the
    client connects to."""
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except (httpx.InvalidURL, UnicodeError, ValueError, TypeError):  # `https://[::1/`, port `x`
        raise Refused("not a URL") from None
    local = loopback_ok and is_loopback(host)
    if not host or not (parsed.scheme == "https" or (parsed.scheme == "http" and local)):
        raise Refused("not https")
    if parsed.userinfo:
        raise Refused("it carries a login")
    if domains and not (local or under(host, domains)):
        raise Refused("its host is not one it may be")
    addresses = await resolve(host, port)
    if not addresses or not all(permitted(a, loopback_ok=loopback_ok) for a in addresses):
        raise Refused("its host has an address that is not public")


def under(host: str, domains: tuple[str, ...]) -> bool:
    """`host` is a name inside one of `domains` (`contoso-my.sharepoint.com` is under `sharepoint.com`;
    `sharepoint.com.evil.example` and `evilsharepoint.com` are not)."""
    name = host.lower().rstrip(".")
    return any(name.endswith(f".{domain}") for domain in domains)


def shown(url: str) -> str:
    """The URL for a log line: scheme, host, port and path; never its login, query or fragment (the
    query is where a pre-authenticated link keeps its credential: OneDrive's `tempauth`)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"[:200]
    except ValueError:
        return "(not a URL)"


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (a literal address is itself)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except UnicodeError:  # a name IDNA cannot encode (`a..b`, a label over 63 characters)
        raise Refused("not a host name") from None
    except socket.gaierror as exc:
        raise HostUnknown(os_reason(exc) or "its host is unknown") from None
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


def _peer_check(loopback_ok: bool):
    """httpx's `trace` request extension, run by httpcore at each step of a request: as the TCP
    connection opens (`connection.connect_tcp.complete`), its peer is checked, and the connection
    closed unused if `permitted` refuses it (or it can't be known)."""

    async def trace(event: str, info: dict) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        peer = stream.get_extra_info("server_addr") if stream is not None else None
        if not peer or not permitted(str(peer[0]), loopback_ok=loopback_ok):
            if stream is not None:
                await stream.aclose()
            raise Refused("the address it connected to is not public")

    return trace
