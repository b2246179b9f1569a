"""Teams turn helpers without a server: mention stripping and the Run/Cancel confirmation round trip."""

from __future__ import annotations

import asyncio
import re

import pytest
from botbuilder.schema import Activity

from bot import teams_clicks, teams_jobs
from bot.teams_connector import ConnectorFailed
from core.access import AccessPolicy
from core.events import ConfirmRequest

# Clicks here ask Teams nothing (`Out` stands in for the Bot Connector): with people from outside the
# organization allowed, who someone is changes nothing (tests/bot/test_teams_outsiders.py asks it).
OUTSIDERS_ALLOWED = AccessPolicy(external_users=True)


class Out:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list]] = []

    async def send(self, text: str = "", *, attachments: list | None = None) -> str:
        self.sent.append((text, attachments or []))
        return f"a{len(self.sent)}"


@pytest.mark.parametrize(
    "text,entities,expected",
    [
        ("<at>datathread</at> how many flights?", True, "how many flights?"),
        ("<at>datathread</at>  top <at>Bob</at>'s carriers", True, "top Bob's carriers"),
        ("no mention here", False, "no mention here"),
        ("<at>Data Thread</at> renamed bot", False, "Data Thread renamed bot"),
    ],
)
def test_question_text(text, entities, expected):
    bot = {"id": "28:bot", "name": "datathread"}
    body = {"type": "message", "text": text, "recipient": bot}
    if entities:
        body["entities"] = [
            {"type": "mention", "mentioned": bot, "text": "<at>datathread</at>"},
            {"type": "mention", "mentioned": {"id": "29:bob", "name": "Bob"}, "text": "<at>Bob</at>"},
        ]
    assert teams_jobs.question_text(Activity().deserialize(body)) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<p>how many flights&nbsp;&amp; carriers?</p>", "how many flights & carriers?"),
        ("<p>reset</p>", "reset"),
        ("<div><at>Bob</at> says a &lt; b</div>", "Bob says a < b"),
        # pasted SQL and a list: lines stay lines (all one line, the `--` commented out the rest)
        (
            "<p>check this:</p><p>SELECT carrier -- only 2013<br>FROM flights</p><p>1. first<br/>2. second</p>",
            "check this:\nSELECT carrier -- only 2013\nFROM flights\n1. first\n2. second",
        ),
    ],
)
def test_question_text_of_a_message_sent_as_html(text, expected):
    """`textFormat: xml` reached the model verbatim (`<p>…&nbsp;&amp;…</p>`), and `<p>reset</p>` was no
    reset; a plain message keeps its `<` and `&` as typed (above)."""
    body = {"type": "message", "text": text, "textFormat": "xml", "recipient": {"id": "28:bot"}}
    assert teams_jobs.question_text(Activity().deserialize(body)) == expected
    plain = {**body, "textFormat": "plain", "text": "is a < b & c?"}
    assert teams_jobs.question_text(Activity().deserialize(plain)) == "is a < b & c?"


@pytest.mark.parametrize(
    "text,expected",
    [
        (  # the bot named again in the sentence: only the mention that addresses it goes
            "<at>datathread</at> compare with what <at>datathread</at> said",
            "compare with what datathread said",
        ),
        (
            "<at>Ada</at> can you ask <at>datathread</at> for delays?",
            "Ada can you ask datathread for delays?",
        ),
        ("<at>Data team</at> <at>datathread</at> delays by carrier", "Data team delays by carrier"),
        ("<at>datathread</at> is datathread down?", "is datathread down?"),  # its name, not a mention
        ("<at>Data Bot</at> delays", "delays"),  # renamed in this team: the entity says it is the bot
    ],
)
def test_only_the_mention_that_addresses_the_bot_is_removed(text, expected):
    """botbuilder's remove_recipient_mention removed every occurrence of the bot's name: "compare with
    what @datathread said" reached the model as "compare with what said"."""
    bot = {"id": "28:bot", "name": "datathread"}
    names = {m for m in re.findall(r"<at>(.*?)</at>", text)}
    mentions = [
        {
            "type": "mention",
            "mentioned": bot if name in ("datathread", "Data Bot") else {"id": f"29:{name}", "name": name},
            "text": f"<at>{name}</at>",
        }
        for name in names
    ]
    body = {"type": "message", "text": text, "recipient": bot, "entities": mentions}
    assert teams_jobs.question_text(Activity().deserialize(body)) == expected


@pytest.mark.parametrize(
    ("text", "text_format", "expected"),
    [
        # new Teams clients mention a bot of several words as one tag per word, each the bot's
        # (https://github.com/microsoft/botframework-sdk/issues/6617): "Thread reset" was no reset
        ("<at>Data</at> <at>Thread</at> reset", "plain", "reset"),
        (
            "<at>Data</at> <at>Thread</at> compare with what <at>Data</at> <at>Thread</at> said",
            "plain",
            "compare with what Data Thread said",
        ),
        ("<at>Ada</at> <at>Data</at> <at>Thread</at> delays", "plain", "Ada delays"),
        # sent as HTML, the mention opens a paragraph: "datathread reset" was no reset either
        ("<p><at>Data</at> <at>Thread</at> reset</p>", "xml", "reset"),
        ("<p><at>datathread</at> reset</p>", "xml", "reset"),
        ("<div><at>datathread</at> is <at>datathread</at> up?</div>", "xml", "is datathread up?"),
    ],
)
def test_a_mention_split_in_words_or_wrapped_in_html_is_removed_whole(text, text_format, expected):
    bot = {"id": "28:bot", "name": "Data Thread"}
    mentions = [
        {
            "type": "mention",
            "mentioned": bot if name in ("Data", "Thread", "datathread") else {"id": "29:ada", "name": name},
            "text": f"<at>{name}</at>",
        }
        for name in re.findall(r"<at>(.*?)</at>", text)
    ]
    body = {
        "type": "message",
        "text": text,
        "textFormat": text_format,
        "recipient": bot,
        "entities": mentions,
    }
    assert teams_jobs.question_text(Activity().deserialize(body)) == expected


def test_a_plain_question_keeps_its_lines():
    """Teams' plain text, pasted SQL with a comment: folded into one line, `--` hid the rest from the
    model. Spaces within a line and runs of blank lines are still folded."""
    text = "<at>datathread</at> check:\r\n  SELECT carrier  -- 2013 only\r\nFROM flights\n\n\n\nthanks "
    bot = {"id": "28:bot", "name": "datathread"}
    mention = {"type": "mention", "mentioned": bot, "text": "<at>datathread</at>"}
    body = {"type": "message", "text": text, "recipient": bot, "entities": [mention]}
    assert teams_jobs.question_text(Activity().deserialize(body)) == (
        "check:\nSELECT carrier -- 2013 only\nFROM flights\n\nthanks"
    )


@pytest.mark.parametrize("answer,expected", [("run", True), ("cancel", False)])
async def test_confirm_round_trip_through_the_store(settings, tmp_path, answer, expected):
    """The click may reach another process than the waiting turn: the answer travels via the store."""
    from types import SimpleNamespace

    from core.store_sqlite import SqliteStore
    from core.thread import Threads

    def replica() -> Threads:  # two replicas over one store file
        return Threads(settings, SqliteStore(tmp_path / "s.db"), _NoFiles(), OUTSIDERS_ALLOWED)

    waiting_side, clicking_side = replica(), replica()
    out = Out()
    confirm = teams_clicks.confirmer(waiting_side, out, "aad-ada")
    waiting = asyncio.create_task(confirm(ConfirmRequest(turn_id="t1", step_id="s1", prompt="Scan 2 TB?")))
    while not out.sent:
        await asyncio.sleep(0.01)
    action = out.sent[0][1][0]["content"]["actions"][0 if answer == "run" else 1]["data"]
    state = SimpleNamespace(threads=clicking_side)
    stranger = Activity().deserialize({"type": "message", "from": {"id": "29:eve", "aadObjectId": "aad-eve"}})
    await teams_clicks.card_action(state, stranger, action, out)
    assert "Only the person who asked" in out.sent[-1][0] and not waiting.done()
    ada = Activity().deserialize({"type": "message", "from": {"id": "29:ada", "aadObjectId": "aad-ada"}})
    await teams_clicks.card_action(state, ada, action, out)
    assert await asyncio.wait_for(waiting, 5) is expected
    told = len(out.sent)
    await teams_clicks.card_action(state, ada, action, out)  # a double click: nothing more
    assert len(out.sent) == told
    other = out.sent[0][1][0]["content"]["actions"][1 if answer == "run" else 0]["data"]
    await teams_clicks.card_action(state, ada, other, out)  # the other button, after the answer
    assert "expired" in out.sent[-1][0]


async def test_a_double_click_handled_by_two_replicas_does_one_thing(settings, tmp_path):
    """Each click of a double click is its own activity, and may reach another worker or replica: the
    repeat is known through the store they share, and does nothing; another person's click does."""
    from types import SimpleNamespace

    from core.store_sqlite import SqliteStore
    from core.thread import Threads

    def replica() -> SimpleNamespace:  # two replicas over one store file
        return SimpleNamespace(
            threads=Threads(settings, SqliteStore(tmp_path / "s.db"), _NoFiles(), OUTSIDERS_ALLOWED)
        )

    def click(who: str) -> Activity:
        return Activity().deserialize(
            {
                "type": "message",
                "from": {"id": f"29:{who}", "aadObjectId": f"aad-{who}"},
                "conversation": {"id": "19:c"},
            }
        )

    show = {"datathread": "show_steps", "turn_id": "t-gone"}
    out = Out()
    await teams_clicks.card_action(replica(), click("ada"), show, out)
    await teams_clicks.card_action(replica(), click("ada"), show, out)
    await teams_clicks.card_action(replica(), click("bob"), show, out)
    assert [text for text, _ in out.sent] == ["I can't find that answer any more."] * 2


async def test_a_click_nobody_waits_for_any_more_says_it_expired(settings, tmp_path, monkeypatch):
    """A Run click on a card whose turn is gone (the process restarted while it waited) or never
    existed here said "Running it." and nothing ran; now it gets the sentence Slack gives a late click."""
    from types import SimpleNamespace

    from core import confirm as confirming
    from core.store_sqlite import SqliteStore
    from core.thread import CONFIRM_EXPIRED, Threads

    monkeypatch.setattr(confirming, "BEAT_S", 0.1)
    monkeypatch.setattr(confirming, "ASKING_S", 0.2)
    threads = Threads(settings, SqliteStore(tmp_path / "s.db"), _NoFiles(), OUTSIDERS_ALLOWED)
    out, state = Out(), SimpleNamespace(threads=threads)
    ada = Activity().deserialize({"type": "message", "from": {"id": "29:ada", "aadObjectId": "aad-ada"}})
    unknown = {"datathread": "confirm", "key": "no-such-turn:s1", "answer": "run", "yes": "Run"}
    await teams_clicks.card_action(state, ada, unknown, out)
    assert out.sent[-1][0] == CONFIRM_EXPIRED
    # asked, then the process waiting for it ended: the card is still there, its turn is not
    confirm = teams_clicks.confirmer(threads, out, "aad-ada")
    waiting = asyncio.create_task(confirm(ConfirmRequest(turn_id="t1", step_id="s1", prompt="Scan 2 TB?")))
    while not out.sent[-1][1]:
        await asyncio.sleep(0.01)
    run = out.sent[-1][1][0]["content"]["actions"][0]["data"]
    await asyncio.sleep(0.3)
    waiting.cancel()
    await asyncio.sleep(0.5)  # past the last mark the waiting turn left
    await teams_clicks.card_action(state, ada, run, out)
    assert out.sent[-1][0] == CONFIRM_EXPIRED


async def test_a_run_cancel_card_that_cannot_be_sent_means_no_in_one_log_line(settings, tmp_path, caplog):
    """The card's send failing (a silent or refusing Bot Connector) raised out of the confirmation: a
    schedule proposal ended on the core's "Something went wrong", a BigQuery step as a silent no."""
    import logging
    from types import SimpleNamespace

    from core.access import AccessPolicy
    from core.store_sqlite import SqliteStore
    from core.thread import Threads

    class RefusingOut(Out):
        reference = SimpleNamespace(conversation=SimpleNamespace(id="19:general@thread.tacv2"))

        async def send(self, text: str = "", *, attachments: list | None = None) -> str:
            raise ConnectorFailed("the Bot Connector at 127.0.0.1 did not answer within 10 s")

    threads = Threads(settings, SqliteStore(tmp_path / "s.db"), _NoFiles(), AccessPolicy())
    confirm = teams_clicks.confirmer(threads, RefusingOut(), "aad-ada")
    with caplog.at_level(logging.WARNING, logger="datathread.teams"):
        answer = await asyncio.wait_for(
            confirm(ConfirmRequest(turn_id="t1", step_id="s1", prompt="Scan?")), 5
        )
    assert answer is False
    assert [r.getMessage() for r in caplog.records] == [
        "teams: could not ask for confirmation in conversation 19:general@thread.tacv2: "
        "the Bot Connector at 127.0.0.1 did not answer within 10 s"
    ]


class _NoFiles:
    async def read_file(self, session_id: str, path: str) -> bytes:
        raise FileNotFoundError(path)

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        raise AssertionError("a confirmation writes no files")
