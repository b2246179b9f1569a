"""When the files shared with a Slack or Teams message are fetched: by the core, through the surface's
fetch, once the turn holds its thread's session lock and after its checks (core/file_fetch.py).

Through the real apps: signed Slack events into `datathread serve` with the fake Slack Web API serving
the files, Teams activities POSTed to `/api/messages` with a loopback host standing where OneDrive
would; the real core, sandbox and store; the scripted model. Fetched before the turn joined the queue,
a follow-up sent while a file downloaded was answered first, without it; a person over their hourly
limit still had the bot download the file; and the bytes sat on the message for the whole turn."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
import pytest_asyncio

from core.events import SharedFile
from core.file_intake import HEADER
from tests.bot.slack_harness import demo_home, mention, module_settings, serve
from tests.bot.teams_harness import CHAT, activity, file_info, post, serve_teams
from tests.fakes.anthropic_api import text
from tests.fakes.file_host import FileHost, Served

CSV = b"region,amount\nnorth,10\nsouth,32\n"
SLOW_S = 2.0  # how long the file's host sits on the download


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slack(tmp_path_factory, model, slack_api):
    settings = module_settings(demo_home(tmp_path_factory), model.url, allowed_users="U0001,U0002")
    slack_api.bot_token = "xoxb-test-token-000000"
    async with serve(settings, slack_api) as harness:
        yield harness


@pytest.fixture
def host():
    fake = FileHost().start()
    yield fake
    fake.stop()


def timed(reply: dict, at: list[float]):
    """The reply, noting when the model was asked for it."""

    def build(_body: dict) -> dict:
        at.append(time.monotonic())
        return reply

    return build


def asked(request: dict) -> tuple[str, bool]:
    """The person's words in a request's question, and whether its history holds a shared file."""
    words = next(b["text"] for b in request["messages"][-1]["content"] if b["type"] == "text")
    return words, HEADER in str(request["messages"])


@pytest.mark.asyncio(loop_scope="module")
async def test_slack_a_follow_up_sent_while_a_file_downloads_is_answered_after_it(slack, model):
    """A CSV that takes 2 s to download, then "now by region" 0.3 s later: the question with the file
    holds the thread first, so it is answered first and the follow-up knows the file (it was answered
    at 0.3 s, without it)."""
    api = slack.api
    file = api.share("sales.csv", CSV)
    api.slow_files[file["id"]] = SLOW_S
    at: list[float] = []
    model.enqueue(timed(text("It totals 42."), at), timed(text("North 10, south 32."), at))
    before = len(model.requests)
    started = time.monotonic()
    await slack.event({**mention("what's the total?", ts="900.1"), "files": [file]})
    await asyncio.sleep(0.3)
    await slack.event(mention("now by region", ts="900.2", thread_ts="900.1"))
    await slack.drain()
    first, second = model.requests[before:]
    assert asked(first) == ("what's the total?", True)
    assert asked(second) == ("now by region", True)  # the file's question and answer are its history
    assert [d.method.rsplit("/", 1)[-1] for d in api.downloads] == ["sales.csv"]
    assert SLOW_S < at[0] - started < at[1] - started, [t - started for t in at]
    statuses = [c.args["status"] for c in api.of("assistant.threads.setStatus")]
    assert "is fetching sales.csv…" in statuses


@pytest.mark.asyncio(loop_scope="module")
async def test_slack_a_person_over_their_hourly_limit_has_no_file_downloaded(slack, model, monkeypatch):
    """DATATHREAD_USER_TURNS_PER_HOUR=1: U0002's second question, with a file, is refused by the limit
    and the file is not downloaded (it was, before the refusal)."""
    monkeypatch.setattr(slack.state.settings, "user_turns_per_hour", 1)
    api = slack.api
    model.enqueue(text("UA flew the most."))
    await slack.event({**mention("who flew the most?", ts="910.1", channel="C0002"), "user": "U0002"})
    await slack.drain()
    assert "UA flew the most." in "".join(api.shown())
    api.downloads.clear()
    asked_before = len(model.requests)
    file = api.share("sales.csv", CSV)
    again = mention("and this file?", ts="910.2", channel="C0002")
    await slack.event({**again, "user": "U0002", "files": [file]})
    await slack.drain()
    assert api.downloads == [] and len(model.requests) == asked_before
    assert any("reached the limit of questions" in shown for shown in api.shown())


def held_shared_bytes() -> int:
    """The bytes of shared files alive in this process (what `SharedFile`s still hold)."""
    gc.collect()
    return sum(len(o.data) for o in gc.get_objects() if isinstance(o, SharedFile) and o.data is not None)


@pytest.mark.asyncio(loop_scope="module")
async def test_slack_a_files_bytes_are_let_go_once_in_the_workspace(slack, model):
    """While the model answers, no shared file's bytes are held any more: they are in the workspace
    (the message carried 1 MB through the whole turn)."""
    api = slack.api
    file = api.share("big.csv", b"n\n" + b"7\n" * 2**19)
    held: list[int] = []

    def answer(_body: dict) -> dict:
        held.append(held_shared_bytes())
        return text("It has 524,288 rows.")

    model.enqueue(answer)
    await slack.event({**mention("how many rows?", ts="920.1", channel="C0003"), "files": [file]})
    await slack.drain()
    assert held == [0]
    assert "It has 524,288 rows." in "".join(api.shown())


async def test_teams_a_follow_up_sent_while_a_file_downloads_is_answered_after_it(teams, host, fake_model):
    url = host.serve("/dl/sales.csv", Served(CSV, content_type="text/csv", stall_s=SLOW_S))
    at: list[float] = []
    fake_model.enqueue(timed(text("It totals 42."), at), timed(text("North 10, south 32."), at))
    with_file = activity(teams.connector.url, "what's the total?", conversation=CHAT)
    with_file["attachments"] = [file_info("sales.csv", url)]
    started = time.monotonic()
    assert (await teams.post(with_file)).status_code == 202
    await asyncio.sleep(0.3)
    await post(teams, activity(teams.connector.url, "now by region", conversation=CHAT))
    first, second = fake_model.requests
    assert asked(first) == ("what's the total?", True)
    assert asked(second) == ("now by region", True)
    assert SLOW_S < at[0] - started < at[1] - started, [t - started for t in at]
    assert [s.path for s in host.seen] == ["/dl/sales.csv"]


async def test_teams_a_person_over_their_hourly_limit_has_no_file_downloaded(settings, host, fake_model):
    async with serve_teams(settings.model_copy(update={"user_turns_per_hour": 1})) as teams:
        fake_model.enqueue(text("UA flew the most."))
        await post(teams, activity(teams.connector.url, "who flew the most?", conversation=CHAT))
        body = activity(teams.connector.url, "and this file?", conversation=CHAT)
        body["attachments"] = [file_info("sales.csv", host.serve("/dl/sales.csv", CSV))]
        await post(teams, body)
        assert not host.seen and len(fake_model.requests) == 1
        assert "reached the limit of questions" in teams.connector.sent()[-1]["text"]
