"""The download of a file shared in a Teams personal chat (bot/teams_download.py), against a loopback
web server standing where OneDrive would: bytes whole, the size cap while streaming, no credential
ever sent, only https to public addresses (loopback only without an app id), bounded in time, and a
sentence for every way it fails."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from bot import teams_download, url_vetting
from bot.teams_download import NOT_FOLLOWED, WEB_PAGE, download
from bot.url_vetting import permitted
from core.shared_files import Claim, FilesBudget, over_total, too_large
from tests.fakes.file_host import FileHost, Served

CSV = b"region,sales\nnorth,10\nsouth,20\n"


def alone(name: str, mb: int) -> Claim:
    """The claim of a file shared on its own, DATATHREAD_SHARED_FILE_MB being `mb`."""
    return FilesBudget(file_mb=mb, total_mb=mb).claim(name)


@pytest.fixture
def host():
    fake = FileHost().start()
    yield fake
    fake.stop()


@pytest.fixture
def tls_host(monkeypatch):
    fake = FileHost(tls=True).start()
    monkeypatch.setattr(url_vetting, "TRUST", fake.trust())
    yield fake
    fake.stop()


async def test_the_bytes_come_whole_and_nothing_but_the_link_is_sent(host):
    """The link is its own credential: no Authorization, no cookie goes with it."""
    url = host.serve("/dl/sales.csv", Served(CSV, content_type="text/csv"))
    got = await download(alone("sales.csv", 1), url + "?tempauth=abc", loopback_ok=True)
    assert got.data == CSV and got.name == "sales.csv" and not got.refusal
    [seen] = host.seen
    assert seen.path == "/dl/sales.csv?tempauth=abc"
    assert not {"authorization", "cookie", "proxy-authorization"} & set(seen.headers)


async def test_a_stream_with_no_size_stops_at_the_limit(host):
    """Teams gives no size up front: an endless body is cut at DATATHREAD_SHARED_FILE_MB, not read to
    the end (nor held in memory)."""
    url = host.serve("/endless.csv", Served(b"a,b\n", endless=True))
    started = time.monotonic()
    got = await download(alone("endless.csv", 1), url, loopback_ok=True)
    assert got == too_large("endless.csv", 1) and got.data is None
    assert time.monotonic() - started < 10
    await asyncio.sleep(0.2)
    assert host.sent_bytes < 8 * 2**20  # stopped near 1 MB (socket buffers aside), not streamed on


async def test_a_declared_size_over_the_limit_is_refused_before_the_body(host):
    url = host.serve("/big.csv", Served(b"a,b\n", endless=True, length=5 * 2**20))
    started = time.monotonic()
    got = await download(alone("big.csv", 1), url, loopback_ok=True)
    assert got == too_large("big.csv", 1) and time.monotonic() - started < 5


async def test_a_file_just_under_the_limit_comes_whole(host):
    body = b"x" * (2**20 - 1)
    url = host.serve("/fits.csv", Served(body, content_type="text/csv"))
    assert (await download(alone("fits.csv", 1), url, loopback_ok=True)).data == body


async def test_downloads_of_one_message_share_its_total_as_the_bytes_arrive(host):
    """DATATHREAD_SHARED_FILES_MB: of two 700 KB files downloaded at once under a 1 MB total, one comes
    whole and the other is refused by its declared length, before its body. A file after them with no
    size at all is cut off where the total runs out, long before its own cap."""
    budget = FilesBudget(file_mb=1, total_mb=1)
    body = b"y" * (700 * 2**10)
    urls = [host.serve(f"/{n}.csv", Served(body, content_type="text/csv")) for n in ("a", "b")]
    got = await asyncio.gather(
        *(download(budget.claim(f"{n}.csv"), u, loopback_ok=True) for n, u in zip("ab", urls, strict=True))
    )
    [whole] = [g for g in got if g.data is not None]
    [cut] = [g for g in got if g.data is None]
    assert whole.data == body and cut == over_total(cut.name, 1)
    endless = host.serve("/endless.csv", Served(b"a,b\n", endless=True, drip_s=0.01))
    assert await download(budget.claim("endless.csv"), endless, loopback_ok=True) == over_total(
        "endless.csv", 1
    )
    assert budget.left == 2**20 - len(body)  # what the refused files held is given back


async def test_a_large_download_is_held_once_not_twice(host):
    """The chunks are not joined into a copy at the end: 16 MB peaks near 16 MB, not 32."""
    body = b"z" * (16 * 2**20)
    url = host.serve("/big.csv", Served(body, content_type="text/csv"))
    tracemalloc.start()
    try:
        got = await download(alone("big.csv", 32), url, loopback_ok=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.data == body and peak < 1.4 * len(body), peak / 2**20


@pytest.mark.parametrize(
    "url",
    [
        "http://{loop}/dl/sales.csv",  # plain http, and to loopback
        "https://127.0.0.1:{port}/dl/sales.csv",  # https, but loopback
        "https://localhost:{port}/dl/sales.csv",  # a name that resolves to loopback
        "https://[::1]:{port}/dl/sales.csv",
        "https://10.20.30.40/dl/sales.csv",  # the bot's own network
        "https://169.254.169.254/latest/meta-data/",  # the cloud's metadata service
        "https://[::ffff:192.168.1.1]/x.csv",  # a private address written as IPv6
        "https://[64:ff9b::a9fe:a9fe]/latest/meta-data/",  # the metadata service through NAT64
        "https://user:secret@contoso.sharepoint.com/x.csv",  # a login in the link
        "ftp://contoso.sharepoint.com/x.csv",
        "https://[::1/x.csv",  # malformed: a sentence too, never an exception
        "https://contoso.sharepoint.com:port/x.csv",
        "https://a..b/x.csv",
        "",
    ],
)
async def test_with_an_app_id_only_https_to_public_addresses_is_followed(host, url):
    """In production (an app id) a link to loopback or a private address, or not https, is refused
    before any connection: the host sees nothing."""
    host.serve("/dl/sales.csv", CSV)
    port = host.server.server_address[1]
    url = url.format(loop=f"127.0.0.1:{port}", port=port)
    started = time.monotonic()
    got = await download(alone("sales.csv", 1), url, loopback_ok=False)
    assert got.refusal == NOT_FOLLOWED and got.data is None and not host.seen
    assert time.monotonic() - started < 5


async def test_without_an_app_id_plain_http_is_followed_to_loopback_only(host):
    """The rule of the Bot Connector's own address without an app id: loopback, http included."""
    assert (await download(alone("a.csv", 1), host.serve("/a.csv", CSV), loopback_ok=True)).data == CSV
    elsewhere = await download(alone("a.csv", 1), "http://93.184.216.34/a.csv", loopback_ok=True)
    assert elsewhere.refusal == NOT_FOLLOWED
    private = await download(alone("a.csv", 1), "https://10.0.0.7/a.csv", loopback_ok=True)
    assert private.refusal == NOT_FOLLOWED


@pytest.mark.parametrize(
    ("address", "loopback_ok", "expected"),
    [
        ("93.184.216.34", False, True),
        ("2606:2800:220:1:248:1893:25c8:1946", False, True),
        ("127.0.0.1", False, False),
        ("127.0.0.1", True, True),
        ("::1", True, True),
        ("10.1.2.3", True, False),
        ("172.16.0.1", False, False),
        ("192.168.0.1", False, False),
        ("100.64.0.1", False, False),  # carrier-grade NAT
        ("169.254.169.254", False, False),
        ("fd00::1", False, False),
        ("fe80::1%eth0", False, False),
        ("::ffff:10.0.0.1", False, False),
        ("::ffff:93.184.216.34", False, True),
        ("0.0.0.0", True, False),
        ("224.0.0.1", False, False),
        ("not an address", True, False),
    ],
)
def test_which_addresses_are_followed(address, loopback_ok, expected):
    assert permitted(address, loopback_ok=loopback_ok) is expected


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64's well-known prefix: 169.254.169.254 through the gateway
        "64:ff9b::a00:1",  # … 10.0.0.1
        "64:ff9b::7f00:1",  # … 127.0.0.1
        "64:ff9b:1::808:808",  # the local-use NAT64 prefix: where the IPv4 sits is the network's choice
        "2002:a9fe:a9fe::1",  # 6to4
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "::a9fe:a9fe",  # IPv4-compatible
        "::ffff:0:a9fe:a9fe",  # IPv4-translated (SIIT)
        "2001:0:a9fe:a9fe::1",  # Teredo, its server the metadata address
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo to 192.0.2.45, a documentation address
    ],
)
def test_a_private_ipv4_address_inside_an_ipv6_one_is_refused(address):
    """Python takes these for public (`is_global`), whatever IPv4 address they lead to."""
    assert permitted(address, loopback_ok=False) is False
    assert permitted(address, loopback_ok=True) is False  # loopback_ok means ::1 and 127/8, not these


def test_a_public_ipv4_address_through_nat64_is_followed():
    """An IPv6-only host reaches an IPv4-only one through NAT64: that stays possible."""
    assert permitted("64:ff9b::808:808", loopback_ok=False) is True


async def test_redirects_are_followed_and_each_hop_vetted(host):
    """OneDrive may send the download on; each target meets the same rule, and one to plain http or a
    private address is not followed."""
    target = host.serve("/real.csv", CSV)
    hop = host.serve("/hop", Served(status=302, headers={"Location": "/real.csv"}))
    assert (await download(alone("a.csv", 1), hop, loopback_ok=True)).data == CSV
    assert [s.path for s in host.seen] == ["/hop", "/real.csv"] and target.endswith("/real.csv")
    for location in ("http://93.184.216.34/a.csv", "https://169.254.169.254/latest/meta-data/"):
        away = host.serve("/away", Served(status=307, headers={"Location": location}))
        assert (await download(alone("a.csv", 1), away, loopback_ok=True)).refusal == NOT_FOLLOWED
    loop = host.serve("/loop", Served(status=302, headers={"Location": "/loop"}))
    assert "too many times" in (await download(alone("a.csv", 1), loop, loopback_ok=True)).refusal


async def test_a_silent_host_is_given_up_on_within_its_bound(host, monkeypatch):
    """A host that takes the connection and never answers, and one that sends a byte now and then for
    ever: each ends in a sentence within the bounds, never a hang."""
    monkeypatch.setattr(teams_download, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(teams_download, "DOWNLOAD_DEADLINE_S", 2.0)
    silent = host.serve("/silent.csv", Served(CSV, stall_s=60))
    started = time.monotonic()
    got = await download(alone("silent.csv", 1), silent, loopback_ok=True)
    assert time.monotonic() - started < 2 and got.data is None
    assert got.refusal == "Where Teams keeps it stopped answering; please try again."
    dripping = host.serve("/drip.csv", Served(b"a", endless=True, drip_s=0.2))
    started = time.monotonic()
    got = await download(alone("drip.csv", 100), dripping, loopback_ok=True)
    assert time.monotonic() - started < 4 and got.data is None
    assert got.refusal == "It did not finish downloading within 2 s; please try again."


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (403, "Teams' link to it no longer works (HTTP 403); please attach the file again."),
        (404, "Teams' link to it no longer works (HTTP 404); please attach the file again."),
        (503, "OneDrive did not give it to me (HTTP 503); please try again."),
    ],
)
async def test_a_refusal_is_one_sentence(host, status, words, caplog):
    url = host.serve("/dl/x.csv", Served(b'{"error": "nope"}', status=status))
    got = await download(alone("x.csv", 1), url + "?tempauth=SECRET-TOKEN", loopback_ok=True)
    assert got.refusal == words and got.data is None
    assert "SECRET-TOKEN" not in caplog.text and "/dl/" not in caplog.text  # the link is a credential


async def test_a_web_page_instead_of_the_file_is_said(host):
    """Teams on a phone has sent a sharing link that answers with SharePoint's viewer page, not the
    file: read as data it would be a CSV of HTML."""
    url = host.serve("/:x:/g/personal/ada/EYpp", Served(b"<html>viewer</html>", content_type="text/html"))
    assert (await download(alone("x.csv", 1), url, loopback_ok=True)).refusal == WEB_PAGE


async def test_a_host_that_refuses_the_connection_is_said(host):
    port = host.server.server_address[1]
    host.stop()
    got = await download(alone("x.csv", 1), f"http://127.0.0.1:{port}/x.csv", loopback_ok=True)
    assert got.refusal == "I couldn't download it (connection refused); please try again."


async def test_https_to_loopback_works_without_an_app_id(tls_host):
    """The control for the next test: the test CA is trusted, and https to `localhost` downloads."""
    url = tls_host.serve("/a.csv", CSV)
    assert url.startswith("https://localhost:")
    assert (await download(alone("a.csv", 1), url, loopback_ok=True)).data == CSV


async def test_the_address_connected_to_is_checked_again(tls_host, monkeypatch):
    """A name that resolves to a public address when vetted and to loopback when connecting (DNS
    rebinding) is refused as the connection opens: the peer's address is checked too, before TLS and
    before the request (which carries the link's token) is sent."""

    async def public(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    monkeypatch.setattr(url_vetting, "resolve", public)
    url = tls_host.serve("/a.csv", CSV)
    got = await download(alone("a.csv", 1), url, loopback_ok=False)
    assert got.refusal == NOT_FOLLOWED and got.data is None
    assert not tls_host.seen  # it connected (the name said public), and sent nothing on it
