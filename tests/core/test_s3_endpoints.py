"""S3 endpoints that misbehave, over real HTTP on loopback (the real boto3 client, no moto): one that
never answers, one that drips its answer, one that answers with a web page. Each ends in one sentence
within the deadline, and leaves no thread the process would wait for at exit."""

from __future__ import annotations

import http.server
import re
import threading
import time
from types import SimpleNamespace

import pytest

import core.s3_client
from core.s3 import S3Refusal, S3Source, parse_roots
from core.tools_s3 import ListFilesInput, list_files
from tests.fakes.black_hole import BlackHole
from tests.fakes.redis_server import free_port
from tests.fakes.web_page import WebPage


class _Drip(http.server.BaseHTTPRequestHandler):
    """Headers at once, then one byte of the body every 0.2 s, for ever."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def serving():
    servers = []

    def start(handler) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def source(settings, monkeypatch, endpoint: str, *, step_timeout: float = 2) -> S3Source:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-a-sentence")
    configured = settings.model_copy(
        update={
            "s3_buckets": "data-lake/sales",
            "s3_endpoint_url": endpoint,
            "aws_region": "us-east-1",
            "step_timeout": step_timeout,
        }
    )
    return S3Source.from_settings(configured)


async def test_an_endpoint_that_never_answers_is_a_sentence_within_the_deadline(settings, monkeypatch):
    """It held `list_files` for 180 s (boto's 60 s read timeout, three tries) and the process after Ctrl-C."""
    hole = BlackHole().start()
    try:
        started = time.monotonic()
        with pytest.raises(
            S3Refusal, match=r"^S3 \(bucket data-lake at http://127.0.0.1:\d+\) did not answer within 2 s\.$"
        ):
            await source(settings, monkeypatch, hole.url).list()
        assert time.monotonic() - started < 4
    finally:
        hole.stop()
    assert not [t for t in threading.enumerate() if t.name == "datathread-s3" and not t.daemon]


async def test_the_endpoint_is_named_when_making_the_client_took_the_whole_deadline(settings, monkeypatch):
    """On a loaded machine making boto's client took the 2 s itself, and the sentence lost the endpoint
    ("S3 (bucket data-lake) did not answer"): it named the client's, and there was no client yet."""
    hole = BlackHole().start()
    try:
        s3 = source(settings, monkeypatch, hole.url)
        s3.deadline_s = 0.5
        make = s3._client_factory
        s3._client_factory = lambda: (time.sleep(1.0), make())[1]
        with pytest.raises(
            S3Refusal, match=rf"^S3 \(bucket data-lake at {hole.url}\) did not answer within 0.5 s\.$"
        ):
            await s3.list()
    finally:
        hole.stop()


async def test_an_endpoint_that_never_answers_is_tried_twice_in_all(settings, monkeypatch):
    """ "Two tries in all", said the comment; botocore's `max_attempts` counts retries, so the client made
    three tries of 20 s: 61 s a call. Here each try waits 0.3 s, within a 20 s step."""
    monkeypatch.setattr("core.s3_client.READ_TIMEOUT_S", 0.3)
    hole = BlackHole().start()
    try:
        s3 = source(settings, monkeypatch, hole.url, step_timeout=20)
        started = time.monotonic()
        with pytest.raises(S3Refusal, match=r"\): it did not answer in time\.$"):
            await s3.list()
        elapsed = time.monotonic() - started
    finally:
        hole.stop()
    assert len(hole.accepted_at) == 2, hole.accepted_at  # the first try and one retry
    assert elapsed < 3, elapsed  # two reads of 0.3 s and a backoff of at most 1 s


async def test_an_endpoint_that_drips_its_answer_is_cut_at_the_deadline(settings, monkeypatch, serving):
    """A byte every 0.2 s never trips a per-read timeout: the download ran for ever."""
    s3 = source(settings, monkeypatch, serving(_Drip))
    started = time.monotonic()
    with pytest.raises(S3Refusal, match="did not answer within 2 s"):
        await s3.list()
    assert time.monotonic() - started < 4


async def test_a_web_page_is_not_an_empty_listing_nor_the_file(settings, monkeypatch):
    """A proxy's login page (200, text/html) was listed as "0 files", loaded as the CSV itself, and
    reported by doctor as the bucket "reachable"."""
    from bot.doctor_checks import check_s3

    page = WebPage().start()
    try:
        s3 = source(settings, monkeypatch, page.url)
        for call in (s3.list(), s3.fetch("s3://data-lake/sales/a.csv")):
            with pytest.raises(S3Refusal, match="with a web page, not an S3 reply") as refused:
                await call
            assert "DATATHREAD_S3_ENDPOINT_URL" in str(refused.value) and "never-in" not in str(refused.value)
        checked = await check_s3(
            settings.model_copy(update={"s3_buckets": "data-lake", "s3_endpoint_url": page.url})
        )
        assert checked.status == "fail" and "web page" in checked.detail, checked
    finally:
        page.stop()


async def test_a_closed_port_says_why(settings, monkeypatch):
    port = free_port()  # a port nobody listens on
    with pytest.raises(
        S3Refusal, match=r"Could not read from S3 \(bucket data-lake at .*\): connection refused\.$"
    ):
        await source(settings, monkeypatch, f"http://127.0.0.1:{port}").list()


async def test_a_caller_given_up_on_leaves_no_task_behind():
    """`within`'s inner task outlived a cancelled caller, and its late failure was logged as "Task
    exception was never retrieved" with a traceback."""
    import asyncio
    import contextlib
    import gc

    from core.daemon_thread import within

    late = threading.Event()

    def slow() -> None:
        late.wait(5)
        raise ValueError("late")

    loop = asyncio.get_running_loop()
    unretrieved: list[dict] = []
    loop.set_exception_handler(lambda _, context: unretrieved.append(context))
    try:
        caller = asyncio.create_task(within(slow, 10))
        await asyncio.sleep(0.05)
        caller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await caller
        late.set()
        await asyncio.sleep(0.2)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert not unretrieved, unretrieved


_LISTING = """<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>data-lake</Name>
<Prefix>sales/</Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>
<Contents><Key>sales/q1.csv</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"e"</ETag>
<Size>12</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>"""


class _OneBucketAnswers(http.server.BaseHTTPRequestHandler):
    """data-lake is listed at once; any other bucket never gets an answer (a black hole behind it)."""

    def do_GET(self) -> None:
        if not self.path.startswith("/data-lake"):
            time.sleep(5)
            return
        body = _LISTING.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


async def test_a_listing_of_several_roots_has_one_deadline_and_names_what_did_not_answer(
    settings, monkeypatch, serving
):
    """Each root had a deadline of its own, one after the other, and the first that did not answer
    ended the listing naming only its bucket (the roots after it never tried, their files never
    shown). Now the roots are listed at once within one deadline, every silent one is named, and what
    the others hold is still listed."""
    read_timeout_s = core.s3_client.READ_TIMEOUT_S
    hole = BlackHole().start()
    try:
        s3 = source(settings, monkeypatch, hole.url, step_timeout=1)
        s3.roots = parse_roots("archive, logs/2026, data-lake/sales")
        started = time.monotonic()
        with pytest.raises(S3Refusal) as past_the_deadline:
            await s3.list()
        took = time.monotonic() - started

        monkeypatch.setattr("core.s3_client.READ_TIMEOUT_S", 0.3)  # the client's own tries time out first
        s3 = source(settings, monkeypatch, hole.url, step_timeout=20)
        s3.roots = parse_roots("archive, data-lake/sales")
        with pytest.raises(S3Refusal) as timed_out:
            await s3.list()
    finally:
        hole.stop()
    assert took < 2.5, f"a deadline per root: {took:.1f} s"  # 1 s (the step's), not 3 × 1 s
    where = r" at http://127\.0\.0\.1:\d+\) did not answer"
    everything = (
        r"S3 \(s3://archive/ and s3://logs/2026/ and s3://data-lake/sales/" + where + r" within 1 s\."
    )
    assert re.fullmatch(everything, str(past_the_deadline.value)), past_the_deadline.value
    both = r"S3 \(s3://archive/ and s3://data-lake/sales/" + where + r" in time\."
    assert re.fullmatch(both, str(timed_out.value)), timed_out.value

    # One root answers: the model gets its files, and the sentence naming the other. The client's own
    # bound as shipped again: at 0.3 s its two tries raced the 1 s deadline on a loaded host.
    monkeypatch.setattr("core.s3_client.READ_TIMEOUT_S", read_timeout_s)
    partly = source(settings, monkeypatch, serving(_OneBucketAnswers), step_timeout=1)
    partly.roots = parse_roots("archive, data-lake/sales")
    outcome = await list_files(ListFilesInput(), SimpleNamespace(s3=partly))
    assert not outcome.is_error, outcome.content
    assert re.fullmatch(
        r"- s3://data-lake/sales/q1\.csv \(12 bytes\)\nS3 \(s3://archive/" + where + r" within 1 s; the "
        r"other places hold the 1 file listed here\.",
        outcome.content,
    ), outcome.content
