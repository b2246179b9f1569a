"""Fetching the files people share in Slack (`bot/slack_shared_files.py`) against the fake Slack Web API
on loopback, through the real slack_sdk client and its aiohttp session: the bytes with the bot token,
the size cap while the bytes stream, the token only to Slack's file host (redirects checked too), and
each of Slack's quirks as one sentence for the person — never an exception, never a long wait."""

from __future__ import annotations

import logging
import time

import pytest
from pydantic import SecretStr

from bot import slack_shared_files as shared
from bot.slack_client import bounded_session, build_client
from core.config import load_settings
from core.shared_files import MAX_FILES
from tests.fakes.slack_api import FakeSlackAPI

TOKEN = "xoxb-files-token-000001"
CSV = b"region,amount\nnorth,10\nsouth,32\n"


@pytest.fixture
async def client(api, tmp_path):
    settings = load_settings(
        _env_file=None,
        home=tmp_path / "home",
        slack_bot_token=SecretStr(TOKEN),
        slack_api_url=api.url,
    )
    api.bot_token = TOKEN
    made = build_client(settings, bounded_session())
    yield made
    await made.session.close()


@pytest.fixture
def elsewhere():
    """Another server on loopback: not Slack's file host, nor the configured Web API's origin."""
    other = FakeSlackAPI().start()
    yield other
    other.stop()


async def fetch(client, *files: dict, limit_mb: int = 100):
    return await shared.fetch_shared_files(client, shared.file_refs(list(files)), limit_mb=limit_mb)


async def test_a_shared_csv_is_fetched_with_the_bot_token(api, client):
    file = api.share("sales.csv", CSV)
    [got] = await fetch(client, file)
    assert (got.name, got.data, got.refusal) == ("sales.csv", CSV, "")
    [download] = api.downloads
    assert download.token == TOKEN and download.method.endswith("/download/sales.csv")
    assert api.methods() == []  # no Web API call: the event's file object was enough


async def test_several_files_each_get_their_own_outcome_in_order(api, client):
    a, b = api.share("a.csv", b"x\n1\n"), api.share("b.parquet", b"PAR1....PAR1")
    png = api.share("chart.png", b"\x89PNG....", mimetype="image/png")
    got = await fetch(client, a, png, b)
    assert [(g.name, g.data) for g in got] == [
        ("a.csv", b"x\n1\n"),
        ("chart.png", None),
        ("b.parquet", b"PAR1....PAR1"),
    ]
    assert "A .png file is not one I can read" in got[1].refusal
    assert len(api.downloads) == 2  # the picture was never fetched


async def test_more_than_the_limit_of_files_are_refused_by_name(api, client):
    files = [api.share(f"part{i}.csv", b"n\n1\n") for i in range(MAX_FILES + 1)]
    got = await fetch(client, *files)
    assert all(g.data == b"n\n1\n" for g in got[:MAX_FILES])
    assert got[-1].data is None and f"at most {MAX_FILES} files" in got[-1].refusal
    assert len(api.downloads) == MAX_FILES


async def test_a_file_slack_says_is_too_large_is_not_fetched(api, client):
    file = api.share("big.csv", b"x" * (2 * 2**20))
    [got] = await fetch(client, file, limit_mb=1)
    assert got.data is None and "larger than the 1 MB" in got.refusal
    assert api.downloads == []


@pytest.mark.parametrize("length_said", [True, False], ids=["content-length", "streamed"])
async def test_a_file_past_the_limit_is_cut_off_while_it_streams(api, client, length_said):
    """Slack's `size` missing (or wrong): the fetch stops at the limit, by the header or as it counts,
    and does not read the rest of a 40 MB body."""
    body = b"y" * (40 * 2**20)
    file = api.share("huge.csv", body)
    file.pop("size")  # the object the fake keeps too
    if not length_said:
        api.unsized_files.add(file["id"])
    started = time.monotonic()
    [got] = await fetch(client, file, limit_mb=1)
    assert got.data is None and "larger than the 1 MB" in got.refusal
    assert time.monotonic() - started < 10
    time.sleep(0.2)  # the server notices the closed connection
    assert api.served.get(file["id"], 0) < len(body) // 2, api.served


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://files.slack.com/files-pri/T1-F1/download/a.csv", True),
        ("https://files.slack-gov.com/files-pri/T1-F1/download/a.csv", True),
        ("http://files.slack.com/files-pri/T1-F1/download/a.csv", False),  # not https
        ("https://files.slack.com:8443/files-pri/T1-F1/a.csv", False),
        ("https://files.slack.com.evil.example/a.csv", False),
        ("https://files.slack.com@evil.example/a.csv", False),
        ("https://user@files.slack.com/a.csv", False),
        ("https://docs.google.com/spreadsheets/d/1/export?format=csv", False),
        ("https://acme.slack.com/files/U1/F1/a.csv", False),
        ("http://127.0.0.1:9/api/../files-pri/T1-F1/a.csv", True),  # the configured Web API's origin
        ("http://127.0.0.1:10/files-pri/T1-F1/a.csv", False),  # the same host, another port
        ("https://127.0.0.1:9/files-pri/T1-F1/a.csv", False),  # another scheme
        ("http://127.0.0.1:notaport/a.csv", False),
        ("", False),
    ],
)
def test_where_the_token_may_go(url, allowed):
    assert shared.token_may_go_to(url, "http://127.0.0.1:9/api/") is allowed


async def test_a_link_off_slacks_file_host_is_not_fetched_with_the_token(api, client, elsewhere, caplog):
    off_slack = elsewhere.share("sales.csv", CSV)  # a file object naming another server's URL
    caplog.set_level(logging.INFO)
    [got] = await fetch(client, off_slack)
    assert got.data is None and got.refusal == shared.NOT_SLACK
    assert elsewhere.downloads == [] and api.downloads == []
    assert TOKEN not in caplog.text


async def test_a_redirect_is_followed_only_on_slacks_own_hosts(api, client, elsewhere):
    there = elsewhere.share("moved.csv", CSV)
    file = api.share("moved.csv", b"not these")
    api.file_redirects[file["id"]] = there["url_private_download"]
    [got] = await fetch(client, file)
    assert got.data is None and got.refusal == shared.SENT_ELSEWHERE
    assert elsewhere.downloads == []  # the token never went there

    home = api.share("home.csv", CSV)  # a hop on the same host: followed, with the token
    api.file_redirects[file["id"]] = home["url_private_download"]
    [got] = await fetch(client, file)
    assert got.data == CSV and [d.token for d in api.downloads[-2:]] == [TOKEN, TOKEN]

    api.file_redirects[file["id"]] = file["url_private_download"]  # a loop
    [got] = await fetch(client, file)
    assert got.refusal == shared.TOO_MANY_HOPS


async def test_slacks_sign_in_page_asks_for_the_files_read_scope(api, client):
    """A token without `files:read` gets Slack's sign-in page (HTML), or a redirect to the workspace's
    own sign-in, instead of the file: the sentence says what to do, the page is not taken for data."""
    file = api.share("sales.csv", CSV)
    api.files_read = False
    [got] = await fetch(client, file)
    assert got.data is None and "`files:read`" in got.refusal and "reinstall" in got.refusal
    api.files_read = True
    api.file_redirects[file["id"]] = "https://acme.slack.com/?redir=%2Ffiles-pri%2FT0001-F1%2Fdownload"
    [got] = await fetch(client, file)
    assert got.refusal == shared.NEEDS_FILES_READ


@pytest.mark.parametrize(
    ("marks", "said"),
    [
        ({"mode": "hidden_by_limit"}, shared.HIDDEN),
        ({"mode": "tombstone"}, shared.DELETED),
        (
            {"mode": "external", "is_external": True, "url_private": "https://docs.google.com/x"},
            shared.EXTERNAL,
        ),
        ({"is_external": True}, shared.EXTERNAL),
        ({"url_private_download": "", "url_private": ""}, shared.NO_LINK),
    ],
    ids=["hidden_by_limit", "tombstone", "external", "is_external", "no-link"],
)
async def test_slacks_marks_on_a_file_are_said(api, client, marks, said):
    file = {**api.share("sales.csv", CSV), **marks}
    [got] = await fetch(client, file)
    assert (got.name, got.data, got.refusal) == ("sales.csv", None, said)
    assert api.downloads == []


async def test_a_slack_connect_file_is_looked_up_then_fetched(api, client):
    """Shared from another organisation, the event carries `file_access: check_file_info` and the id
    alone; files.info gives the whole object (https://docs.slack.dev/apis/events-api/#file-events)."""
    full = api.share("partner.csv", CSV)
    [got] = await fetch(client, {"id": full["id"], "file_access": "check_file_info"})
    assert (got.name, got.data) == ("partner.csv", CSV)
    [info] = api.of("files.info")
    assert info.args["file"] == full["id"] and info.token == TOKEN

    [gone] = await fetch(client, {"id": "F9999", "file_access": "check_file_info"})
    assert gone.data is None and "Slack would not tell me about it (file_not_found)" in gone.refusal


@pytest.mark.parametrize("status", [404, 500])
async def test_an_http_error_is_a_sentence(api, client, status):
    file = api.share("sales.csv", CSV)
    api.file_errors[file["id"]] = status
    [got] = await fetch(client, file)
    assert got.data is None and got.refusal == f"Slack would not send it (HTTP {status})."


async def test_a_silent_file_host_is_given_up_in_time_for_every_file_at_once(api, client, monkeypatch):
    """Two files whose bytes stop coming: both refused once the bound passes — together, not one
    bound after the other."""
    monkeypatch.setattr(shared, "FETCH_TIMEOUT_S", 1.5)
    files = [api.share(f"slow{i}.csv", CSV) for i in range(2)]
    api.stalled_files.update(f["id"] for f in files)
    started = time.monotonic()
    got = await fetch(client, *files)
    took = time.monotonic() - started
    assert [g.refusal for g in got] == ["Slack did not send it within 1.5 s."] * 2
    assert 1.4 < took < 3.5, took


async def test_a_file_host_that_stops_sending_is_given_up_after_its_silence(api, client, monkeypatch):
    monkeypatch.setattr(shared, "STALL_TIMEOUT_S", 0.5)
    file = api.share("stuck.csv", CSV)
    api.stalled_files.add(file["id"])
    started = time.monotonic()
    [got] = await fetch(client, file)
    assert got.refusal == "Slack stopped sending it for 0.5 s." and time.monotonic() - started < 3


async def test_an_unreachable_file_host_is_a_sentence(api, client):
    file = api.share("sales.csv", CSV)
    port = api.server.server_address[1]
    api.stop()  # nothing listens there any more
    [got] = await fetch(client, file)
    assert got.data is None and got.refusal.startswith("I could not fetch it from Slack (")
    assert str(port) not in got.refusal


def test_unreadable_files_alone_are_told_why():
    refs = shared.file_refs([{"name": "screenshot.png"}, {"name": "notes"}])
    assert shared.none_readable(refs)
    note = shared.unreadable_note(refs, limit_mb=100)
    assert "`screenshot.png`: A .png file is not one I can read" in note
    assert "`notes`: A file without an extension" in note
    assert not shared.none_readable(shared.file_refs([{"name": "shot.png"}, {"name": "data.CSV"}]))


def test_the_payload_keeps_only_what_the_fetch_needs():
    event_file = {
        "id": "F1",
        "name": "a.csv",
        "size": 3,
        "url_private_download": "https://files.slack.com/files-pri/T-F1/download/a.csv",
        "thumb_360": "https://files.slack.com/thumb",
        "preview": "a,b,c\n" * 100,
    }
    [ref, older] = shared.file_refs([event_file, "older.csv", 7])
    assert set(ref) == {"id", "name", "size", "url_private_download"}
    assert older == {"name": "older.csv"}  # a job an older release queued carried names
    assert shared.file_refs(None) == [] and len(shared.file_refs([{"name": "x.csv"}] * 50)) == MAX_FILES + 1
