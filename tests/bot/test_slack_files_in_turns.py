"""Files shared in Slack reach the turn: signed events (a mention, a DM, a follow-up in the thread)
into `datathread serve`, the real Bolt listeners and runner, the fake Slack Web API serving the files.
The turn's `IncomingMessage` is read where the surface hands it to the core (`Analyst.handle`, which
still runs), with the files the core fetched through the surface (tests/bot/handed.py): the bytes
fetched after the ack, or the sentence why not. End to end,
the scripted model's requests show what the core made of them (`core/file_intake.py`)."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio

from bot import slack_shared_files
from core.file_intake import FILES_ONLY, HEADER
from core.runner import cancel_and_tell
from core.shared_files import over_total
from core.turn_end import STOPPED
from tests.bot.handed import spy_on_handle
from tests.bot.slack_harness import demo_home, mention, message, module_settings, serve
from tests.fakes.anthropic_api import text, tool

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN = "xoxb-test-token-000000"  # the harness's bot token
CSV = b"region,amount\nnorth,10\nsouth,32\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    """One `datathread serve` for the module, answering U0001 and U0002 only; every message handed to
    the core is kept in `harness.handled`."""
    settings = module_settings(demo_home(tmp_path_factory), model.url, allowed_users="U0001,U0002")
    async with serve(settings, slack_api) as harness:
        analyst, harness.handled = harness.state.analyst, []
        analyst.handle = spy_on_handle(analyst, harness.handled)
        yield harness


@pytest.fixture(autouse=True)
def fresh(slack, slack_api, model):
    slack_api.clear()
    slack_api.bot_token = TOKEN
    slack_api.stalled_files.clear()
    slack.handled.clear()
    with model.lock:
        model.replies.clear()


async def test_a_mention_with_a_csv_brings_its_bytes_to_the_turn(slack, model):
    """Slack sends a mention with a file twice (`app_mention`, and `message` of subtype `file_share`):
    one turn, one fetch, with the bot token."""
    api = slack.api
    file = api.share("sales.csv", CSV)
    model.enqueue(text("North sold 10, south 32."))
    said = mention("what's the total?", ts="800.1")
    await slack.event({**said, "files": [file]})
    await slack.event({**message(said["text"], ts="800.1"), "subtype": "file_share", "files": [file]})
    await slack.drain()
    [asked] = slack.handled
    assert asked.text == "what's the total?"
    assert [(f.name, f.data, f.refusal) for f in asked.files] == [("sales.csv", CSV, "")]
    assert [d.token for d in api.downloads] == [TOKEN]


async def test_a_file_without_a_link_is_refused_by_name(slack, model):
    """ "analyse this file" with a file object Slack gave no link for: the turn has the file, named,
    with the sentence why it was not read, said in the thread (the model got the words only, and nobody
    said why)."""
    model.enqueue(text("I have no file to analyse."))
    attached = {"files": [{"id": "F1", "name": "mine.csv", "mimetype": "text/csv"}]}
    await slack.event({**mention("analyse this file", ts="805.1"), **attached})
    await slack.drain()
    [asked] = slack.handled
    assert [(f.name, f.data, f.refusal) for f in asked.files] == [
        ("mine.csv", None, slack_shared_files.NO_LINK)
    ]
    assert f"I didn't read `mine.csv`: {slack_shared_files.NO_LINK}" in "".join(slack.api.shown())


async def test_the_ack_never_waits_for_a_file(slack, model, monkeypatch):
    """Slack needs its 200 within 3 s: a file host that sends nothing holds the turn (to the fetch's
    bound, then a sentence), never the ack."""
    monkeypatch.setattr(slack_shared_files, "FETCH_TIMEOUT_S", 4.0)
    api = slack.api
    file = api.share("slow.csv", CSV)
    api.stalled_files.add(file["id"])
    model.enqueue(text("I couldn't get the file."))
    started = time.monotonic()
    response = await slack.event({**mention("sum it", ts="810.1"), "files": [file]})
    assert response.status_code == 200 and time.monotonic() - started < 2
    await slack.drain()
    [asked] = slack.handled
    assert asked.files[0].data is None and asked.files[0].refusal == "Slack did not send it within 4 s."


async def test_while_a_file_downloads_the_thread_says_so_and_no_status_stays_under_the_answer(
    slack, model, monkeypatch
):
    """The turn starts thinking, and the thread's status names the file from the start of the fetch,
    which the core makes once the turn holds the thread (it used to show nothing until the fetch gave
    up). The answer's stream had replied by then (which clears a status, as Slack documents), so once
    the file is in the status is cleared, not set to "is thinking…" again: that stayed under the
    finished answer, which nothing after the stream's start clears."""
    monkeypatch.setattr(slack_shared_files, "FETCH_TIMEOUT_S", 3.0)
    api = slack.api
    file = api.share("slow.csv", CSV)
    api.stalled_files.add(file["id"])
    model.enqueue(text("I couldn't get the file."))
    started = time.monotonic()
    await slack.event({**mention("sum it", ts="815.1"), "files": [file]})
    await slack.drain()
    statuses = api.of("assistant.threads.setStatus")
    assert [(c.args["thread_ts"], c.args["status"]) for c in statuses] == [
        ("815.1", "is thinking…"),
        ("815.1", "is fetching slow.csv…"),
        ("815.1", ""),
    ]
    assert statuses[1].at - started < 1.5 and statuses[2].at - started > 2.9
    assert "I couldn't get the file." in "".join(api.shown())
    assert api.status_of("C0001", "815.1") == ""


async def test_a_turn_stopped_while_its_file_downloads_leaves_no_fetching_status(slack, model):
    """A shutdown stops the turn mid-download: the thread hears that the answer stopped, and its
    status does not go on saying "is fetching slow.csv…" (nothing cleared it)."""
    api = slack.api
    file = api.share("slow.csv", CSV)
    api.stalled_files.add(file["id"])
    asked = len(model.requests)
    await slack.event({**mention("sum it", ts="817.1"), "files": [file]})
    started = time.monotonic()
    while api.status_of("C0001", "817.1") != "is fetching slow.csv…" and time.monotonic() - started < 10:
        await asyncio.sleep(0.02)
    assert api.status_of("C0001", "817.1") == "is fetching slow.csv…"
    runner = slack.state.runner
    await cancel_and_tell(dict(runner.tasks), runner.handlers)
    await slack.drain()
    assert STOPPED in "".join(api.shown())
    assert api.status_of("C0001", "817.1") == ""
    assert len(model.requests) == asked  # stopped before the model was asked


async def test_a_file_past_the_messages_total_is_not_fetched_and_the_thread_says_why(
    slack, model, monkeypatch
):
    """DATATHREAD_SHARED_FILES_MB=1: of two 600 KB files the first is fetched and read, the second is
    not fetched at all, and the thread says why in one sentence, whatever the model wrote."""
    monkeypatch.setattr(slack.state.settings, "shared_files_mb", 1)
    api = slack.api
    column = b"n\n" + b"1\n" * 300_000
    first, second = api.share("first.csv", column), api.share("second.csv", column)
    model.enqueue(text("The first has 300,000 rows."))
    await slack.event({**mention("how many rows?", ts="820.1"), "files": [first, second]})
    await slack.drain()
    [asked] = slack.handled
    assert [(f.name, f.data is not None) for f in asked.files] == [("first.csv", True), ("second.csv", False)]
    assert [d.method.rsplit("/", 1)[-1] for d in api.downloads] == ["first.csv"]
    said = over_total("second.csv", 1).refusal
    assert f"I didn't read `second.csv`: {said}" in "".join(api.shown())


def question_of(request: dict) -> tuple[str, str]:
    """The person's words and the shared files' block of the question in a request to the model."""
    texts = [b["text"] for b in request["messages"][-1]["content"] if b["type"] == "text"]
    [block] = [t for t in texts if t.startswith(HEADER)]
    return texts[0], block


async def test_a_shared_csv_is_described_to_the_model_and_queried_and_refusals_reach_the_thread(slack, model):
    """End to end: a mention with a CSV, a slide deck and a file Slack hides. The model's first request
    describes the CSV, `run_sql` reads it by name in the same turn, and the thread says which files
    were not read and why, whatever the model wrote."""
    api = slack.api
    sales = api.share("sales.csv", CSV)
    deck = api.share("deck.pptx", b"PK\x03\x04", mimetype="application/vnd.ms-powerpoint")
    hidden = {"id": "F0OLD", "name": "old.csv", "mode": "hidden_by_limit"}
    model.enqueue(
        tool("run_sql", {"sql": "SELECT sum(amount) AS total FROM 'sales.csv'"}), text("It totals 42.")
    )
    before = len(model.requests)
    await slack.event({**mention("what's the total?", ts="860.1"), "files": [sales, deck, hidden]})
    await slack.drain()
    first, second = model.requests[before:]
    words, block = question_of(first)
    assert words == "what's the total?"
    assert "\"sales.csv\" is in the workspace as 'sales.csv'" in block
    assert 'Rows: 2\n  Columns: "region" VARCHAR, "amount" BIGINT' in block
    assert f'"old.csv" was not taken in: {slack_shared_files.HIDDEN}' in block
    [result] = model.last_tool_results(before + 1)
    assert not result.get("is_error") and "42" in result["content"], result
    shown = "".join(api.shown())
    assert "It totals 42." in shown
    assert "I didn't read `deck.pptx`: A .pptx file is not one I can read" in shown
    assert f"I didn't read `old.csv`: {slack_shared_files.HIDDEN}" in shown
    assert [d.method.rsplit("/", 1)[-1] for d in api.downloads] == ["sales.csv"]


async def test_a_csv_alone_in_a_dm_is_a_question(slack, model):
    api = slack.api
    file = api.share("q3.csv", CSV)
    model.enqueue(text("Sales by region: north and south."))
    before = len(model.requests)
    dm = message("", ts="820.1", channel="D0001", channel_type="im", subtype="file_share", files=[file])
    await slack.event(dm)
    await slack.drain()
    [asked] = slack.handled
    assert asked.text == "" and asked.is_direct  # not "help": the core asks about the file
    assert [(f.name, f.data) for f in asked.files] == [("q3.csv", CSV)]
    [request] = model.requests[before:]
    words, block = question_of(request)
    assert words == FILES_ONLY and "'q3.csv'" in block
    assert "Sales by region" in "".join(api.shown())


async def test_a_follow_up_in_the_thread_brings_its_file(slack, model):
    api = slack.api
    model.enqueue(text("UA flew the most."), text("It has 2 rows."))
    await slack.event(mention("who flew the most?", ts="830.1"))
    await slack.drain()
    file = api.share("extra.csv", CSV)
    await slack.event(
        message("and this one?", ts="830.2", thread_ts="830.1", subtype="file_share", files=[file])
    )
    await slack.drain()
    first, follow_up = slack.handled
    assert first.files == () and follow_up.thread_key == first.thread_key
    assert [(f.name, f.data) for f in follow_up.files] == [("extra.csv", CSV)]


async def test_files_it_cannot_read_alone_get_the_reason_and_no_turn(slack, model):
    """A colleague's screenshot in the bot's thread (no words): why it is not read, in its thread; no
    turn, no fetch, no model call."""
    api = slack.api
    model.enqueue(text("UA flew the most."))
    await slack.event(mention("who flew the most?", ts="840.1"))
    await slack.drain()
    asked, handled = len(model.requests), len(slack.handled)
    png = api.share("screenshot.png", b"\x89PNG....", mimetype="image/png")
    api.clear()
    await slack.event(message("", ts="840.2", thread_ts="840.1", subtype="file_share", files=[png]))
    await slack.drain()
    [said] = [c.args for c in api.calls if c.method.startswith("chat.")]
    assert said["text"].startswith("I can't read the files you shared. `screenshot.png`: A .png file is not")
    assert (said["channel"], said["thread_ts"]) == ("C0001", "840.1")
    assert len(model.requests) == asked and len(slack.handled) == handled and api.downloads == []


async def test_a_file_from_someone_the_rules_refuse_is_not_fetched(slack):
    api = slack.api
    file = api.share("theirs.csv", CSV)
    dm = message(
        "sum this", ts="850.1", channel="D0009", channel_type="im", subtype="file_share", files=[file]
    )
    await slack.event({**dm, "user": "U0009"})
    await slack.drain()
    [asked] = slack.handled
    assert asked.user_id == "U0009" and asked.files == ()
    assert api.downloads == []


async def test_a_slack_connect_file_alone_is_looked_up_before_it_is_judged(slack, model):
    """Shared from another organisation without words, the event's file has its id alone (`file_access:
    check_file_info`): the CSV was told it was "a file without an extension" and no turn ran. Now
    files.info names it first: the CSV is a question; a screenshot, by its real name, is not."""
    api = slack.api
    csv, png = api.share("partner.csv", CSV), api.share("partner.png", b"\x89PNG", mimetype="image/png")
    model.enqueue(text("Partner sales: north 10, south 32."))
    before = len(model.requests)
    stub = {"id": csv["id"], "file_access": "check_file_info"}
    dm = message("", ts="870.1", channel="D0001", channel_type="im", subtype="file_share", files=[stub])
    await slack.event(dm)
    await slack.drain()
    [asked] = slack.handled
    assert [(f.name, f.data) for f in asked.files] == [("partner.csv", CSV)]
    [request] = model.requests[before:]
    assert question_of(request)[0] == FILES_ONLY and "Partner sales" in "".join(api.shown())
    api.clear()
    stub = {"id": png["id"], "file_access": "check_file_info"}
    dm = message("", ts="870.2", channel="D0001", channel_type="im", subtype="file_share", files=[stub])
    await slack.event(dm)
    await slack.drain()
    [said] = [c.args for c in api.calls if c.method.startswith("chat.")]
    assert said["text"].startswith("I can't read the files you shared. `partner.png`: A .png file is not")
    assert len(slack.handled) == 1 and len(model.requests) == before + 1 and api.downloads == []


async def test_someone_the_rules_refuse_hears_only_that_not_about_their_files(slack, model):
    """U0009 is outside DATATHREAD_ALLOWED_USERS and DMs a screenshot and a Slack Connect file without
    words: the access refusal alone. They were told why the files were not read instead, and Slack
    was asked about the Connect file (files.info) on their behalf."""
    api = slack.api
    png = api.share("screenshot.png", b"\x89PNG....", mimetype="image/png")
    partner = api.share("partner.png", b"\x89PNG", mimetype="image/png")
    stub = {"id": partner["id"], "file_access": "check_file_info"}
    api.clear()
    asked = len(model.requests)
    dm = message("", ts="880.1", channel="D0009", channel_type="im", subtype="file_share", files=[png, stub])
    await slack.event({**dm, "user": "U0009"})
    await slack.drain()
    shown = "".join(api.shown())
    assert "You're not on the list of people who can use datathread" in shown
    assert "I can't read" not in shown and "screenshot.png" not in shown  # no word about the files
    assert api.of("files.info") == [] and api.downloads == [] and len(model.requests) == asked


async def test_help_with_only_a_screenshot_is_the_help_and_says_why_it_was_not_read(slack, model):
    """`help` with a file it cannot read: the local help, without a model call or a fetch (any file
    made it a question about the files), and the screenshot's sentence below it."""
    api = slack.api
    png = api.share("screenshot.png", b"\x89PNG....", mimetype="image/png")
    asked = len(model.requests)
    await slack.event({**mention("help", ts="885.1"), "files": [png]})
    await slack.drain()
    shown = "".join(api.shown())
    assert "reply in the thread for follow-ups" in shown  # the help's Slack tip
    assert "I didn't read `screenshot.png`: A .png file is not one I can read" in shown
    assert len(model.requests) == asked and api.downloads == []
    [handed] = slack.handled
    assert handed.text == "help" and [(f.name, f.data) for f in handed.files] == [("screenshot.png", None)]


async def test_a_question_with_only_a_screenshot_is_asked_and_says_why_without_a_fetch(slack, model):
    """Words and a screenshot: a question, whose answer says why the screenshot was not read (the
    model is told too); refused by its name, without a call to Slack."""
    api = slack.api
    png = api.share("chart.png", b"\x89PNG....", mimetype="image/png")
    model.enqueue(text("I can't see images; ask me about data."))
    asked = len(model.requests)
    await slack.event({**mention("what does this chart show?", ts="886.1"), "files": [png]})
    await slack.drain()
    [request] = model.requests[asked:]
    words, block = question_of(request)
    assert words == "what does this chart show?" and '"chart.png" was not taken in' in block
    assert "I didn't read `chart.png`: A .png file is not" in "".join(api.shown())
    assert api.downloads == []
