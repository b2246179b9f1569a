"""A long answer that Teams throttles part-way, end to end (real app, real botbuilder client, the fake
Bot Connector answering 429 with a Retry-After to the answer's second message): what the person reads,
and what arrives after the turn (bot/teams_later.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.bot.teams_harness import activity
from tests.fakes.anthropic_api import text, tool

SMALL_CHART = """
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
plt.figure(figsize=(2, 1.5)); plt.plot([1, 2, 3]); plt.savefig('small.png', dpi=40)
"""
PARAGRAPHS = [f"P{i:02d} " + "z" * 995 for i in range(30)]  # 30 KB: two messages


def long_answer_with_a_chart() -> list[dict]:
    return [
        tool("run_python", {"code": SMALL_CHART}),
        tool("attach_file", {"path": "small.png", "title": "Small"}),
        text("\n\n".join(PARAGRAPHS)),
    ]


def card_status(call) -> str:
    return call.body["attachments"][0]["content"]["body"][0]["text"]


def throttle_the_second_part(retry_after: str, *, times: int = 1):
    refused: list[str] = []

    def refuse(method: str, body: dict) -> tuple | None:
        said = body.get("text") or ""
        if method == "POST" and said.startswith("P") and not said.startswith("P00") and len(refused) < times:
            refused.append(said[:3])
            return (429, {"Retry-After": retry_after})
        return None

    return refused, refuse


@pytest.fixture
def short_patience(monkeypatch):
    """The turn waits out a Retry-After of at most 0.5 s (30 s in production), so 2-3 s go to the job."""
    from bot import teams_connector

    monkeypatch.setattr(teams_connector, "ANSWER_RETRY_AFTER_MAX_S", 0.5)


async def test_the_rest_follows_when_teams_allows_after_the_turn(teams, fake_model, short_patience):
    """Measured before: part 1 posted, part 2 refused (429, Retry-After 60), and the card said "Teams did
    not take the answer, so it is not here" — with the answer's card and its chart lost. Now the card
    says the rest follows; a job waits the Retry-After after the turn (a follow-up in the same thread
    is answered meanwhile: neither the lock nor the slot is held) and sends the rest, the answer's
    card, then the chart, and the card says Done."""
    refused, teams.connector.refuse_when = throttle_the_second_part("3")
    fake_model.enqueue(*long_answer_with_a_chart(), text("Forty-two."))
    assert (await teams.post(activity(teams.connector.url, "describe all carriers"))).status_code == 202
    for _ in range(600):
        if refused:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the turn ends, its card saying the rest follows
    assert (await teams.post(activity(teams.connector.url, "and how many?"))).status_code == 202
    await teams.state.runner.drain(timeout=60)

    sent = teams.connector.sent()
    texts = [m.get("text") or "" for m in sent]
    parts = [t for t in texts if t.startswith("P")]
    assert "\n\n".join(parts) == "\n\n".join(PARAGRAPHS)  # whole, in order, once
    follow_up, rest = (
        texts.index("Forty-two."),
        next(i for i, t in enumerate(texts) if t.startswith(refused[0])),
    )
    assert follow_up < rest  # the next question did not wait for the rest
    actions = [
        i
        for i, m in enumerate(sent)
        for a in m.get("attachments") or []
        if i >= rest and (a.get("content") or {}).get("actions")
    ]
    images = [
        i for i, m in enumerate(sent) for a in m.get("attachments") or [] if a["contentType"] == "image/png"
    ]
    assert actions and images and actions[0] < images[0]  # after the rest: its card, then the chart
    statuses = [card_status(c) for c in teams.connector.updates()]
    waiting = [s for s in statuses if "follows" in s]
    assert waiting == [
        "⏳ Teams asked me to slow down: the rest of this answer, with its card and 1 file, follows in about 3 s."
    ]
    first_card = teams.connector.id_of(sent[1])
    [last] = [c for c in teams.connector.updates() if c.activity_id == first_card][-1:]
    assert card_status(last).startswith("Done")
    # the job kept the message with the answer's card, as the turn does: a vote is drawn on it
    card = sent[actions[0]]
    vote = next(a["data"] for a in card["attachments"][0]["content"]["actions"] if a["title"] == "👍 Helpful")
    assert await teams.say("", value=vote) == []
    assert teams.connector.updates()[-1].activity_id == teams.connector.id_of(card)


async def test_an_answer_whose_first_message_teams_throttles_follows_when_teams_allows(
    teams, fake_model, short_patience
):
    """Teams throttled the answer's first message (429, Retry-After 3 s — longer than the turn waits):
    the card said "Teams did not take the answer, so it is not here. Please ask again", and an answer
    Teams would have taken seconds later was lost. Now all of it follows in a job, as the rest of a
    cut answer does: every part, its card and its chart, and the card says Done."""
    refused: list[str] = []

    def throttle_the_first(method: str, body: dict) -> tuple | None:
        said = body.get("text") or ""
        if method == "POST" and said.startswith("P00") and not refused:
            refused.append(said[:3])
            return (429, {"Retry-After": "3"})
        return None

    teams.connector.refuse_when = throttle_the_first
    fake_model.enqueue(*long_answer_with_a_chart())
    assert (await teams.post(activity(teams.connector.url, "describe all carriers"))).status_code == 202
    waiting = "⏳ Teams asked me to slow down: this answer, with its card and 1 file, follows in about 3 s."
    for _ in range(600):  # until the card says so (a fixed 0.5 s was a guess at a loaded machine's pace)
        statuses = [card_status(c) for c in teams.connector.updates()]
        if waiting in statuses:
            break
        await asyncio.sleep(0.05)
    assert refused and waiting in statuses, statuses
    assert not [s for s in statuses if "not here" in s]
    await teams.state.runner.drain(timeout=60)
    sent = teams.connector.sent()
    parts = [m["text"] for m in sent if (m.get("text") or "").startswith("P")]
    assert "\n\n".join(parts) == "\n\n".join(PARAGRAPHS)  # whole, in order, once
    assert any(a["contentType"] == "image/png" for m in sent for a in m.get("attachments") or [])
    assert card_status(teams.connector.updates()[-1]).startswith("Done")


async def test_a_retry_after_past_a_few_minutes_says_what_did_not_arrive(teams, fake_model, short_patience):
    """A Retry-After longer than the rest may wait (600 s): the card says the rest of the answer did not
    arrive — not that the answer is not here — and the chart still follows."""
    refused, teams.connector.refuse_when = throttle_the_second_part("600")
    fake_model.enqueue(*long_answer_with_a_chart())
    sent = await teams.say("describe all carriers")
    assert refused
    said = card_status(teams.connector.updates()[-1])
    assert said.startswith(
        "⚠️ The rest of this answer, with its card, did not arrive (Teams refused it, HTTP 429): what is "
        "above is only part of it. Please ask again to see all of it (error id "
    ), said
    assert [m["text"][:3] for m in sent if (m.get("text") or "").startswith("P")] == ["P00"]
    assert any(a["contentType"] == "image/png" for m in sent for a in m.get("attachments") or [])


async def test_the_rest_throttled_past_its_few_minutes_is_said_lost(
    teams, fake_model, short_patience, monkeypatch
):
    """Teams throttles the rest again and again: once the job's few minutes (3 s here) are up, the card
    says what did not arrive, the chart included; nothing is sent twice."""
    from bot import teams_later

    monkeypatch.setattr(teams_later, "REST_WAIT_MAX_S", 3.0)
    refused, teams.connector.refuse_when = throttle_the_second_part("2", times=10)
    fake_model.enqueue(*long_answer_with_a_chart())
    sent = await teams.say("describe all carriers")
    assert len(refused) == 2  # in the turn, then once in the job: a third wait would pass the 3 s
    said = card_status(teams.connector.updates()[-1])
    assert said.startswith("⚠️ The rest of this answer, with its card and 1 file, did not arrive"), said
    assert [m["text"][:3] for m in sent if (m.get("text") or "").startswith("P")] == ["P00"]
    assert not any(a["contentType"] == "image/png" for m in sent for a in m.get("attachments") or [])
    assert json.dumps(sent).count("P00") == 1


async def test_a_rest_whose_process_stopped_says_on_the_card_that_it_did_not_arrive(
    teams, fake_model, short_patience, monkeypatch
):
    """The process holding the `teams.rest` job stopped before sending it: a message said so, and the
    card went on saying the rest "follows in about 2 s". Now the card says what did not arrive."""
    from bot.teams_jobs import run_rest_lost
    from bot.teams_later import REST_KIND

    held, submit = [], teams.state.runner.submit

    async def held_rest(job) -> None:  # the job's worker dies before it starts
        if job.kind == REST_KIND:
            held.append(job)
        else:
            await submit(job)

    monkeypatch.setattr(teams.state.runner, "submit", held_rest)
    refused, teams.connector.refuse_when = throttle_the_second_part("2")
    fake_model.enqueue(*long_answer_with_a_chart())
    await teams.say("describe all carriers")
    assert refused and "follows in about 2 s" in card_status(teams.connector.updates()[-1])
    before = len(teams.connector.sent())
    await run_rest_lost(teams.app.state.teams, teams.state, held[0])
    said = card_status(teams.connector.updates()[-1])
    assert said.startswith(
        "⚠️ The rest of this answer, with its card and 1 file, did not arrive (I stopped before sending "
        "it): what is above is only part of it. Please ask again to see all of it (error id "
    ), said
    assert teams.connector.sent()[before:] == []  # said on the card, not in another message
