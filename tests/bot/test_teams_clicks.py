"""Clicks on a Teams answer card as Teams sends them (Action.Submit: a message activity with the card's
data as `value`, a new activity id per click), end to end: real app, real botbuilder client, the fake
Bot Connector. A double click does one thing; a vote is drawn on the answer's card, not posted."""

from __future__ import annotations

import asyncio
import json

from tests.bot.teams_harness import THREAD, activity
from tests.fakes.anthropic_api import text, tool

ANSWER = "There were **336,776** flights."
BOB = {"id": "29:bob", "name": "Bob Stone", "aadObjectId": "aad-bob"}


def actions_of(message: dict) -> dict:
    card = next(
        a["content"] for a in message.get("attachments") or [] if (a.get("content") or {}).get("actions")
    )
    return {a["title"]: a["data"] for a in card["actions"] if a["type"] == "Action.Submit"}


def texts(sent: list[dict]) -> list[str]:
    return [m.get("text") or "" for m in sent]


async def click_as(teams, who: dict, value: dict) -> list[dict]:
    body = activity(teams.connector.url, conversation=THREAD, value=value)
    body["from"] = who
    before = len(teams.connector.sent())
    assert (await teams.post(body)).status_code == 202
    await teams.state.runner.drain(timeout=60)
    return teams.connector.sent()[before:]


async def answered(teams, fake_model, answer: str = ANSWER) -> dict:
    fake_model.enqueue(tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}), text(answer))
    sent = await teams.say("how many flights?")
    return next(
        m
        for m in reversed(sent)
        if any((a.get("content") or {}).get("actions") for a in m.get("attachments") or [])
    )


async def test_a_double_click_does_one_thing_and_votes_are_drawn_on_the_card(teams, fake_model):
    """Measured before, in a channel thread: Show SQL & code clicked twice posted the SQL twice; 👍 twice
    posted "Thanks! I saved this as a verified query…" twice; Bob's 👎 posted "Sorry about that. What
    was wrong?…" for everyone; the answer card never changed. Now the repeat does nothing, and each
    vote redraws the answer's message in place — its text as it was, the card with the votes so far
    and the latest vote's sentence — with nothing posted."""
    answer = await answered(teams, fake_model)
    answer_id, actions = teams.connector.id_of(answer), actions_of(answer)

    first, again = (
        await teams.say("", value=actions["Show SQL & code"]),
        await teams.say("", value=actions["Show SQL & code"]),
    )
    assert len(first) == 1 and "SELECT count(*)" in first[0]["text"] and again == []

    edits = len(teams.connector.updates())
    assert await teams.say("", value=actions["👍 Helpful"]) == []
    assert await teams.say("", value=actions["👍 Helpful"]) == []  # the double click
    assert len(teams.connector.updates()) == edits + 1
    assert await click_as(teams, BOB, actions["👎 Not helpful"]) == []  # nothing for the whole channel
    up, down = teams.connector.updates()[-2:]
    assert up.activity_id == down.activity_id == answer_id
    assert down.body["text"] == answer["text"] == ANSWER  # the message's own text stays
    said = [b["text"] for b in down.body["attachments"][0]["content"]["body"] if b.get("separator")]
    assert said[-1].startswith("👍 1 · 👎 1 — Bob Stone 👎: Sorry about that. What was wrong?"), said
    assert "Ada Lovelace 👍: Thanks! I saved this as a verified query" in json.dumps(
        up.body, ensure_ascii=False
    )
    assert actions_of(down.body) == actions  # the buttons stay
    record = (await teams.state.analyst.store.list_turns())[0]
    assert record["feedback"] == {"aad-ada": "up", "aad-bob": "down"}


async def test_the_same_click_a_minute_later_is_asked_again(teams, fake_model, monkeypatch):
    """Only a repeat within CLICK_REPEAT_S is dropped: Show SQL & code asked again later is answered."""
    from bot import teams_clicks

    monkeypatch.setattr(teams_clicks, "CLICK_REPEAT_S", 1.0)
    actions = actions_of(await answered(teams, fake_model))
    assert len(await teams.say("", value=actions["Show SQL & code"])) == 1
    await asyncio.sleep(1.5)
    assert len(await teams.say("", value=actions["Show SQL & code"])) == 1


async def test_a_vote_teams_will_not_draw_on_the_card_is_said_as_before(teams, fake_model):
    """The card's edit refused (the answer was deleted, a 413): the vote's sentence is posted."""
    actions = actions_of(await answered(teams, fake_model))
    teams.connector.refuse_when = lambda method, body: (403, {}) if method == "PUT" else None
    sent = await teams.say("", value=actions["👍 Helpful"])
    assert [t[:40] for t in texts(sent)] == ["Thanks! I saved this as a verified query"]


async def test_a_vote_on_a_long_answer_redraws_its_last_message(teams, fake_model):
    """A long answer's card rides on its last message: that message is the one redrawn, its text kept."""
    paragraphs = [f"P{i:02d} " + "z" * 995 for i in range(30)]
    answer = await answered(teams, fake_model, "\n\n".join(paragraphs))
    assert answer["text"].startswith("P") and not answer["text"].startswith("P00")  # not the first part
    assert await teams.say("", value=actions_of(answer)["👍 Helpful"]) == []
    edit = teams.connector.updates()[-1]
    assert edit.activity_id == teams.connector.id_of(answer) and edit.body["text"] == answer["text"]


async def test_a_vote_changed_back_within_a_minute_is_counted(teams, fake_model):
    """👍, 👎, 👍 within a minute: the third was taken for a repeat of the first and dropped, and the
    vote stayed 👎. Only a vote equal to the one recorded is a repeat now."""
    actions = actions_of(await answered(teams, fake_model))
    for vote in ("👍 Helpful", "👎 Not helpful", "👍 Helpful", "👍 Helpful"):
        assert await teams.say("", value=actions[vote]) == []
    [record] = await teams.state.analyst.store.list_turns()
    assert record["feedback"] == {"aad-ada": "up"}
    drawn = [json.dumps(u.body, ensure_ascii=False) for u in teams.connector.updates()[-3:]]
    assert ["Ada Lovelace 👍" in d for d in drawn] == [True, False, True]  # the last 👍 drew nothing


async def test_a_click_whose_reply_teams_refused_can_be_tried_again(teams, fake_model):
    """Show SQL & code whose reply Teams refused (a 500): the click was claimed before the work, so
    trying again within a minute did nothing. The claim is let go when the reply fails."""
    actions = actions_of(await answered(teams, fake_model))
    refused: list[str] = []

    def refuse_the_first_sql(method: str, body: dict) -> tuple | None:
        if "SELECT count(*)" in (body.get("text") or "") and not refused:
            refused.append(method)
            return (500, {})
        return None

    teams.connector.refuse_when = refuse_the_first_sql
    first = await teams.say("", value=actions["Show SQL & code"])
    assert refused and "couldn't send my reply here" in " ".join(texts(first))
    again = await teams.say("", value=actions["Show SQL & code"])
    assert len(again) == 1 and "SELECT count(*)" in again[0]["text"]
    assert await teams.say("", value=actions["Show SQL & code"]) == []  # now a repeat: nothing
