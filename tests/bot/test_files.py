"""Signed download links (pure), served through the real `/files/` route, and the S3 presigned variant
(moto)."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse

import boto3
import httpx
import pytest
from moto import mock_aws
from pydantic import SecretStr
from starlette.applications import Starlette

from bot.files import FileLinks, LinkSigner, LinkUnavailable
from tests.fakes.black_hole import BlackHole


def parts(url: str) -> tuple[str, str, str, str]:
    split = urllib.parse.urlsplit(url)
    session, _, path = urllib.parse.unquote(split.path.removeprefix("/files/")).partition("/")
    query = dict(urllib.parse.parse_qsl(split.query))
    return session, path, query["exp"], query["sig"]


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    "change,at,expected",
    [
        ({}, NOW, None),
        ({}, NOW + 59, None),
        ({}, NOW + 61, "expired"),
        ({"path": "other.csv"}, NOW, "bad signature"),
        ({"session": "te-other"}, NOW, "bad signature"),
        ({"exp": str(int(NOW) + 9999)}, NOW, "bad signature"),
        ({"exp": "soon"}, NOW, "bad signature"),
        ({"sig": "A" * 43}, NOW, "bad signature"),
    ],
)
def test_link_check(change, at, expected):
    signer = LinkSigner(secret=b"k" * 32, public_url="https://bot.example/", ttl_s=60, clock=lambda: NOW)
    url = signer.sign("te-abc", "sub/delays.csv")
    assert url.startswith("https://bot.example/files/te-abc/sub/delays.csv?")
    session, path, exp, sig = parts(url)
    signer.clock = lambda: at
    got = signer.check(
        change.get("session", session),
        change.get("path", path),
        change.get("exp", exp),
        change.get("sig", sig),
    )
    assert got == expected


async def test_without_a_configured_secret_every_process_signs_with_the_one_kept_in_the_store(settings):
    """Two processes over one store (the web process and a turn worker, or a restart) each open it
    themselves: they get the same kept secret, so one's links pass the other's check; a configured
    DATATHREAD_LINK_SECRET is used as it is. (End to end through `serve`'s worker:
    tests/bot/test_serve_process.py.)"""
    from core.sandbox_factory import open_threads

    async def signer_of(configured) -> LinkSigner:
        async with open_threads(configured) as threads:
            return await FileLinks(configured, read=_never_read, kept_secret=threads.kept_secret).signer()

    web, worker = await signer_of(settings), await signer_of(settings)
    assert len(web.secret) >= 32 and web.secret == worker.secret
    session, path, exp, sig = parts(worker.sign("te-abc", "delays.csv"))
    assert web.check(session, path, exp, sig) is None
    fixed = settings.model_copy(update={"link_secret": SecretStr("s3cret-value" * 3)})
    assert (await signer_of(fixed)).secret == b"s3cret-value" * 3
    other = settings.model_copy(update={"home": settings.home.parent / "another-home"})
    assert (await signer_of(other)).secret != web.secret  # another store, another secret


async def test_s3_presigned_link(settings):
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="dt-files")
        configured = settings.model_copy(
            update={"files_bucket": "dt-files/exports", "aws_region": "us-east-1"}
        )
        links = FileLinks(configured, read=_never_read, kept_secret=_no_secret)
        url = await links.download_link("te-abc", "delays.csv", b"carrier\nF9\n")
        split = urllib.parse.urlsplit(url)
        assert "dt-files" in split.netloc + split.path and "Expires" in split.query
        key = urllib.parse.unquote(split.path.lstrip("/").removeprefix("dt-files/"))
        assert key.startswith("exports/files/te-abc/") and key.endswith("/delays.csv")
        body = (
            boto3.client("s3", region_name="us-east-1").get_object(Bucket="dt-files", Key=key)["Body"].read()
        )
    assert body == b"carrier\nF9\n"


async def test_a_files_bucket_that_never_answers_is_said_within_the_bounded_tries(settings, monkeypatch):
    """The files bucket's client kept botocore's defaults (60 s reads, several tries) when the data
    sources' was bounded: a Teams file link against an endpoint that never answered took minutes. Now
    it is the same bounded client (core/s3_client.py): two tries, each of the read timeout (0.3 s here)."""
    monkeypatch.setattr("core.s3_client.CONNECT_TIMEOUT_S", 0.3, raising=False)
    monkeypatch.setattr("core.s3_client.READ_TIMEOUT_S", 0.3, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-a-sentence")
    hole = BlackHole().start()
    try:
        configured = settings.model_copy(
            update={
                "files_bucket": "dt-files/exports",
                "aws_region": "us-east-1",
                "s3_endpoint_url": hole.url,
            }
        )
        links = FileLinks(configured, read=_never_read, kept_secret=_no_secret)
        started = time.monotonic()
        with pytest.raises(LinkUnavailable) as failed:
            await asyncio.wait_for(links.download_link("te-abc", "delays.csv", b"carrier\nF9\n"), 10)
        took = time.monotonic() - started
    finally:
        hole.stop()
    assert took < 6, f"gave up after {took:.1f} s"  # two reads of 0.3 s, a backoff, a busy host
    assert len(hole.accepted_at) == 2, hole.accepted_at  # the first try and one retry
    # a few words for the thread ("I couldn't attach `delays.csv` (…)"), never the endpoint or the key
    assert str(failed.value) == "the files bucket could not take it: it did not answer in time"


async def test_a_files_bucket_that_refuses_is_logged_once_and_is_no_missing_file(
    settings, monkeypatch, caplog
):
    """A refusal of the files bucket (NoSuchBucket, AccessDenied, no credentials) became an OSError, which
    a Teams delivery shows the person as a missing file's reason and never logs: whoever runs
    datathread did not hear of it. Now it is no OSError, and one warning line says it, without the
    secret key or a signed URL."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-a-log-line")
    with mock_aws():  # no bucket made: S3 answers NoSuchBucket
        configured = settings.model_copy(
            update={"files_bucket": "dt-gone/exports", "aws_region": "us-east-1"}
        )
        links = FileLinks(configured, read=_never_read, kept_secret=_no_secret)
        with (
            caplog.at_level(logging.WARNING, logger="datathread.files"),
            pytest.raises(LinkUnavailable) as failed,
        ):
            await links.download_link("te-abc", "delays.csv", b"carrier\nF9\n")
    assert not isinstance(failed.value, OSError)
    assert str(failed.value).startswith("the files bucket could not take it: NoSuchBucket")
    [line] = [r.getMessage() for r in caplog.records if r.name == "datathread.files"]
    assert "NoSuchBucket" in line and "delays.csv" in line and "te-abc" in line and "\n" not in line
    assert "never-in-a-log-line" not in caplog.text and "Signature" not in caplog.text


NAMES = {
    "遅延.csv": ("download.csv", "%E9%81%85%E5%BB%B6.csv"),
    "café.csv": ("cafe.csv", "caf%C3%A9.csv"),
    'say "hi"\\now.csv': ("say _hi__now.csv", "say%20%22hi%22%5Cnow.csv"),
    "x\r\tSet-Cookie: a=b.csv": ("xSet-Cookie: a=b.csv", "xSet-Cookie%3A%20a%3Db.csv"),
}


@pytest.mark.parametrize("name", list(NAMES), ids=["japanese", "accent", "quotes", "controls"])
async def test_a_download_in_any_script_gets_its_name_and_a_header_that_holds(settings, name):
    """A saved result's name can be in any script: "遅延.csv" in `filename="…"` (headers are latin-1)
    made the `/files/` route fail with a 500. Now an ASCII `filename` and the UTF-8 `filename*`
    (RFC 6266); a quote, a backslash or a line break in a name cannot end the header or its string."""
    configured = settings.model_copy(update={"link_secret": SecretStr("k" * 32)})

    async def read(session_id: str, path: str) -> bytes:
        assert (session_id, path) == ("te-abc", f"exports/{name}")
        return b"carrier\nF9\n"

    links = FileLinks(configured, read=read, kept_secret=_no_secret)
    url = urllib.parse.urlsplit((await links.signer()).sign("te-abc", f"exports/{name}"))
    app = Starlette(routes=links.routes())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        got = await client.get(f"{url.path}?{url.query}")
    assert got.status_code == 200 and got.content == b"carrier\nF9\n"
    [header] = got.headers.get_list("content-disposition")
    fallback, encoded = NAMES[name]
    assert header == f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
    assert "set-cookie" not in got.headers
    assert urllib.parse.unquote(encoded) == name.replace("\r", "").replace("\t", "")


async def _never_read(session_id: str, path: str) -> bytes:
    raise AssertionError("the bytes were given: nothing to read")


async def _no_secret(name: str) -> bytes:
    raise AssertionError("S3 presigns: no link secret is needed")


def test_a_line_break_in_a_name_never_reaches_the_header():
    """The route's pattern takes no line feed, but a name from elsewhere could hold one."""
    from bot.files import attachment

    header = attachment("a\r\nSet-Cookie: x=y.csv")
    assert "\r" not in header and "\n" not in header and header.isascii()


def test_a_direction_override_in_a_name_is_not_offered():
    """Model code may write a file named `invoice\u202egpj.exe`, shown as "invoiceexe.jpg"; the download
    name drops direction controls (an emoji's joiner stays)."""
    from bot.files import attachment

    header = attachment("invoice\u202egpj.exe")
    assert header.endswith("filename*=UTF-8''invoicegpj.exe")
    family = "👨\u200d👩\u200d👧.csv"
    assert attachment(family).endswith(urllib.parse.quote(family, safe=""))
