"""Teams messages in words, end to end through the real app and botbuilder client on the fake Bot
Connector: a message that is only a card has a `summary` (Teams' notification said "sent a card") and
every card its `fallbackText` and `speak`; the receipt's time is drawn in each reader's zone (Adaptive
Card DATE()/TIME()); the votes have words; a turn's files come after the answer that calls them below."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tests.bot.teams_harness import CHAT, THREAD, activity, consent_invoke, post
from tests.fakes.anthropic_api import text, tool

BIG_CHART = """
import numpy as np, matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
rng = np.random.default_rng(7)
plt.figure(figsize=(8, 6)); plt.scatter(rng.normal(size=3000), rng.normal(size=3000), s=4, alpha=0.5)
plt.savefig('scatter.png', dpi=100)
open('delays.csv', 'w').write('carrier,avg_delay\\nF9,20.2\\n')
"""
DELAYS = "SELECT carrier, avg(dep_delay) AS avg_delay FROM flights GROUP BY carrier ORDER BY 2 DESC"


def card_only(bodies: list[dict]) -> list[dict]:
    """Messages (posted or edited) that carry attachments and no text."""
    return [b for b in bodies if b.get("type") == "message" and b.get("attachments") and not b.get("text")]


def adaptive(bodies: list[dict]) -> list[dict]:
    return [
        a["content"] for b in bodies for a in b.get("attachments") or [] if "adaptive" in a["contentType"]
    ]


async def test_no_message_that_is_only_a_card_goes_out_without_words(teams, fake_model):
    """The progress card, a chart too large to send inline and a CSV's file offer went out with no
    text and no summary: a phone said "datathread sent a card" three times a question. Each now has
    a summary for Teams' notification and chat list, and each card its fallbackText and speak."""
    fake_model.enqueue(
        tool("run_python", {"code": BIG_CHART}),
        tool(
            "attach_file",
            {"path": "scatter.png", "title": "Delays scatter"},
            more=[("attach_file", {"path": "delays.csv"})],
        ),
        text("The chart and the CSV are below."),
    )
    sent = await teams.say("scatter of delays, and a csv", conversation=CHAT)
    edits = [c.body for c in teams.connector.updates()]
    wordless = card_only(sent + edits)
    summaries = {b["summary"] for b in wordless if b.get("summary")}
    assert len(wordless) >= 3 and len(summaries) >= 3, json.dumps(wordless)[:2000]
    assert not [b for b in wordless if not b.get("summary")]
    assert "Working on it…" in summaries  # the progress card's first post
    assert "Chart: Delays scatter" in summaries
    assert "delays.csv is ready: accept it to save it to your OneDrive" in summaries
    for card in adaptive(sent + edits):
        assert card["fallbackText"] and card["speak"] == card["fallbackText"], card
    # a message with text keeps Teams' own notification of it: no summary of its own
    answer = next(m for m in sent if (m.get("text") or "").startswith("The chart and the CSV"))
    assert "summary" not in answer

    # accepting the offer: the uploaded file's card says so in words too
    consent = next(a for m in sent for a in m.get("attachments") or [] if "file.consent" in a["contentType"])
    invoke = consent_invoke(
        teams.connector.url, consent["content"]["acceptContext"], "delays.csv", uniqueId="u1", fileType="csv"
    )
    assert (await teams.post(invoke)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    info = teams.connector.sent()[-1]
    assert "file.info" in info["attachments"][0]["contentType"]
    assert info["summary"] == "delays.csv is in your OneDrive"


async def test_the_receipt_time_is_drawn_in_each_readers_zone(teams, fake_model, settings):
    """ "data as of 7 Dec 2026 17:48 UTC" was the same for everyone: now the card carries the moment
    in Adaptive Cards' DATE()/TIME(), which Teams draws in the reader's locale and zone, while the
    card's words keep the UTC line."""
    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("F9 was the most delayed."))
    card = adaptive(await teams.say("delays by carrier", conversation=THREAD))[-1]
    receipt = card["body"][-1]["text"]
    found = re.search(r"data as of \{\{DATE\((\S+), SHORT\)\}\}( \{\{TIME\((\S+)\)\}\})? ·", receipt)
    assert found, receipt
    moment = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    data_changed = datetime.fromtimestamp(settings.demo_warehouse.stat().st_mtime, UTC)
    assert moment == data_changed.replace(microsecond=0)
    recent = datetime.now(UTC) - data_changed < timedelta(hours=36)
    assert bool(found.group(2)) == recent and found.group(3) in (None, found.group(1))
    # where the card is not drawn (and in speech), the same receipt in words, in UTC
    plain = moment.strftime("%d %b %Y %H:%M UTC" if recent else "%d %b %Y").lstrip("0")
    assert f"data as of {plain} ·" in card["fallbackText"] and "{{" not in card["fallbackText"]


@pytest.mark.parametrize("where", ["activity", "clientInfo"])
async def test_the_readers_locale_reaches_the_model_with_the_time(teams, fake_model, where):
    """Teams sends the client's locale (`locale`, and a clientInfo entity's) with each message; only the
    time zone reached the core. Now the line that dates the question names the locale too: a German
    reader's "this week" starts on Monday."""
    body = activity(teams.connector.url, "flights this week?", conversation=THREAD)
    body["localTimezone"] = "Europe/Berlin"
    if where == "activity":
        body["locale"] = "de-DE"
    else:
        body.pop("locale")
        body["entities"].append({"type": "clientInfo", "locale": "de-DE", "country": "DE", "platform": "Web"})
    fake_model.enqueue(text("1,234 flights."))
    await post(teams, body)
    asked = fake_model.requests[-1]["messages"][-1]["content"][-1]["text"]
    assert " in Europe/Berlin (UTC+" in asked and "; the asker's locale is de-DE. " in asked, asked


async def test_the_votes_and_the_schedule_picker_have_words(teams, fake_model):
    """The votes were 👍/👎 alone (a screen reader said "thumbs up sign", and a phone has no hover for
    a tooltip); the Schedule picker's choice list had no label."""
    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("F9 was the most delayed."))
    card = adaptive(await teams.say("delays by carrier", conversation=THREAD))[-1]
    votes = {a["data"]["value"]: a for a in card["actions"] if a.get("data", {}).get("value")}
    assert (votes["up"]["title"], votes["up"]["tooltip"]) == ("👍 Helpful", "Mark this answer as helpful")
    assert (votes["down"]["title"], votes["down"]["tooltip"]) == (
        "👎 Not helpful",
        "Mark this answer as not helpful",
    )
    [picker] = next(a for a in card["actions"] if a["type"] == "Action.ShowCard")["card"]["body"]
    assert picker["type"] == "Input.ChoiceSet" and picker["label"] == "How often"


async def test_a_run_or_cancel_question_says_what_it_asks_in_its_notification(teams, fake_model):
    """The Run/Cancel (here Create/Cancel) card is a question waiting for a person: its notification
    said "sent a card". Now it says the question."""
    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("F9 was the most delayed."))
    card = adaptive(await teams.say("delays by carrier"))[-1]
    show = next(a for a in card["actions"] if a["type"] == "Action.ShowCard")
    before = len(teams.connector.sent())
    pick = activity(
        teams.connector.url, value={**show["card"]["actions"][0]["data"], "cadence": "0 9 * * mon"}
    )
    pick["localTimezone"] = "Europe/Berlin"
    assert (await teams.post(pick)).status_code == 202
    for _ in range(400):  # the job asks Create / Cancel, then waits for the click
        asked = [m for m in teams.connector.sent()[before:] if "Create this schedule?" in json.dumps(m)]
        if asked:
            break
        await asyncio.sleep(0.05)
    [question] = asked
    summary = question["summary"]
    assert not question.get("text") and summary.startswith("Create this schedule?") and len(summary) <= 150
    cancel = next(a for a in adaptive([question])[0]["actions"] if a["title"] == "Cancel")
    await teams.say("", value=cancel["data"])
    await teams.state.runner.drain(timeout=60)


@pytest.mark.parametrize(
    "moment,with_time,expected",
    [
        (
            datetime(2026, 12, 7, 17, 48, 5, 123456, UTC),
            True,
            "{{DATE(2026-12-07T17:48:05Z, SHORT)}} {{TIME(2026-12-07T17:48:05Z)}}",
        ),
        (
            datetime(2026, 12, 8, 1, 0, tzinfo=timezone(timedelta(hours=9))),
            False,
            "{{DATE(2026-12-07T16:00:00Z, SHORT)}}",
        ),
    ],
    ids=["UTC, whole seconds", "another zone, date only"],
)
def test_local_time_writes_what_the_card_functions_take(moment, with_time, expected):
    """RFC 3339 in whole seconds with a Z, upper-case, no spaces inside the braces: anything else shows
    raw in the card."""
    from bot.teams_words import local_time
    from core.receipt import AsOf

    assert local_time(AsOf(moment, "words", with_time)) == expected
