"""Teams end to end: real-shaped Bot Framework activities POSTed to `/api/messages` of the real app,
the real botframework-connector client talking to a fake Bot Connector on loopback, the scripted
model, real DuckDB, sandbox processes and files."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.parse

import pytest

from tests.bot.teams_harness import ADA, BOT, CHAT, THREAD, activity, consent_invoke, serve_teams
from tests.fakes.anthropic_api import error, text, tool
from tests.fakes.stalled_store import StalledStore

DELAYS = (
    "SELECT carrier, avg(dep_delay) AS avg_delay, count(*) AS n FROM flights "
    "GROUP BY carrier ORDER BY avg_delay DESC"
)
CHART = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.read_parquet('delays.parquet')
df.plot.bar(x='carrier', y='avg_delay'); plt.savefig('delays.png')
df.to_csv('delays.csv', index=False)
"""


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def cards(sent: list[dict]) -> list[dict]:
    return [a["content"] for m in sent for a in m.get("attachments") or [] if "adaptive" in a["contentType"]]


def local_path(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.path}?{parts.query}"


async def test_channel_thread_chart_csv_link_answer_and_follow_up(teams, fake_model, settings):
    fake_model.enqueue(
        tool("query_warehouse", {"sql": DELAYS, "save_as": "delays"}),
        tool("run_python", {"code": CHART}),
        tool(
            "attach_file",
            {"path": "delays.png", "title": "Delays"},
            more=[("attach_file", {"path": "delays.csv"})],
        ),
        text(
            "## Delays\n**F9** was the most delayed.\n\n| carrier | avg |\n|---|---|\n| F9 | 20.2 |\n| EV | 19.9 |"
        ),
    )
    sent = await teams.say("which carriers were most delayed? chart it")
    assert sent[0]["type"] == "typing"
    assert all(m["conversation"]["id"] == THREAD for m in sent)  # replies stay in the thread
    # progress: one card posted, then updated in place to its final state
    progress_id = teams.connector.id_of(sent[1])
    assert "Working on it" in dumps(cards(sent[1:2]))
    final = teams.connector.updates()[-1]
    assert final.activity_id == progress_id and "Done — 4 steps" in dumps(final.body)
    assert dumps(final.body).count("✅") == 4
    # the chart inline as an image attachment
    chart_msg = next(
        m for m in sent if any(a["contentType"] == "image/png" for a in m.get("attachments") or [])
    )
    image = chart_msg["attachments"][0]
    assert base64.b64decode(image["contentUrl"].split(",", 1)[1])[:4] == b"\x89PNG"
    # the CSV as an expiring signed link that downloads the real file
    link_msg = next(m for m in sent if "download link" in (m.get("text") or ""))
    url = re.search(r"\((http[^)]+)\)", link_msg["text"]).group(1)
    assert url.startswith(settings.public_url + "/files/")
    got = await teams.client.get(local_path(url))
    session_dir = next(settings.workspaces_dir.iterdir())
    assert got.status_code == 200 and got.content == (session_dir / "delays.csv").read_bytes()
    assert got.content.decode().splitlines()[1].startswith("F9,")
    tampered = local_path(url).replace("delays.csv", "delays.png")
    assert (await teams.client.get(tampered)).status_code == 403
    signer = await teams.state.links.signer()
    real_clock, signer.clock = signer.clock, lambda: time.time() + 121
    assert (await teams.client.get(local_path(url))).status_code == 410
    signer.clock = real_clock
    # the answer: Teams Markdown + the table as an Adaptive Card table + actions; its files after it
    answer = next(m for m in sent if "**Delays**" in (m.get("text") or ""))
    assert sent.index(answer) < sent.index(chart_msg) < sent.index(link_msg) == len(sent) - 1
    assert (
        answer["textFormat"] == "markdown" and "**Delays**" in answer["text"] and "|---" not in answer["text"]
    )
    card = cards([answer])[0]
    assert card["body"][0]["type"] == "Table" and len(card["body"][0]["rows"]) == 3
    receipt = card["body"][-1]  # what the answer stands on, under its tables
    assert receipt["isSubtle"] and receipt["text"].startswith("flights · 16 rows · data as of ")
    # 20.2 is F9's 20.2155 rounded; EV's 19.955 rounds to 20.0, so the scripted "19.9" is marked
    assert receipt["text"].endswith("⚠ not from any query in this turn: 19.9")
    actions = {a["title"]: a.get("data") or a.get("card") for a in card["actions"]}
    assert set(actions) == {"Show SQL & code", "👍 Helpful", "👎 Not helpful", "Export notebook", "Schedule…"}
    turn_id = actions["👍 Helpful"]["turn_id"]

    # the mention was stripped from the question the model saw
    assert (
        fake_model.requests[0]["messages"][0]["content"][0]["text"]
        == "which carriers were most delayed? chart it"
    )
    # a follow-up in the same thread sees the earlier turn
    fake_model.enqueue(text("Only F9, EV and YV."))
    follow = await teams.say("only the top 3")
    history = dumps(fake_model.requests[-1]["messages"])
    assert "which carriers were most delayed" in history and "F9** was the most delayed" in history
    assert follow[-1]["text"].startswith("Only F9")

    # card actions: Show SQL & code, feedback
    steps = await teams.say("", value=actions["Show SQL & code"])
    assert "```sql" in steps[-1]["text"] and "GROUP BY carrier" in steps[-1]["text"]
    assert (
        "**1. Querying the warehouse** ✓ " in steps[-1]["text"] and "query_warehouse" not in steps[-1]["text"]
    )
    await teams.say("", value=actions["👍 Helpful"])
    record = await teams.state.analyst.store.get_turn(turn_id)
    assert record["feedback"] and "up" in dumps(record["feedback"])
    exported = await teams.say("", value=actions["Export notebook"])
    url = re.search(r"\((http[^)]+)\)", exported[-1]["text"]).group(1)
    notebook = json.loads((await teams.client.get(local_path(url))).content)
    assert "GROUP BY carrier" in dumps(notebook["cells"])


async def test_the_bot_says_hello_when_added_and_ignores_other_member_changes(teams, fake_model):
    added = activity(teams.connector.url, conversation=CHAT)
    added.update(type="conversationUpdate", membersAdded=[BOT])
    before = len(teams.connector.sent())
    assert (await teams.post(added)).status_code == 202
    await teams.state.runner.drain(timeout=30)
    welcome = teams.connector.sent()[before:]
    assert len(welcome) == 1 and "I'm **datathread**" in welcome[0]["text"]
    someone = activity(teams.connector.url, conversation=CHAT)
    someone.update(type="conversationUpdate", membersAdded=[ADA])
    assert (await teams.post(someone)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert len(teams.connector.sent()) == before + 1 and not fake_model.requests


async def test_personal_chat_reset_csv_consent_and_failure(teams, fake_model, settings):
    from botbuilder.schema import Activity

    from bot.teams_jobs import thread_key

    fake_model.enqueue(text("Hello from the first session."))
    await teams.say("hi there", conversation=CHAT)
    reply = await teams.say("reset", conversation=CHAT)
    assert "fresh conversation" in reply[-1]["text"]
    fake_model.enqueue(
        tool("run_sql", {"sql": "SELECT 42 AS answer, '=1+2' AS formula", "save_as": "answer"}),
        tool(
            "run_python",
            {
                "code": "import pandas as pd; pd.read_parquet('answer.parquet').to_csv('answer.csv', index=False)"
            },
        ),
        tool("attach_file", {"path": "answer.csv"}),
        text("Attached."),
    )
    sent = await teams.say("give me a csv", conversation=CHAT)
    assert len(fake_model.requests[-4]["messages"]) == 1  # reset: the old turn is not in the history
    # personal chat: the CSV comes as a file-consent card; accepting uploads the real bytes
    consent = next(a for m in sent for a in m.get("attachments") or [] if "file.consent" in a["contentType"])
    invoke = consent_invoke(
        teams.connector.url,
        consent["content"]["acceptContext"],
        "answer.csv",
        contentUrl="https://onedrive/answer.csv",
        uniqueId="u1",
        fileType="csv",
    )
    response = await teams.post(invoke)
    assert response.status_code == 200
    await teams.state.runner.drain(timeout=30)
    uploaded = teams.connector.uploads["answer.csv"]
    assert uploaded.decode().splitlines() == ["answer,formula", "42,'=1+2"]  # the formula cell made inert
    assert consent["content"]["sizeInBytes"] == len(uploaded)  # the card declared what was uploaded
    assert "file.info" in teams.connector.sent()[-1]["attachments"][0]["contentType"]
    # the card stays clickable: a second Accept of the same offer uploads nothing more
    teams.connector.uploads.clear()
    again = {**invoke, "id": f"{invoke['id']}-again"}
    assert (await teams.post(again)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert not teams.connector.uploads
    assert (
        teams.connector.sent()[-1]["text"]
        == "I've already uploaded answer.csv to your OneDrive for that offer."
    )
    # an accept whose context is not the one we sent (not even an object): an expired offer, not a
    # traceback in the log and silence in the chat
    stray = {**invoke, "id": f"{invoke['id']}-2", "value": {**invoke["value"], "context": "notadict"}}
    assert (await teams.post(stray)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert teams.connector.sent()[-1]["text"].startswith("That file offer has expired")
    # OneDrive out of reach (another offer of the file): a sentence and a new offer in the chat, not
    # silence and a traceback in the log; accepting the new offer uploads the file
    unreachable = {
        **invoke["value"],
        "context": {**consent["content"]["acceptContext"], "offer": "second"},
        "uploadInfo": {**invoke["value"]["uploadInfo"], "uploadUrl": "http://127.0.0.1:9/u"},
    }
    assert (await teams.post({**invoke, "id": f"{invoke['id']}-3", "value": unreachable})).status_code == 200
    await teams.state.runner.drain(timeout=30)
    retry = teams.connector.sent()[-1]
    assert retry["text"] == "I couldn't upload answer.csv to your OneDrive; accept this one to try again."
    # the failed card clicked again: not "already uploaded", which it was not
    assert (await teams.post({**invoke, "id": f"{invoke['id']}-3b", "value": unreachable})).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert teams.connector.sent()[-1]["text"] == (
        "That offer of answer.csv was already used: accept a newer card if I sent one, or ask again."
    )
    offer = retry["attachments"][0]["content"]
    assert offer["sizeInBytes"] == len(uploaded) and offer["acceptContext"]["offer"] not in ("second", "")
    retried = {**invoke["value"], "context": offer["acceptContext"]}
    assert (await teams.post({**invoke, "id": f"{invoke['id']}-5", "value": retried})).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert teams.connector.uploads["answer.csv"] == uploaded
    # a decline whose context is not ours names no empty file
    declined = {**invoke, "id": f"{invoke['id']}-4", "value": {"type": "fileUpload", "action": "decline"}}
    assert (await teams.post(declined)).status_code == 200
    await teams.state.runner.drain(timeout=30)
    assert teams.connector.sent()[-1]["text"] == "OK, I won't upload the file."
    # a failing turn: a short sentence with an error id, never a traceback
    fake_model.enqueue(error(400, "invalid_request_error", "bad request"))
    failed = await teams.say("this will fail", conversation=CHAT)
    assert failed[-1]["text"].startswith("⚠️ ") and "error id" in failed[-1]["text"]
    assert "Traceback" not in failed[-1]["text"]
    # eight idle hours later the chat starts a fresh session by itself
    chat = Activity().deserialize(activity(teams.connector.url, "x", conversation=CHAT))
    now_key = await thread_key(teams.state.threads, chat)
    assert await thread_key(teams.state.threads, chat, now=time.time() + 9 * 3600) != now_key


async def test_model_and_step_text_stay_inert_in_teams_messages(teams, fake_model):
    """Markup in the model's answer or a step's error never becomes a mention or a tag in a message."""
    hostile = "<at>Everyone</at> <!here> <b>x</b>"
    fake_model.enqueue(
        tool("run_python", {"code": f"raise ValueError({hostile!r})"}),
        text(f"Done {hostile} and a < b"),
    )
    sent = await teams.say("is this safe?")
    texts = [m.get("text") or "" for m in sent]
    assert not any(t for t in texts if "<at>" in t or "<!here>" in t or "<b>" in t), texts
    assert "&lt;at&gt;Everyone&lt;/at&gt;" in texts[-1] and "a &lt; b" in texts[-1]
    record = (await teams.state.analyst.store.list_turns())[-1]
    steps = await teams.say("", value={"datathread": "show_steps", "turn_id": record["turn_id"]})
    outside_code = re.sub(r"```.*?```", "", steps[-1]["text"], flags=re.S)  # code is shown as written
    assert "<at>" not in outside_code and "&lt;at&gt;" in outside_code


async def test_schedule_on_an_answer_card_creates_after_create_and_not_in_personal_chat(teams, fake_model):
    """ "Schedule…" on a channel answer: the question and its SQL, on the picked cadence, in the clicker's
    time zone, in this channel — created only after Create. A personal chat's answer has no such action."""
    import asyncio

    from core.schedules import ANSWER_CADENCES
    from core.schedules_store import ScheduleBook

    fake_model.enqueue(tool("query_warehouse", {"sql": DELAYS}), text("F9 was the most delayed."))
    card = cards((await teams.say("delays by carrier"))[-1:])[0]
    show = next(a for a in card["actions"] if a["type"] == "Action.ShowCard")
    picker = show["card"]["body"][0]
    assert show["title"] == "Schedule…" and picker["type"] == "Input.ChoiceSet"
    assert [(c["title"], c["value"]) for c in picker["choices"]] == list(ANSWER_CADENCES)

    book = ScheduleBook(teams.state.analyst.store)
    before = len(teams.connector.sent())
    pick = activity(
        teams.connector.url, value={**show["card"]["actions"][0]["data"], "cadence": "0 9 * * mon"}
    )
    pick["localTimezone"] = "Europe/Berlin"
    assert (await teams.post(pick)).status_code == 202
    for _ in range(400):  # the job asks Create / Cancel, then waits for the click
        asked = [c for c in cards(teams.connector.sent()[before:]) if "Create this schedule?" in dumps(c)]
        if asked:
            break
        await asyncio.sleep(0.05)
    assert asked and "`0 9 * * mon` (Europe/Berlin)" in dumps(asked[0]) and await book.list() == []
    create = next(a for a in asked[0]["actions"] if a["title"] == "Create")
    await teams.say("", value=create["data"])
    await teams.state.runner.drain(timeout=60)
    [s] = await book.list()
    assert (s.surface, s.cron, s.tz, s.channel, s.question, s.sql, s.service_url) == (
        "teams",
        "0 9 * * mon",
        "Europe/Berlin",
        "19:general@thread.tacv2",
        "delays by carrier",
        DELAYS,
        teams.connector.url,
    )
    said = [m.get("text") or "" for m in teams.connector.sent()[before:]]
    assert any(f"Created schedule {s.id}" in t for t in said)
    assert "Creating it." in said and "Running it." not in said  # a schedule is created, not run

    fake_model.enqueue(text("Sixteen."))
    personal = cards((await teams.say("how many airlines?", conversation=CHAT))[-1:])[0]
    assert not [a for a in personal["actions"] if a["type"] == "Action.ShowCard"]


async def test_healthz_reports_the_sandbox_protections(teams):
    """What the running bot's sandbox enforces, for whoever runs it (the same rows as `doctor`)."""
    health = (await teams.client.get("/healthz")).json()
    assert health["ok"] is True
    assert set(health["sandbox"]) >= {"back end", "network", "filesystem", "result channel"}
    assert all(state.startswith(("on", "OFF")) for state in health["sandbox"].values()), health


async def test_healthz_tells_anyone_which_protections_are_on_but_not_the_hosts_paths(teams):
    """/healthz needs no credentials: each row's state, not its description (which names host paths
    such as the masked secret files); the details stay in `doctor` and the start log."""
    health = (await teams.client.get("/healthz")).json()
    assert set(health["sandbox"].values()) <= {"on", "OFF"}, health
    assert "/" not in json.dumps(health), health
    details = teams.state.analyst.protections()  # what `doctor` and the start log show
    assert set(details) == set(health["sandbox"])
    assert all(
        health["sandbox"][name].lower() == detail.split(" ")[0].lower() for name, detail in details.items()
    )


STREAMED = " ".join(f"Carrier number {i} had more delays than the one before it." for i in range(1, 9))


def stream_info(message: dict) -> dict:
    return next((e for e in message.get("entities") or [] if e.get("type") == "streaminfo"), {})


async def test_personal_chat_streams_the_answer_as_claude_writes_it(teams, fake_model, monkeypatch):
    """Teams' streaming protocol in a one-on-one chat: typing activities with a `streaminfo` entity,
    sequence 1, 2, … under the first one's id, each holding all the text so far, at most about one
    a second; the answer message with its card closes the stream as `final`. The text so far is
    escaped only when an update may go: escaped for every token, the work grew with the square of
    the answer's length, on the serving event loop."""
    from bot import teams_progress
    from bot.teams_progress import PROGRESS_MIN_INTERVAL_S

    escaped = []
    inert = teams_progress.render.inert
    monkeypatch.setattr(teams_progress.render, "inert", lambda text_: escaped.append(1) or inert(text_))

    fake_model.token_delay_s = 0.04  # ~100 tokens: about 4 s of writing
    fake_model.enqueue(text(STREAMED))
    started = time.monotonic()
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    elapsed = time.monotonic() - started
    updates = [m for m in sent if m["type"] == "typing" and stream_info(m)]
    assert len(updates) >= 2, sent
    infos = [stream_info(m) for m in updates]
    assert [i["streamType"] for i in infos] == ["streaming"] * len(updates)
    assert [i["streamSequence"] for i in infos] == list(range(1, len(updates) + 1))
    stream_id = teams.connector.id_of(updates[0])
    assert "streamId" not in infos[0] and all(i["streamId"] == stream_id for i in infos[1:])
    texts = [m["text"] for m in updates]
    for earlier, later in zip(texts, texts[1:], strict=False):
        assert later.startswith(earlier) and len(later) > len(earlier)  # in order, only growing
    assert STREAMED.startswith(texts[-1])
    assert len(updates) <= elapsed / PROGRESS_MIN_INTERVAL_S + 1  # throttled, not one per token
    assert len(escaped) <= 2 * len(updates) + 10, (len(escaped), len(updates))  # ~100 tokens
    final = sent[-1]
    assert final["type"] == "message" and final["text"] == STREAMED  # complete
    assert stream_info(final) == {"type": "streaminfo", "streamId": stream_id, "streamType": "final"}
    assert cards([final])[0]["actions"]  # the answer card as before


async def test_a_long_personal_answer_stays_within_what_the_connector_accepts(teams, fake_model):
    """An answer longer than one Teams message: every streaming update stays within the cap (the stream
    stops growing there), and the answer arrives whole in several messages cut between paragraphs —
    the first closes the stream, the answer card rides on the last."""
    from bot.teams_render import MAX_MESSAGE_BYTES

    paragraphs = [f"P{i:02d} " + "z" * 995 for i in range(40)]  # 40 KB: twice what one message may hold
    fake_model.token_delay_s = 0.08  # a paragraph a token: ~3 s of writing, so several updates
    fake_model.enqueue(text("\n\n".join(paragraphs)))
    sent = await teams.say("describe every carrier at length", conversation=CHAT)
    updates = [m for m in sent if m["type"] == "typing" and stream_info(m)]
    sizes = [len(m["text"].encode()) for m in updates]
    assert len(updates) >= 2 and max(sizes) <= MAX_MESSAGE_BYTES, sizes
    assert max(sizes) > MAX_MESSAGE_BYTES // 2  # the stream did reach the cap
    messages = [m for m in sent if m["type"] == "message" and m.get("text")]  # not the progress card
    assert len(messages) >= 2 and all(len(m["text"].encode()) <= MAX_MESSAGE_BYTES for m in messages)
    assert stream_info(messages[0])["streamType"] == "final"
    assert "\n\n".join(m["text"] for m in messages) == "\n\n".join(paragraphs)  # whole, in order
    assert [bool(cards([m])) for m in messages] == [False] * (len(messages) - 1) + [True]


@pytest.mark.parametrize("conversation", ["chat", "thread"])
async def test_an_answer_in_japanese_arrives_whole_in_messages_the_connector_accepts(
    teams, fake_model, conversation
):
    """The size of a message was counted in UTF-8 bytes, but the connector client sends JSON with ASCII
    escapes ("東" is 6 bytes, not 3): a 15 KB answer in Japanese went out at 30 KB, the Bot Connector
    refused it (413) and the person got no answer; in a channel the progress card's edits grew past
    the cap too. Now each message, update and card edit is measured as it is sent."""
    paragraphs = ["東京の遅延は「夕方」に集中しています。" * 40 + f" {i}" for i in range(12)]
    answer = "\n\n".join(paragraphs)
    assert len(answer.encode()) < 28_000 < len(json.dumps(answer))  # fits as UTF-8, not as sent
    fake_model.token_delay_s = 0.02
    fake_model.enqueue(text(answer))
    before = len(teams.connector.updates())
    sent = await teams.say("遅延はいつ多い？", conversation=CHAT if conversation == "chat" else THREAD)
    messages = [m for m in sent if m["type"] == "message" and m.get("text") and "遅延" in m["text"]]
    assert len(messages) >= 2 and "\n\n".join(m["text"] for m in messages) == answer  # whole, in order
    for one in [*sent, *(c.body for c in teams.connector.updates()[before:])]:
        assert len(json.dumps(one)) <= 28_000  # the fake refuses more (413), as the connector does
    assert not [m for m in sent if "did not take" in dumps(m)]
    assert cards([messages[-1]])[0]["actions"]


async def test_an_answer_whose_tables_exceed_one_message_arrives_whole_over_several_cards(teams, fake_model):
    """Two tables of 8 columns and 20 rows of 80-character cells: one card of them is over 40 KB, the
    Bot Connector refused the answer's message (413) and the person got neither its text nor its
    tables. Now the text arrives, each table on a card within a message's size (fewer rows where one
    alone is too large, and a note says how many more), the receipt and actions on the last card."""
    from bot.teams_render import MAX_MESSAGE_BYTES

    def table(name: str) -> str:
        head = "| " + " | ".join(f"{name}{c}" for c in range(8)) + " |\n|" + "---|" * 8
        body = ["| " + " | ".join(f"{r:02d}{c}" + "x" * 77 for c in range(8)) + " |" for r in range(20)]
        return "\n".join([head, *body])

    fake_model.enqueue(text(f"Both tables follow.\n\n{table('a')}\n\n{table('b')}\n\nThat is all."))
    sent = await teams.say("show me both tables", conversation=THREAD)
    answer = [m for m in sent if m["type"] == "message" and "Both tables follow." in (m.get("text") or "")]
    assert answer and "That is all." in answer[0]["text"]
    shown = [c for c in cards(sent) if any(e.get("type") == "Table" for e in c["body"])]
    tables = [e for c in shown for e in c["body"] if e.get("type") == "Table"]
    assert [t["rows"][0]["cells"][0]["items"][0]["text"] for t in tables] == ["a0", "b0"]
    assert all(len(dumps(c).encode()) <= MAX_MESSAGE_BYTES for c in shown)
    notes = [e["text"] for c in shown for e in c["body"] if e.get("text", "").startswith("Not shown")]
    assert len(notes) == 2 and all(n.endswith("more rows.") for n in notes)  # 20 rows do not fit a card
    assert [bool(c.get("actions")) for c in shown] == [False, True]  # the actions close the answer


async def test_channel_answer_streams_onto_the_progress_card(teams, fake_model):
    """Teams streams only in one-on-one chats: in a channel the text so far is shown on the progress
    card, edited in place (throttled); the answer then comes as its own message, as before."""
    from bot.teams_progress import PROGRESS_MIN_INTERVAL_S

    fake_model.token_delay_s = 0.04
    fake_model.enqueue(text(STREAMED))
    before = len(teams.connector.updates())
    started = time.monotonic()
    sent = await teams.say("which carriers were most delayed?")
    elapsed = time.monotonic() - started
    assert not [m for m in sent if stream_info(m)]  # no streaming protocol outside personal chats
    progress_id = teams.connector.id_of(sent[1])
    edits = [c for c in teams.connector.updates()[before:] if c.activity_id == progress_id]
    shown = [
        block["text"]
        for c in edits
        for block in cards([c.body])[0]["body"]
        if block.get("separator") and block["type"] == "TextBlock"
    ]
    assert len(shown) >= 2, edits
    for earlier, later in zip(shown, shown[1:], strict=False):
        assert later.startswith(earlier) and len(later) > len(earlier)
    assert STREAMED.startswith(shown[-1])
    assert len(edits) <= elapsed / PROGRESS_MIN_INTERVAL_S + 2  # throttled (+ the final redraw)
    assert "Carrier number" not in dumps(edits[-1].body)  # the finished card shows the steps only
    assert sent[-1]["text"] == STREAMED and cards([sent[-1]])[0]["actions"]


async def test_an_answer_refused_as_the_streams_end_is_sent_as_a_plain_message(teams, fake_model):
    """Teams ends a stream after two minutes and then refuses the message that would close it; a
    long data turn must still deliver its answer and card, as a new message."""
    fake_model.token_delay_s = 0.04
    fake_model.enqueue(text(STREAMED))
    teams.connector.refuse_stream_end = True
    try:
        sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    finally:
        teams.connector.refuse_stream_end = False
    assert any(m["type"] == "typing" and stream_info(m) for m in sent), sent  # it did stream
    final = sent[-1]
    assert final["type"] == "message" and final["text"] == STREAMED and not stream_info(final)
    assert cards([final])[0]["actions"]


@pytest.mark.parametrize("conversation", [THREAD, CHAT])
async def test_an_answer_its_store_could_not_keep_is_shown_then_why(settings, fake_model, conversation):
    """The state file held by another process as the answer ends: the failure sentence replaced the
    answer, which was never shown, though the person had been given it everywhere else."""
    stalled = StalledStore("sqlite", settings.home)

    def freeze_then_answer(body: dict) -> dict:
        stalled.freeze()
        return text("There were **336,776** flights.")

    fake_model.enqueue(freeze_then_answer)
    try:
        async with serve_teams(settings) as teams:
            sent = await teams.say("how many flights?", conversation=conversation)
    finally:
        stalled.stop()
    said = [m.get("text") or "" for m in sent if m["type"] == "message"]
    answer = next(i for i, t in enumerate(said) if "336,776" in t)
    why = next(i for i, t in enumerate(said) if "may not be kept for follow-ups" in t)
    assert answer <= why, said  # the answer first (or with it), then why it may not be kept


async def test_help_and_welcome_say_to_mention_me_for_follow_ups_in_channels(teams, fake_model):
    """Teams sends a bot only the channel messages that @-mention it: "reply in the thread" led people
    to follow-ups the bot never received. Help and the welcome say to mention it in the thread."""
    added = activity(teams.connector.url)
    added.update(type="conversationUpdate", membersAdded=[BOT])
    assert (await teams.post(added)).status_code == 202
    await teams.state.runner.drain(timeout=30)
    welcome = teams.connector.sent()[-1]["text"]
    shown = (await teams.say("help"))[-1]["text"]
    for said in (welcome, shown):
        assert "reply in the thread" not in said.lower() and "@-mention me" in said
        assert "mention me in the thread" in said or "mention me again in the thread" in said
