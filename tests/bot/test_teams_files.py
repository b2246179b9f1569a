"""A turn's files in Teams, end to end: real charts (matplotlib), the real app and botbuilder client,
the fake Bot Connector refusing what the real one refuses (an activity over 28 KB: 413)."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.parse

import pytest

from bot.teams_files import MAX_INLINE_BYTES
from tests.bot.teams_harness import CHAT, THREAD, consent_invoke, serve_teams
from tests.fakes.anthropic_api import text, tool

SCATTER = """
import numpy as np, matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
rng = np.random.default_rng(7)
plt.figure(figsize=(8, 6)); plt.scatter(rng.normal(size=3000), rng.normal(size=3000), s=4, alpha=0.5)
plt.savefig('scatter.png', dpi=100)
"""
SMALL = """
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
plt.figure(figsize=(2, 1.5)); plt.plot([1, 2, 3]); plt.savefig('small.png', dpi=40)
"""


def local_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.path}?{parts.query}"


def attachments(sent: list[dict]) -> list[dict]:
    return [a for m in sent for a in m.get("attachments") or []]


def chart_script(code: str, name: str, *, small: bool = False) -> list:
    also = [("attach_file", {"path": "small.png"})] if small else []
    return [
        tool("run_python", {"code": code + (SMALL if small else "")}),
        tool("attach_file", {"path": name, "title": "Delays scatter"}, more=also),
        text("The chart below shows the spread."),
    ]


@pytest.mark.parametrize("conversation", [THREAD, CHAT], ids=["channel thread", "personal chat"])
async def test_a_chart_too_large_to_send_inline_comes_as_a_card_from_a_signed_link(
    teams, fake_model, settings, conversation
):
    """A 3,000-point scatter is too large to go inline (41 KB; 24 KB as a palette PNG, core/chart_png.py,
    still over what a message takes as base64): sent as a data URI its message was refused (413) and the
    person read "the chart above" under nothing. Now it comes on a card that shows it from a signed
    link, with a button to open it; the link serves the real PNG. A small chart still comes inline."""
    fake_model.enqueue(*chart_script(SCATTER, "scatter.png", small=True))
    sent = await teams.say("scatter of delays", conversation=conversation)
    session_dir = next(settings.workspaces_dir.iterdir())
    png = (session_dir / "scatter.png").read_bytes()
    assert len(base64.b64encode(png)) > MAX_INLINE_BYTES and png[:4] == b"\x89PNG"
    assert all(len(json.dumps(m)) <= teams.connector.max_body_bytes for m in sent)
    [chart_card] = [a for a in attachments(sent) if "Open chart" in json.dumps(a)]
    chart = chart_card["content"]
    image = next(e for e in chart["body"] if e["type"] == "Image")
    [button] = chart["actions"]
    assert button == {"type": "Action.OpenUrl", "title": "Open chart", "url": image["url"]}
    assert image["url"].startswith(settings.public_url + "/files/")
    got = await teams.client.get(local_path(image["url"]))
    assert got.status_code == 200 and got.content == png and got.headers["content-type"] == "image/png"
    assert "Delays scatter" in json.dumps(chart)
    [inline] = [a for a in attachments(sent) if a["contentType"] == "image/png"]
    small = (session_dir / "small.png").read_bytes()
    assert base64.b64decode(inline["contentUrl"].split(",", 1)[1]) == small
    # the answer first, its charts after it: "below" is true
    [answer] = [m for m in sent if (m.get("text") or "").startswith("The chart below")]
    assert "couldn't attach" not in answer["text"]
    charts = [i for i, m in enumerate(sent) for a in m.get("attachments") or [] if a in (inline, chart_card)]
    assert len(charts) == 2 and min(charts) > sent.index(answer)


ALT = "Scatter of 3,000 delays: a round cloud centred on zero, no trend."
HOSTILE = '<at>everyone</at> "}]} [click](https://evil.example)\x1b[2J\n\u202e' + "padding " * 300


def card_images(sent: list[dict]) -> list[dict]:
    charts = [a["content"] for a in attachments(sent) if "Open chart" in json.dumps(a)]
    return [next(e for e in chart["body"] if e["type"] == "Image") for chart in charts]


def inline_words(sent: list[dict]) -> str:
    [message] = [m for m in sent if any(a["contentType"] == "image/png" for a in m.get("attachments") or [])]
    return message["text"]


async def test_a_charts_alt_text_is_on_its_card_and_in_the_words_of_an_inline_one(teams, fake_model):
    """A screen reader read the card's chart as its title, and an inline chart as nothing but a file
    name. The card's image now carries the model's description as `altText`; an inline image (a Bot
    Framework attachment takes none) comes with it in its message's words, under the title."""
    fake_model.enqueue(
        tool("run_python", {"code": SCATTER + SMALL}),
        tool(
            "attach_file",
            {"path": "scatter.png", "title": "Delays scatter", "alt_text": ALT},
            more=[
                (
                    "attach_file",
                    {"path": "small.png", "title": "Trend", "alt_text": "Line rising from 1 to 3."},
                )
            ],
        ),
        text("The chart shows the spread."),
    )
    sent = await teams.say("scatter of delays", conversation=CHAT)
    assert [image["altText"] for image in card_images(sent)] == [ALT]
    assert inline_words(sent) == "Trend\n\nLine rising from 1 to 3."


async def test_without_alt_text_a_chart_is_described_by_its_title_and_hostile_words_stay_plain(
    teams, fake_model
):
    """Without a description a card's image says "Chart: <title>" and an inline one comes under its
    title alone, as before. A description steered by the data is one plain clipped line: the card's
    JSON holds it as a string, and in a message's words it is no mention, no link, no escape sequence."""
    copy = "open('copy.png', 'wb').write(open('scatter.png', 'rb').read())\n"
    fake_model.enqueue(
        tool("run_python", {"code": SCATTER + SMALL + copy}),
        tool(
            "attach_file",
            {"path": "scatter.png", "title": "Delays scatter"},
            more=[
                ("attach_file", {"path": "copy.png", "title": "Spread", "alt_text": HOSTILE}),
                ("attach_file", {"path": "small.png", "title": "<b>Trend</b>", "alt_text": HOSTILE}),
            ],
        ),
        text("The chart shows the spread."),
    )
    sent = await teams.say("scatter of delays")
    plain, hostile = (image["altText"] for image in card_images(sent))
    assert plain == "Chart: Delays scatter"
    assert hostile.startswith('<at>everyone</at> "}]} [click](https://evil.example)[2J padding')
    assert (
        len(hostile) <= 1000
        and hostile.endswith("padding…")
        and not any(c in hostile for c in "\x1b\n\u202e")
    )
    title, said = inline_words(sent).split("\n\n")
    assert title == "&lt;b&gt;Trend&lt;/b&gt;" and said.endswith("padding…")
    assert said.startswith('&lt;at&gt;everyone&lt;/at&gt; "}]} [click] (https://evil.example)[2J ')
    assert not any(c in said for c in "\x1b\u202e<>")

    fake_model.enqueue(
        tool("run_python", {"code": SMALL}), tool("attach_file", {"path": "small.png"}), text("Here.")
    )
    assert inline_words(await teams.say("just the small one")) == "small.png"


async def test_a_chart_teams_refuses_is_named_in_the_answer(teams, fake_model):
    """Where no way of sending the chart works, the answer says so in one sentence, never silence."""

    def refuse_charts(method: str, body: dict) -> tuple[int, dict] | None:
        return (400, {}) if "Open chart" in json.dumps(body.get("attachments") or []) else None

    teams.connector.refuse_when = refuse_charts
    fake_model.enqueue(*chart_script(SCATTER, "scatter.png"))
    sent = await teams.say("scatter of delays")
    assert sent[-1]["text"].endswith("_I couldn't attach `scatter.png` (Teams refused it, HTTP 400)._")


async def test_an_empty_file_is_not_offered_for_upload_in_personal_chat(teams, fake_model, settings):
    """A 0-byte file was offered, and accepting it sent OneDrive `Content-Range: bytes 0--1/0`, which
    it refuses. Now the answer says it is empty instead of offering it; an older offer of one, accepted,
    gets the same sentence rather than an invalid upload."""

    fake_model.enqueue(
        tool("run_python", {"code": "open('empty.csv', 'w').close()"}),
        tool("attach_file", {"path": "empty.csv"}),
        text("Attached."),
    )
    sent = await teams.say("an empty csv please", conversation=CHAT)
    assert not [a for a in attachments(sent) if "file.consent" in a["contentType"]]
    assert sent[-1]["text"] == (
        "Attached.\n\n_I couldn't attach `empty.csv` (it is empty, so there is nothing to upload)._"
    )
    session_id = next(settings.workspaces_dir.iterdir()).name
    context = await teams.state.links.offer(session_id, "empty.csv")  # as an older card carried it
    assert (await teams.post(consent_invoke(teams.connector.url, context, "empty.csv"))).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert not teams.connector.uploads
    assert teams.connector.sent()[-1]["text"] == "empty.csv is empty, so there is nothing to upload."


async def test_a_files_bucket_that_refuses_a_csv_is_said_and_logged(
    fake_model, settings, monkeypatch, caplog
):
    """Where the files bucket refused a channel's CSV (no such bucket, access denied, no credentials),
    the answer said so and the log said nothing: the refusal passed for a missing file. Now the
    answer says it, and one warning line (no traceback) tells whoever runs datathread."""
    import logging

    import boto3
    from moto import mock_aws

    from tests.bot.teams_harness import serve_teams

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-a-log-line")
    configured = settings.model_copy(update={"files_bucket": "dt-gone/exports", "aws_region": "us-east-1"})
    fake_model.enqueue(
        tool("run_python", {"code": "open('delays.csv', 'w').write('carrier,n\\nF9,3\\n')"}),
        tool("attach_file", {"path": "delays.csv"}),
        text("Attached."),
    )
    with mock_aws(), caplog.at_level(logging.WARNING):
        boto3.client("s3", region_name="us-east-1")  # moto's S3, with no bucket: NoSuchBucket
        async with serve_teams(configured) as teams:
            sent = await teams.say("delays as a csv", conversation=THREAD)
    answer = sent[-1]["text"]
    assert "couldn't attach `delays.csv` (the files bucket could not take it: NoSuchBucket" in answer
    said = [r for r in caplog.records if "no download link for 'delays.csv'" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.exc_info] and "never-in-a-log-line" not in caplog.text


SCATTER_AND_CSV = [
    tool("run_python", {"code": SCATTER + "\nopen('delays.csv', 'w').write('carrier,n\\nF9,3\\n')"}),
    tool("attach_file", {"path": "scatter.png"}, more=[("attach_file", {"path": "delays.csv"})]),
    text("The chart and the CSV are below."),
]


def kinds(sent: list[dict]) -> list[str]:
    """What each message is: the answer, a chart card, a file offer (others left out)."""
    found = []
    for message in sent:
        attached = json.dumps(message.get("attachments") or [])
        if (message.get("text") or "").startswith("The chart and the CSV"):
            found.append("answer")
        elif "Open chart" in attached:
            found.append("chart")
        elif "file.consent" in attached:
            found.append("offer")
    return found


async def test_the_answers_files_come_after_it_and_the_offer_still_uploads(teams, fake_model):
    """The answer said "the chart and CSV are below" and they came before it. Now they follow it, and
    the personal chat's file offer, accepted after the answer, still uploads the file."""
    fake_model.enqueue(*SCATTER_AND_CSV)
    sent = await teams.say("scatter of delays, and a csv", conversation=CHAT)
    assert kinds(sent) == ["answer", "chart", "offer"]
    [offer] = [a["content"] for a in attachments(sent) if "file.consent" in a["contentType"]]
    invoke = consent_invoke(teams.connector.url, offer["acceptContext"], "delays.csv")
    assert (await teams.post(invoke)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert teams.connector.uploads["delays.csv"] == b"carrier,n\nF9,3\n"


async def test_files_still_follow_an_answer_teams_refused_but_not_one_it_left_unanswered(
    teams, fake_model, monkeypatch
):
    """The files wait for the answer now. Where Teams refused the answer (a 429 asking for longer
    than the bot waits, and than the answer may follow in: tests/bot/test_teams_rest.py), they are
    still sent: each is a message Teams may take. Where the Bot Connector did not answer at all, they
    are not: each would wait as long again."""
    from bot import teams_connector

    monkeypatch.setattr(teams_connector, "SEND_TIMEOUT_S", 1.0)
    teams.connector.refuse_when = lambda method, body: (
        (429, {"Retry-After": "600"}) if (body.get("text") or "").startswith("The chart and") else None
    )
    fake_model.enqueue(*SCATTER_AND_CSV)
    sent = await teams.say("scatter of delays, and a csv", conversation=CHAT)
    assert kinds(sent) == ["chart", "offer"]  # the answer refused, its files after it all the same
    not_taken = teams.connector.updates()[-1].body["attachments"][0]["content"]["body"][0]["text"]
    assert not_taken.startswith("⚠️ Teams did not take the answer")

    teams.connector.refuse_when = None
    teams.connector.stall = lambda method, body: 3.0 if "The chart and" in (body.get("text") or "") else 0
    fake_model.enqueue(*SCATTER_AND_CSV)
    before = len(teams.connector.sent())
    await asyncio.wait_for(teams.say("again", conversation=CHAT), 20)
    assert not [k for k in kinds(teams.connector.sent()[before:]) if k != "answer"]


async def test_an_offer_accepted_by_someone_now_refused_uploads_nothing(settings, fake_model):
    """A file offer outlives its answer: accepted after the person lost access (no longer listed in
    DATATHREAD_ALLOWED_USERS, a guest once guests are refused), it still uploaded the warehouse's
    rows to their OneDrive. The accept meets the rules a question does."""
    fake_model.enqueue(*SCATTER_AND_CSV)
    async with serve_teams(settings) as teams:
        sent = await teams.say("scatter of delays, and a csv", conversation=CHAT)
        [offer] = [a["content"] for a in attachments(sent) if "file.consent" in a["contentType"]]
    async with serve_teams(settings.model_copy(update={"allowed_users": "aad-bob"})) as teams:
        before = len(teams.connector.sent())
        invoke = consent_invoke(teams.connector.url, offer["acceptContext"], "delays.csv")
        assert (await teams.post(invoke)).status_code == 200
        await teams.state.runner.drain(timeout=30)
        said = json.dumps(teams.connector.sent()[before:])
        assert "not on the list of people who can use datathread" in said, said
        assert not teams.connector.uploads
