"""Teams' Stop button on a streamed answer (personal chat), end to end: real app, real botbuilder
client, the fake Bot Connector answering as Teams does once the person pressed Stop — every later
streaming update and the stream's end refused 403 ContentStreamNotAllowed "Content stream was
cancelled by user." — or once a stream ran past Teams' two minutes ("… exceeded streaming time.")."""

from __future__ import annotations

import json
import time

from core.turn_end import STOPPED
from tests.bot.teams_harness import CHAT
from tests.fakes.anthropic_api import text, tool

WRITTEN = " ".join(f"Carrier number {i} had more delays than the one before it." for i in range(1, 9))


def refusal(message: str) -> tuple:
    return (403, {}, json.dumps({"error": {"code": "ContentStreamNotAllowed", "message": message}}).encode())


STOP = refusal("Content stream was cancelled by user.")
TIME_LIMIT = refusal("Content stream finished due to exceeded streaming time.")


def stream_info(body: dict) -> dict:
    return next((e for e in body.get("entities") or [] if e.get("type") == "streaminfo"), {})


def three_calls() -> list[dict]:
    return [
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM flights"}, say=WRITTEN),
        tool("query_warehouse", {"sql": "SELECT count(*) AS n FROM airlines"}, say="And more. " + WRITTEN),
        text("Final: " + WRITTEN),
    ]


def last_card_words(teams) -> str:
    body = teams.connector.updates()[-1].body
    return json.dumps(body["attachments"][0]["content"]["body"][0]["text"], ensure_ascii=False)


async def saved_error(teams) -> str:
    [record] = await teams.state.analyst.store.list_turns()
    return json.dumps(record)


async def test_stop_while_the_answer_streams_stops_the_turn_and_posts_nothing_more(teams, fake_model):
    """Measured before: Stop at 2.2 s, the turn ran on to 13 s and 3 model calls, and its final message,
    refused, was sent again as a new one, so the whole answer appeared anyway. Now the turn stops
    before its next model call (here before the first call's step runs), saved as stopped; nothing is
    posted after the Stop but the progress card saying so."""
    fake_model.token_delay_s = 0.04  # ~100 tokens a call: several updates, Stop at the second
    fake_model.enqueue(*three_calls())
    pressed = []

    def stop_at_the_second_update(method: str, body: dict) -> tuple | None:
        info = stream_info(body)
        if info and (pressed or (info.get("streamSequence") or 0) >= 2):
            pressed.append(info.get("streamType"))
            return STOP
        return None

    teams.connector.refuse_when = stop_at_the_second_update
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert pressed and len(fake_model.requests) == 1  # of three
    assert not [m for m in sent if m["type"] == "message" and m.get("text")], sent  # nothing re-sent
    assert "you pressed Stop" in last_card_words(teams)
    assert STOPPED in await saved_error(teams)


async def test_stop_pressed_while_a_step_runs_is_heard_before_the_next_model_call(
    teams, fake_model, monkeypatch
):
    """Teams says a Stop only by refusing the next streaming update, and none goes out while a step
    runs: a Stop pressed then was heard only once the next model call streamed — paid for. Now the text
    so far goes out once more before each call, and the turn stops there."""
    from bot import teams_progress

    monkeypatch.setattr(teams_progress, "PROGRESS_MIN_INTERVAL_S", 0.0)  # the step shows on the card
    fake_model.enqueue(*three_calls())
    step_running = []

    def stop_once_the_step_runs(method: str, body: dict) -> tuple | None:
        if method == "PUT" and "⏳" in json.dumps(body, ensure_ascii=False):
            step_running.append(True)
        return STOP if step_running and stream_info(body) else None

    teams.connector.refuse_when = stop_once_the_step_runs
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert step_running and len(fake_model.requests) == 1  # of three
    assert not [m for m in sent if m["type"] == "message" and m.get("text")], sent
    assert STOPPED in await saved_error(teams)


async def test_stop_pressed_after_the_last_update_sends_no_answer_again(teams, fake_model):
    """The answer was written whole and only its closing message is refused as stopped: it is not sent
    again as a new message (the person asked for no more), and the card says they stopped it."""
    fake_model.token_delay_s = 0.04
    fake_model.enqueue(text(WRITTEN))
    teams.connector.refuse_when = lambda method, body: (
        STOP if stream_info(body).get("streamType") == "final" else None
    )
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert any(stream_info(m).get("streamType") == "streaming" for m in sent)  # it did stream
    assert not [m for m in sent if m["type"] == "message" and m.get("text")], sent
    assert "you pressed Stop" in last_card_words(teams)


async def test_teams_time_limit_on_a_stream_is_no_stop(teams, fake_model):
    """Teams ends every stream after two minutes with the same code and another message: the turn goes
    on without streaming, all its model calls run, and the answer arrives whole as a message."""
    fake_model.token_delay_s = 0.04
    fake_model.enqueue(*three_calls())

    def time_limit_at_the_second_update(method: str, body: dict) -> tuple | None:
        info = stream_info(body)
        return (
            TIME_LIMIT
            if (info.get("streamSequence") or 0) >= 2 or info.get("streamType") == "final"
            else None
        )

    teams.connector.refuse_when = time_limit_at_the_second_update
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert len(fake_model.requests) == 3
    answer = sent[-1]
    assert answer["type"] == "message" and answer["text"].startswith("Final: ") and not stream_info(answer)
    assert "Stopped" not in last_card_words(teams)


async def test_stop_while_the_final_answer_streams_ends_the_call_and_keeps_only_what_was_shown(
    teams, fake_model
):
    """Measured before: Stop at 2.09 s during the answer's own model call, the call ran on to its end
    (7.52 s) and the turn was saved as answered with the whole answer, while the card said "Stopped": a
    follow-up saw an answer the person never read. Now the call ends at the refused update, the turn is
    saved as stopped, and its history keeps only the text the person saw."""
    fake_model.token_delay_s = 0.04  # ~200 tokens: 8 s of answer, Stop at the second update (~2 s)
    whole = f"Final: {WRITTEN} {WRITTEN} Nobody read this far."
    fake_model.enqueue(text(whole))
    shown: list[str] = []

    def stop_at_the_second_update(method: str, body: dict) -> tuple | None:
        info = stream_info(body)
        if info and (shown or (info.get("streamSequence") or 0) >= 2):
            return STOP
        if info:
            shown.append(body.get("text") or "")
        return None

    teams.connector.refuse_when = stop_at_the_second_update
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert fake_model.stream_times[0]["done"] is None  # the turn ended before the reply did
    assert not [m for m in sent if m["type"] == "message" and m.get("text")], sent
    assert "you pressed Stop" in last_card_words(teams)
    [record] = await teams.state.analyst.store.list_turns()
    assert record["error"] == STOPPED and not record["ok"]
    seen = record["answer"]
    assert seen and whole.startswith(seen) and len(seen) < len(whole) / 2 and seen in shown[0]
    history = await teams.state.analyst.store.load_history(record["session_id"])
    said = json.dumps(history[-1])
    assert history[-1]["role"] == "assistant" and seen in said and STOPPED in said
    assert "Nobody read this far" not in said + json.dumps(record)


async def test_the_update_before_a_model_call_keeps_to_the_one_second_throttle(teams, fake_model):
    """Measured before: after a fast step, the update that goes out before the next model call (to
    hear a Stop) went out at once, well within a second of the last one; a 429 on either ends
    streaming, and hearing Stop, for the rest of the turn. Now it waits out the throttle first."""
    fake_model.token_delay_s = 0.012  # the first call's text: ~1.1 s, its one update near its end
    fake_model.enqueue(
        tool("query_warehouse", {"sql": "SELECT 1 AS n"}, say=WRITTEN), text("Final: " + WRITTEN)
    )
    at: list[float] = []

    def timed(method: str, body: dict) -> None:
        if stream_info(body).get("streamType") == "streaming":
            at.append(time.monotonic())

    teams.connector.refuse_when = timed
    sent = await teams.say("which carriers were most delayed?", conversation=CHAT)
    assert sent[-1]["text"].startswith("Final: ")
    gaps = [round(later - earlier, 2) for earlier, later in zip(at, at[1:], strict=False)]
    assert len(at) >= 3 and min(gaps) >= 0.95, gaps
