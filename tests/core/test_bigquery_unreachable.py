"""BigQuery out of reach (DNS failing, a firewall, a closed port): google's client retries a connection
error for 600 s by default, so one step held its turn — and Ctrl-C — for ten minutes whatever the step
time limit said. Here the key's token endpoint and the API are a loopback port nothing listens on: the
real client, the real credentials flow, a real refused connection."""

from __future__ import annotations

import asyncio
import time

import pytest

from core import bigquery_metadata, warehouse_bigquery
from core.config import load_settings
from core.policy import TableAllowlist
from core.sandbox_local import LocalSandbox
from core.warehouse_bigquery import BigQueryWarehouse
from tests.fakes.bigquery_api import qctx, service_account_key
from tests.fakes.redis_server import free_port


@pytest.fixture
async def warehouse(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    settings = load_settings(
        _env_file=None,
        warehouse="bigquery",
        gcp_project="bill",
        google_application_credentials=service_account_key(tmp_path / "key.json", f"{closed}/token"),
        bigquery_api_url=closed,
        home=tmp_path / "home",
    )
    built = BigQueryWarehouse.from_settings(settings, LocalSandbox(workspaces=settings.workspaces_dir))
    yield built
    await built.close()


async def test_a_query_fails_within_its_step_time_limit_in_one_sentence(warehouse):
    started = time.monotonic()
    result = await asyncio.wait_for(warehouse.query("SELECT 1", None, qctx(None, timeout_s=2.0)), 60)
    took = time.monotonic() - started
    assert not result.ok
    assert result.error == "Could not reach BigQuery within 2 s: Connection refused. Try again shortly."
    assert took < 6, f"{took:.1f} s"


async def test_a_query_given_up_at_the_dry_runs_bound_says_that_bound(warehouse, monkeypatch):
    """The dry run gives up at its own bound (DRY_RUN_S, 20 s), which is shorter than the step's limit
    (120 s by default): the sentence said "within 120 s" of a call given up at 20 s."""
    monkeypatch.setattr(warehouse_bigquery, "DRY_RUN_S", 1.5)
    started = time.monotonic()
    result = await asyncio.wait_for(warehouse.query("SELECT 1", None, qctx(None, timeout_s=30.0)), 60)
    assert result.error == "Could not reach BigQuery within 1.5 s: Connection refused. Try again shortly."
    assert time.monotonic() - started < 6


async def test_listing_tables_fails_within_its_bound_in_one_sentence(warehouse, monkeypatch):
    monkeypatch.setattr(bigquery_metadata, "CALL_S", 1.5)  # 20 s in production
    started = time.monotonic()
    with pytest.raises(LookupError, match=r"^Could not reach BigQuery within .*: Connection refused\."):
        await asyncio.wait_for(warehouse.list_tables(TableAllowlist()), 60)
    assert time.monotonic() - started < 6


class _Odd:
    """A token endpoint that works, and a BigQuery API that answers a web page or drips its answer."""

    def __init__(self, kind: str):
        import http.server
        import json
        import threading

        self.done = (
            threading.Event()
        )  # the test is over: the drip stops, and the bot's reading thread with it
        done = self.done

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/token"):
                    body = json.dumps(
                        {"access_token": "t", "expires_in": 3600, "token_type": "Bearer"}
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                page = b"<html><body>Corporate proxy login</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if kind == "page" else "application/json")
                self.send_header("Content-Length", str(len(page) if kind == "page" else 100_000))
                self.end_headers()
                try:
                    if kind == "page":
                        self.wfile.write(page)
                        return
                    for _ in range(600):  # a byte every 0.1 s: no per-read timeout ever fires
                        if done.is_set():
                            return
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
async def odd_warehouse(tmp_path, request):
    odd = _Odd(request.param)
    settings = load_settings(
        _env_file=None,
        warehouse="bigquery",
        gcp_project="bill",
        google_application_credentials=service_account_key(tmp_path / "key.json", f"{odd.url}/token"),
        bigquery_api_url=odd.url,
        home=tmp_path / "home",
    )
    built = BigQueryWarehouse.from_settings(settings, LocalSandbox(workspaces=settings.workspaces_dir))
    yield built
    await built.close()
    odd.done.set()
    odd.server.shutdown()


@pytest.mark.parametrize("odd_warehouse", ["drip"], indirect=True)
async def test_an_api_that_drips_its_answer_is_given_up_at_the_steps_limit(odd_warehouse, monkeypatch):
    """A byte every 0.1 s never trips google's per-read timeout: list_tables ran past 300 s."""
    from core import warehouse_bigquery

    monkeypatch.setattr(warehouse_bigquery, "ANSWER_GRACE_S", 0.5)
    monkeypatch.setattr(warehouse_bigquery, "LISTING_S", 1.5)  # a whole listing: 120 s in production
    started = time.monotonic()
    result = await asyncio.wait_for(odd_warehouse.query("SELECT 1", None, qctx(None, timeout_s=1.0)), 60)
    assert not result.ok and result.error == "BigQuery did not answer within 1.5 s. Try again shortly."
    with pytest.raises(LookupError, match=r"^BigQuery did not answer within 1\.5 s\."):
        await asyncio.wait_for(odd_warehouse.list_tables(TableAllowlist()), 60)
    assert time.monotonic() - started < 8


@pytest.mark.parametrize("odd_warehouse", ["page"], indirect=True)
async def test_a_web_page_at_the_apis_address_is_said_to_be_one(odd_warehouse):
    """It was "Could not reach BigQuery: Expecting value: line 1 column 1 (char 0)"."""
    result = await asyncio.wait_for(odd_warehouse.query("SELECT 1", None, qctx(None, timeout_s=5.0)), 60)
    assert not result.ok and result.error.startswith("BigQuery's address answered with something that is not")
    assert "DATATHREAD_BIGQUERY_API_URL" in result.error


def test_a_read_timeout_is_said_in_words_not_in_urllib3s():
    """Doctor and tool errors read "HTTPConnectionPool(host='127.0.0.1', port=7001): Read timed out.
    (read timeout=2.5)"."""
    from core.bigquery_errors import describe_error

    exc = OSError("HTTPConnectionPool(host='127.0.0.1', port=7001): Read timed out. (read timeout=2.5)")
    assert describe_error(exc) == "Could not reach BigQuery: it did not answer in time. Try again shortly."
