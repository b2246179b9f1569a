"""Files shared with a question in Teams, through the real app: real-shaped activities POSTed to
`/api/messages`, the turn run by the runner after the ack, files fetched from a loopback host standing
where OneDrive would. What the core is handed is the turn's `IncomingMessage`, with the files the core
fetched through the surface (tests/bot/handed.py)."""

from __future__ import annotations

import io
import json
import re

import pytest

from bot.teams_shared_files import IMAGE, LINK_HERE, LINK_THERE
from core.events import IncomingMessage, SharedFile
from core.shared_files import MAX_FILES, over_total, refusal_before_fetch
from tests.bot.handed import spy_on_handle
from tests.bot.teams_harness import CHAT, THREAD, activity, file_info, post, serve_teams
from tests.fakes.anthropic_api import text
from tests.fakes.file_host import FileHost, Served

CSV = b"region,sales\nnorth,10\nsouth,20\n"
HTML = {"contentType": "text/html", "content": "<p>what's in this file?</p>"}


@pytest.fixture
def host():
    fake = FileHost().start()
    yield fake
    fake.stop()


@pytest.fixture
def handed(teams, monkeypatch) -> list[IncomingMessage]:
    """The messages the Teams surface hands the core (the real core still answers them)."""
    return spy_on(teams, monkeypatch)


def spy_on(teams, monkeypatch) -> list[IncomingMessage]:
    seen: list[IncomingMessage] = []
    analyst = teams.state.analyst
    monkeypatch.setattr(analyst, "handle", spy_on_handle(analyst, seen))
    return seen


async def test_a_file_attached_in_personal_chat_reaches_the_core_with_its_bytes(
    teams, handed, host, fake_model
):
    """The question's message carries the CSV's bytes, fetched after the ack with nothing but its
    pre-authenticated link; the html copy of the message is no file."""
    url = host.serve("/dl/sales.csv", Served(CSV, content_type="text/csv")) + "?tempauth=t0k3n"
    fake_model.enqueue(text("North sold 10."))
    body = activity(teams.connector.url, "what's in this file?", conversation=CHAT)
    body["attachments"] = [HTML, file_info("sales.csv", url)]
    await post(teams, body)
    [message] = handed
    assert message.text == "what's in this file?" and message.files == (SharedFile("sales.csv", CSV),)
    [seen] = host.seen
    assert seen.path.endswith("?tempauth=t0k3n") and "authorization" not in seen.headers


async def test_a_message_with_only_a_file_is_still_a_question(teams, handed, host):
    url = host.serve("/dl/sales.csv", CSV)
    body = activity(teams.connector.url, conversation=CHAT)  # no text at all
    body["attachments"] = [file_info("sales.csv", url)]
    await post(teams, body)
    [message] = handed
    assert message.text == "" and message.files == (SharedFile("sales.csv", CSV),)


async def test_a_file_linked_in_a_channel_is_refused_with_where_it_works(teams, handed, fake_model):
    """In a channel Teams gives the bot only the message's html; a SharePoint link to a file of a kind
    the bot reads becomes one sentence saying to share it in personal chat. A link to a page, or a
    plain formatted message, makes none."""
    linked = (
        "<p><at>datathread</at> sum it up "
        '<a href="https://contoso.sharepoint.com/sites/sales/Shared%20Documents/General/sales.csv">'
        "sales.csv</a> and see "
        '<a href="https://contoso.sharepoint.com/sites/sales/SitePages/Home.aspx">our wiki</a></p>'
    )
    fake_model.enqueue(text("I can't see it."), text("Sixteen."))
    body = activity(teams.connector.url, "sum it up sales.csv", conversation=THREAD)
    body["attachments"] = [{"contentType": "text/html", "content": linked}]
    await post(teams, body)
    plain = activity(teams.connector.url, "how many carriers?", conversation=THREAD)
    plain["attachments"] = [{"contentType": "text/html", "content": "<p><b>how many</b> carriers?</p>"}]
    await post(teams, plain)
    assert [m.files for m in handed] == [
        (SharedFile("sales.csv", refusal=LINK_THERE.format(where="channel")),),
        (),
    ]
    assert "personal chat" in handed[0].files[0].refusal


async def test_a_linked_file_in_a_group_chat_and_in_personal_chat_say_what_works_there(teams, handed):
    link = '<a href="https://contoso-my.sharepoint.com/:x:/g/personal/ada/EYpp?e=1">q3.xlsx</a>'
    group = activity(teams.connector.url, "q3?", conversation="19:meeting_abc@thread.v2")
    chat = activity(teams.connector.url, "q3?", conversation=CHAT)
    for body in (group, chat):
        body["attachments"] = [{"contentType": "text/html", "content": f"<p>q3? {link}</p>"}]
        await post(teams, body)
    assert [m.files for m in handed] == [
        (SharedFile("q3.xlsx", refusal=LINK_THERE.format(where="group chat")),),
        (SharedFile("q3.xlsx", refusal=LINK_HERE),),
    ]


async def test_images_and_kinds_it_cannot_read_are_refused_without_a_download(teams, handed, host):
    """A pasted image is refused by kind (the model answered screenshots it never saw); a PDF by the
    rule every surface shares, before a byte is fetched; the CSVs fetched, ten files in all."""
    urls = [host.serve(f"/dl/part{i}.csv", f"n\n{i}\n".encode()) for i in range(MAX_FILES - 2)]
    body = activity(teams.connector.url, "compare these", conversation=CHAT)
    body["attachments"] = [
        HTML,
        {"contentType": "image/*", "contentUrl": "https://smba.trafficmanager.net/amer/v3/attachments/1"},
        file_info("report.pdf", host.serve("/dl/report.pdf", b"%PDF-1.7")),
        *(file_info(f"part{i}.csv", url) for i, url in enumerate(urls)),
    ]
    await post(teams, body)
    [message] = handed
    files = {f.name: f for f in message.files}
    assert len(message.files) == MAX_FILES
    assert files["pasted image"] == SharedFile("pasted image", refusal=IMAGE)
    assert files["report.pdf"] == refusal_before_fetch("report.pdf", None, limit_mb=100)
    assert [files[f"part{i}.csv"].data for i in range(MAX_FILES - 2)] == [
        f"n\n{i}\n".encode() for i in range(MAX_FILES - 2)
    ]
    assert sorted(s.path for s in host.seen) == sorted(f"/dl/part{i}.csv" for i in range(MAX_FILES - 2))


async def test_past_ten_files_the_rest_are_one_sentence(teams, handed, host, fake_model):
    """300 files and 300 pasted images: ten files are fetched and one sentence says the rest were not
    read (it was 310 refusals, each a note below the answer)."""
    urls = [host.serve(f"/dl/part{i}.csv", f"n\n{i}\n".encode()) for i in range(MAX_FILES)]
    image = {
        "contentType": "image/png",
        "contentUrl": "https://smba.trafficmanager.net/amer/v3/attachments/1",
    }
    fake_model.enqueue(text("Ten parts."))
    body = activity(teams.connector.url, "compare these", conversation=CHAT)
    body["attachments"] = [
        *(file_info(f"part{i}.csv", urls[i] if i < MAX_FILES else f"{host.url}/dl/no") for i in range(300)),
        *([image] * 300),
    ]
    await post(teams, body)
    [message] = handed
    *fetched, rest = message.files
    assert [f.data for f in fetched] == [f"n\n{i}\n".encode() for i in range(MAX_FILES)]
    assert rest == SharedFile(
        f"part{MAX_FILES}.csv",
        refusal=f"I read at most {MAX_FILES} files shared with one question; nor did I read the 589 after it.",
    )
    assert len(host.seen) == MAX_FILES
    answer = teams.connector.sent()[-1]["text"]
    assert answer.startswith("Ten parts.") and answer.count("I didn't read") == 1, answer


async def test_a_pasted_screenshot_alone_is_told_why_and_starts_no_turn(teams, handed, fake_model):
    """No words, only an image (a screenshot pasted into the chat): one sentence, as on Slack, and no
    turn: it started a paid model turn asked to "look at the files"."""
    body = activity(teams.connector.url, conversation=CHAT)
    body["attachments"] = [
        {"contentType": "image/*", "contentUrl": "https://smba.trafficmanager.net/amer/v3/attachments/1"},
        {"contentType": "text/html", "content": '<div><img src="https://example.invalid/1"></div>'},
    ]
    before = len(teams.connector.sent())
    await post(teams, body)
    [said] = teams.connector.sent()[before:]
    assert said["text"] == f"I can't read the files you shared. `pasted image`: {IMAGE}"
    assert handed == [] and fake_model.requests == []


async def test_an_expired_link_is_a_sentence_and_the_question_goes_on(teams, handed, host, fake_model):
    url = host.serve("/dl/old.csv", Served(b"", status=403))
    fake_model.enqueue(text("Without the file I can't say."))
    body = activity(teams.connector.url, "total?", conversation=CHAT)
    body["attachments"] = [file_info("old.csv", url)]
    await post(teams, body)
    [message] = handed
    assert message.files == (
        SharedFile(
            "old.csv", refusal="Teams' link to it no longer works (HTTP 403); please attach the file again."
        ),
    )


async def test_nothing_is_downloaded_for_someone_the_core_refuses(settings, host, monkeypatch):
    """A person outside the allowlists gets the core's refusal, and no download is made for them."""
    async with serve_teams(settings.model_copy(update={"allowed_users": "aad-somebody-else"})) as teams:
        handed = spy_on(teams, monkeypatch)
        body = activity(teams.connector.url, "sum it", conversation=CHAT)
        body["attachments"] = [file_info("sales.csv", host.serve("/dl/sales.csv", CSV))]
        await post(teams, body)
        assert [m.files for m in handed] == [()] and not host.seen
        assert "not" in teams.connector.sent()[-1]["text"].lower()


async def test_a_file_only_question_hears_when_its_worker_died(settings, host):
    """A question made of a file alone was not told its answer stopped: the lost handler looked for
    text only."""
    from bot.server import create_app
    from bot.teams_jobs import STOPPED
    from core.runner import TurnJob
    from core.runner_worker import Worker, lost_job
    from tests.fakes.bot_connector import FakeConnector

    connector = FakeConnector().start()
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            body = activity(connector.url, conversation=CHAT)
            body["attachments"] = [file_info("sales.csv", host.serve("/dl/sales.csv", CSV))]
            lost = lost_job(TurnJob(kind="teams.turn", payload={"activity": body}))
            await Worker(app.state.datathread.runner, io.BytesIO(), slots=1).run(lost)
            [said] = connector.sent()
            assert re.fullmatch(re.escape(STOPPED) + r" \(error id `[0-9a-f]{8}`\)", said["text"])
    finally:
        connector.stop()
    assert not host.seen  # the lost handler fetches nothing


async def test_files_past_the_messages_total_are_cut_off_and_the_chat_says_why(
    settings, host, fake_model, monkeypatch
):
    """DATATHREAD_SHARED_FILES_MB=1 and two 600 KB files: Teams states no size up front, so the two
    downloads share the total as they go; one comes whole, the other stops with the sentence, which
    the answer carries."""
    limits = {"shared_file_mb": 1, "shared_files_mb": 1}
    column = b"n\n" + b"1\n" * 300_000
    async with serve_teams(settings.model_copy(update=limits)) as teams:
        handed = spy_on(teams, monkeypatch)
        fake_model.enqueue(text("One file has 300,000 rows."))
        body = activity(teams.connector.url, "how many rows?", conversation=CHAT)
        urls = [host.serve(f"/dl/{n}.csv", Served(column, content_type="text/csv")) for n in ("a", "b")]
        body["attachments"] = [file_info("a.csv", urls[0]), file_info("b.csv", urls[1])]
        await post(teams, body)
        [message] = handed
        [whole] = [f for f in message.files if f.data is not None]
        [cut] = [f for f in message.files if f.data is None]
        assert whole.data == column and cut == over_total(cut.name, 1)
        answer = teams.connector.sent()[-1]["text"]
        assert answer.endswith(f"_I didn't read `{cut.name}`: {cut.refusal}_"), answer


# --- end to end, with the core's intake (core/file_intake.py) -------------------------------------------


async def test_a_csv_shared_in_personal_chat_is_described_to_the_model(teams, host, fake_model, settings):
    """The file's bytes land in the thread's workspace and the model's first request describes them
    (read inside the sandbox), so the answer can use the data; the answer reaches the chat."""
    url = host.serve("/dl/sales.csv", Served(CSV, content_type="text/csv")) + "?tempauth=t0k3n"
    fake_model.enqueue(text("South sold the most (20)."))
    body = activity(teams.connector.url, "who sold the most?", conversation=CHAT)
    body["attachments"] = [HTML, file_info("sales.csv", url)]
    before = len(teams.connector.sent())
    await post(teams, body)
    question = json.dumps(fake_model.requests[0]["messages"][-1], ensure_ascii=False)
    assert "who sold the most?" in question and "Files shared with this question" in question
    assert "'sales.csv'" in question and "Rows: 2" in question and '\\"region\\" VARCHAR' in question
    assert (next(settings.workspaces_dir.iterdir()) / "sales.csv").read_bytes() == CSV
    answer = teams.connector.sent()[before:][-1]["text"]
    assert answer.startswith("South sold the most (20).") and "didn't read" not in answer


async def test_a_file_linked_in_a_channel_is_said_in_the_thread(teams, fake_model):
    """The channel's refusal reaches the person, below the answer, in the thread it was asked in."""
    linked = (
        "<p><at>datathread</at> sum it up "
        '<a href="https://contoso.sharepoint.com/sites/sales/Shared%20Documents/sales.csv">sales.csv</a></p>'
    )
    fake_model.enqueue(text("I don't have that file."))
    body = activity(teams.connector.url, "sum it up sales.csv", conversation=THREAD)
    body["attachments"] = [{"contentType": "text/html", "content": linked}]
    before = len(teams.connector.sent())
    await post(teams, body)
    last = teams.connector.sent()[before:][-1]
    assert last["conversation"]["id"] == THREAD
    refusal = LINK_THERE.format(where="channel")
    assert last["text"] == f"I don't have that file.\n\n_I didn't read `sales.csv`: {refusal}_"
    assert "Files shared with this question" in json.dumps(fake_model.requests[0]["messages"][-1])


async def test_a_file_alone_is_answered_as_a_question(teams, host, fake_model):
    """No words, only a CSV: the model is asked to look at it (not "You didn't ask anything")."""
    from core.file_intake import FILES_ONLY

    fake_model.enqueue(text("It holds sales by region."))
    body = activity(teams.connector.url, conversation=CHAT)
    body["attachments"] = [file_info("sales.csv", host.serve("/dl/sales.csv", CSV))]
    before = len(teams.connector.sent())
    await post(teams, body)
    question = json.dumps(fake_model.requests[0]["messages"][-1], ensure_ascii=False)
    assert FILES_ONLY in question and "'sales.csv'" in question
    assert teams.connector.sent()[before:][-1]["text"] == "It holds sales by region."


PASTED = {"contentType": "image/*", "contentUrl": "https://smba.trafficmanager.net/amer/v3/attachments/1"}


async def test_someone_the_rules_refuse_hears_only_that_for_a_screenshot_alone(settings, monkeypatch):
    """A person outside the allowlists pastes a screenshot without words: the access refusal alone
    (they were told why the screenshot was not read, before any check)."""
    async with serve_teams(settings.model_copy(update={"allowed_users": "aad-somebody-else"})) as teams:
        body = activity(teams.connector.url, conversation=CHAT)
        body["attachments"] = [PASTED]
        await post(teams, body)
        said = " ".join(m.get("text") or "" for m in teams.connector.sent())
        assert "You're not on the list of people who can use datathread" in said
        assert "I can't read" not in said and "pasted image" not in said


async def test_help_with_only_a_screenshot_is_the_help_and_says_why_it_was_not_read(
    teams, handed, fake_model
):
    """`help` and a pasted image: the local help, no model call (any file made it a question about
    the files), and the image's sentence with it."""
    body = activity(teams.connector.url, "help", conversation=CHAT)
    body["attachments"] = [PASTED]
    await post(teams, body)
    assert fake_model.requests == []
    answer = teams.connector.sent()[-1]["text"]
    assert "@-mention me" in answer  # the help's Teams tip
    assert f"I didn't read `pasted image`: {IMAGE}" in answer, answer
    [message] = handed
    assert message.text == "help" and message.files == (SharedFile("pasted image", refusal=IMAGE),)
