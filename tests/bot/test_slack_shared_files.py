"""Fetching the files people share in Slack (`bot/slack_shared_files.py`) against the fake Slack Web API
on loopback, through the real slack_sdk client and its aiohttp session: the bytes with the bot token,
the size cap while the bytes stream, the token only to Slack's file host (redirects checked too), and
each of Slack's quirks as one sentence for the person — never an exception, never a long wait."""

from __future__ import annotations

import asyncio
import logging
import time
import tracemalloc

import pytest
from pydantic import SecretStr

from bot import slack_shared_files as shared
from bot.slack_client import bounded_session, build_client
from bot.slack_status import ThreadStatus
from bot.slack_target import SlackTarget
from core.config import load_settings
from core.shared_files import MAX_FILES, over_total
from tests.fakes.slack_api import TEAM_ID, FakeSlackAPI

TOKEN = "xoxb-files-token-000001"
CSV = b"region,amount\nnorth,10\nsouth,32\n"
KB = 1024
THREAD = SlackTarget(channel="C0001", thread_ts="900.1", team_id=TEAM_ID, user_id="U0001")


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


async def fetch(client, *files: dict, limit_mb: int = 100, total_mb: int | None = None, target=None):
    """The files fetched; with `target`, its thread's status (bot/slack_status.py) says so meanwhile."""
    refs = shared.file_refs(list(files))
    status = ThreadStatus(client, target) if target is not None else None
    return await shared.fetch_shared_files(
        client, refs, limit_mb=limit_mb, total_mb=total_mb or 10 * limit_mb, status=status
    )


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


async def test_files_past_the_messages_total_are_refused_before_any_is_fetched(api, client):
    """DATATHREAD_SHARED_FILES_MB: Slack states each file's size, so which files fit is decided in the
    order they were shared before a byte comes. One that would pass the total is never fetched; a
    smaller one after it still fits."""
    sizes = {"a.csv": 600 * KB, "b.csv": 600 * KB, "c.csv": 300 * KB}
    files = [api.share(name, b"x" * size) for name, size in sizes.items()]
    got = await fetch(client, *files, limit_mb=1, total_mb=1)
    assert [len(g.data or b"") for g in got] == [600 * KB, 0, 300 * KB]
    assert got[1] == over_total("b.csv", 1)
    assert sorted(d.method.rsplit("/", 1)[-1] for d in api.downloads) == ["a.csv", "c.csv"]


@pytest.mark.parametrize("length_said", [True, False], ids=["content-length", "streamed"])
async def test_files_without_a_stated_size_share_the_total_as_their_bytes_arrive(api, client, length_said):
    """The backstop: sizes Slack did not state are claimed by the length the file server declares, or
    by the bytes as they come. Of two files fetched at once that together pass the total, exactly one
    comes whole and the other is cut off with the sentence."""
    files = [api.share(f"part{i}.csv", b"y" * (700 * KB)) for i in range(2)]
    for file in files:
        file.pop("size")  # the object the fake keeps too
        if not length_said:
            api.unsized_files.add(file["id"])
    got = await fetch(client, *files, limit_mb=1, total_mb=1)
    [whole] = [g for g in got if g.data is not None]
    [cut] = [g for g in got if g.data is None]
    assert whole.data == b"y" * (700 * KB) and cut == over_total(cut.name, 1)


async def test_a_large_file_is_held_once_while_it_comes_not_twice(api, client):
    """The chunks are not joined into a copy at the end: fetching 16 MB peaks near 16 MB, not 32."""
    body = b"z" * (16 * 2**20)
    file = api.share("big.csv", body)
    tracemalloc.start()
    try:
        [got] = await fetch(client, file, limit_mb=32)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.data == body and peak < 1.4 * len(body), peak / 2**20


async def test_the_thread_says_which_file_is_being_fetched_while_it_comes(api, client, monkeypatch):
    """A big file on a slow link was minutes of nothing in the thread: its status names the file while
    it downloads (the turn's "is thinking…" replaces it), and not a file that is not fetched."""
    monkeypatch.setattr(shared, "FETCH_TIMEOUT_S", 3.0)
    slow, picture = api.share("sales.csv", CSV), api.share("chart.png", b"\x89PNG", mimetype="image/png")
    api.stalled_files.add(slow["id"])
    fetching = asyncio.create_task(fetch(client, slow, picture, target=THREAD))
    started = time.monotonic()
    while not api.of("assistant.threads.setStatus") and time.monotonic() - started < 2.5:
        await asyncio.sleep(0.02)
    assert not fetching.done()  # said while the file is still coming
    [status] = api.of("assistant.threads.setStatus")
    assert status.args == {"channel_id": "C0001", "thread_ts": "900.1", "status": "is fetching sales.csv…"}
    assert [g.refusal for g in await fetching][0] == "Slack did not send it within 3 s."


@pytest.mark.parametrize("replied", [False, True])
async def test_once_the_files_are_in_the_status_is_the_turns_own_or_none_after_its_reply(
    api, client, replied
):
    """Before the turn's reply, the fetch's status gives way to the turn's "is thinking…"; after it,
    to none (a status set after the reply stays under the answer: nothing else the turn sends clears
    it). The turn's end clears whatever no reply did, and asks nothing when nothing is left."""
    status = ThreadStatus(client, THREAD)
    await status.own("is thinking…")
    if replied:
        status.answered()  # the stream started (Slack clears the status then)
    refs = shared.file_refs([api.share("sales.csv", CSV)])
    [got] = await shared.fetch_shared_files(client, refs, limit_mb=1, total_mb=1, status=status)
    then = "" if replied else "is thinking…"
    assert got.data == CSV and api.status_of("C0001", "900.1") == then
    await status.settle()
    said = [c.args["status"] for c in api.of("assistant.threads.setStatus")]
    assert said == ["is thinking…", "is fetching sales.csv…", then, *([] if replied else [""])]
    assert api.status_of("C0001", "900.1") == ""


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["a.csv", "b  \n c.csv"], "is fetching a.csv and b c.csv…"),
        (["a.csv", "b.csv", "c.csv"], "is fetching 3 files…"),
        (["n" * 100 + ".csv"], f"is fetching {'n' * 60}…"),
    ],
)
async def test_the_fetching_status_names_two_files_at_most(api, client, names, said):
    files = [api.share(name, CSV) for name in names]
    assert all(g.data == CSV for g in await fetch(client, *files, target=THREAD))
    assert [c.args["status"] for c in api.of("assistant.threads.setStatus")] == [said]


async def test_a_status_slack_refuses_or_no_thread_to_show_it_in_changes_nothing(api, client):
    api.fail_methods["assistant.threads.setStatus"] = "not_allowed_token_type"
    [got] = await fetch(client, api.share("sales.csv", CSV), target=THREAD)
    assert got.data == CSV
    no_thread = SlackTarget(channel="C0001", thread_ts="", team_id=TEAM_ID, user_id="U0001", private=True)
    [got] = await fetch(client, api.share("sales.csv", CSV), target=no_thread)
    assert got.data == CSV and len(api.of("assistant.threads.setStatus")) == 1


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
    # A Slack Connect file not looked up has no name yet (it was "a file without an extension"): maybe readable
    assert not shared.none_readable(shared.file_refs([{"id": "F1", "file_access": "check_file_info"}]))


async def test_slack_connect_files_are_named_before_a_message_of_files_alone_is_judged(api, client):
    """files.info names each check_file_info file; one Slack won't describe stays as it was (its fetch
    asks again and says why), and the others are not asked about."""
    partner, ours = api.share("partner.csv", CSV), api.share("ours.png", b"\x89PNG", mimetype="image/png")
    refs = shared.file_refs(
        [
            {"id": partner["id"], "file_access": "check_file_info"},
            ours,
            {"id": "F9999", "file_access": "check_file_info"},
        ]
    )
    named, same, gone = await shared.looked_up(client, refs)
    assert (named["name"], "file_access" in named) == ("partner.csv", False) and same == refs[1]
    assert gone == refs[2] and not shared.none_readable([gone])
    assert sorted(c.args["file"] for c in api.of("files.info")) == sorted([partner["id"], "F9999"])
    [got] = await shared.fetch_shared_files(client, [named], limit_mb=1, total_mb=1)
    assert got.data == CSV and len(api.of("files.info")) == 2  # looked up once, not again


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
