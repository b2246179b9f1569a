"""Replies to card clicks in Teams, end to end (real app, real botbuilder client, the fake Bot
Connector refusing what the real one refuses): each arrives within what one message may carry, and
one that Teams does not take is said in a sentence, not only logged."""

from __future__ import annotations

import json

from tests.bot.teams_harness import THREAD
from tests.fakes.anthropic_api import text, tool


def long_sql(i: int) -> str:
    """A real query of about 2.5 KB (a long IN list): a turn's worth of them is over 28 KB."""
    carriers = ", ".join(f"'Q{i:02d}{n:04d}'" for n in range(260))
    return f"SELECT count(*) AS n_{i} FROM flights WHERE carrier NOT IN ({carriers})"


async def test_show_sql_and_code_of_a_large_turn_arrives_in_several_messages(teams, fake_model):
    """Twelve steps of 2.5 KB SQL are one 30 KB message: the Bot Connector refused it (413) and the
    click did nothing but a log line. Now the steps come split like a long answer, every query whole."""
    queries = [long_sql(i) for i in range(12)]
    assert len(json.dumps("\n".join(queries))) > 28_000
    fake_model.enqueue(  # two messages of six (a message runs at most 8 calls)
        *(
            tool(
                "query_warehouse", {"sql": half[0]}, more=[("query_warehouse", {"sql": q}) for q in half[1:]]
            )
            for half in (queries[:6], queries[6:])
        ),
        text("All twelve counts are 336776."),
    )
    answer = (await teams.say("count flights twelve ways", conversation=THREAD))[-1]
    card = next(a["content"] for a in answer["attachments"] if "adaptive" in a["contentType"])
    show = next(a["data"] for a in card["actions"] if a["title"] == "Show SQL & code")
    steps = [m for m in await teams.say("", value=show) if m.get("text")]
    assert len(steps) >= 2 and all(len(json.dumps(m)) <= teams.connector.max_body_bytes for m in steps)
    shown = "\n".join(m["text"] for m in steps)
    assert all(q in shown for q in queries)
    assert all(m["text"].count("```") % 2 == 0 for m in steps)  # no code block cut open


async def test_a_reply_teams_refuses_is_said_in_one_sentence(teams, fake_model):
    """A reply to a click that Teams refuses (here HTTP 500 for the steps) was only logged; the person
    clicked and saw nothing. Now a short sentence says the reply did not arrive."""
    fake_model.enqueue(tool("query_warehouse", {"sql": "SELECT 1 AS one"}), text("One."))
    answer = (await teams.say("one?", conversation=THREAD))[-1]
    card = next(a["content"] for a in answer["attachments"] if "adaptive" in a["contentType"])
    show = next(a["data"] for a in card["actions"] if a["title"] == "Show SQL & code")
    teams.connector.refuse_when = lambda method, body: (
        (500, {}) if "```sql" in (body.get("text") or "") else None
    )
    sent = await teams.say("", value=show)
    assert [m["text"] for m in sent] == ["I couldn't send my reply here (Teams refused it, HTTP 500)."]


def five_steps_then_an_answer() -> list:
    return [tool("query_warehouse", {"sql": f"SELECT {i} AS step"}) for i in range(5)] + [text("Done.")]


async def test_a_turn_where_the_bot_was_removed_stops_before_paying_for_the_model(teams, fake_model):
    """Every Bot Connector call answered 403 (the bot was removed from the team) and the turn still
    made all its model calls and steps for an answer nobody could see. Now it stops at the first."""
    teams.connector.refuse_status = 403
    fake_model.enqueue(*five_steps_then_an_answer())
    assert await teams.say("how many flights?", conversation=THREAD) == []
    assert len(fake_model.requests) == 0


async def test_a_bot_removed_mid_turn_stops_at_its_next_model_call(teams, fake_model, monkeypatch):
    """Removed while the turn runs: the first refused progress edit (404, ConversationNotFound) stops
    the turn before its next model call; the steps after it never run."""
    from bot import teams_progress

    monkeypatch.setattr(teams_progress, "PROGRESS_MIN_INTERVAL_S", 0.0)  # every step edits the card

    def removed_at_the_first_edit(method: str, body: dict) -> None:
        if method == "PUT":
            teams.connector.refuse_status = 404

    teams.connector.refuse_when = removed_at_the_first_edit
    fake_model.enqueue(*five_steps_then_an_answer())
    await teams.say("how many flights?", conversation=THREAD)
    assert 1 <= len(fake_model.requests) <= 2  # of six
    [record] = await teams.state.analyst.store.list_turns()
    assert "Teams refuses my messages in this conversation" in json.dumps(record)
