"""Teams turn helpers without a server: mention stripping and the Run/Cancel confirmation round trip."""

from __future__ import annotations

import asyncio

import pytest
from botbuilder.schema import Activity

from bot import teams_turn
from bot.teams_app import TeamsAdapter, TeamsBot, build_auth
from core.events import ConfirmRequest


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
    assert teams_turn.question_text(Activity().deserialize(body)) == expected


@pytest.mark.parametrize("answer,expected", [("run", True), ("cancel", False)])
async def test_confirm_round_trip_through_the_store(settings, tmp_path, answer, expected):
    """The click may reach another process than the waiting turn: the answer travels via the store."""
    from types import SimpleNamespace

    from core.store_sqlite import SqliteStore

    waiting_side, clicking_side = (
        SqliteStore(tmp_path / "s.db"),
        SqliteStore(tmp_path / "s.db"),
    )  # two replicas
    out = Out()
    confirm = teams_turn._confirmer(waiting_side, out, "aad-ada")
    waiting = asyncio.create_task(confirm(ConfirmRequest(turn_id="t1", step_id="s1", prompt="Scan 2 TB?")))
    while not out.sent:
        await asyncio.sleep(0.01)
    action = out.sent[0][1][0]["content"]["actions"][0 if answer == "run" else 1]["data"]
    from core.access import AccessPolicy

    state = SimpleNamespace(analyst=SimpleNamespace(store=clicking_side, access=AccessPolicy()))
    stranger = Activity().deserialize({"type": "message", "from": {"id": "29:eve", "aadObjectId": "aad-eve"}})
    await teams_turn._card_action(None, state, stranger, action, out)
    assert "Only the person who asked" in out.sent[-1][0] and not waiting.done()
    auth = build_auth(settings)
    bot = TeamsBot(settings, auth, TeamsAdapter(auth))
    ada = Activity().deserialize({"type": "message", "from": {"id": "29:ada", "aadObjectId": "aad-ada"}})
    await teams_turn._card_action(bot, state, ada, action, out)
    assert await asyncio.wait_for(waiting, 5) is expected
    await teams_turn._card_action(bot, state, ada, action, out)
    assert "expired" in out.sent[-1][0]
