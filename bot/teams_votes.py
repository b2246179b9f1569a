"""A vote on a Teams answer, drawn on the answer's own card instead of posted into the conversation.

👍/👎 on an answer card posted the vote's sentence as a new message, for everyone in the channel:
"Thanks! I saved this as a verified query…" once per click, and Bob's 👎 put "Sorry about that. What
was wrong?…" under Ada's answer; the card itself never changed. Teams cannot send the card back with a
click (an Action.Submit carries only its data), and an edit replaces a whole message, text and
cards. So the message that carries the answer's actions is kept as it was sent (`keep_answer_card`: a
store note, what any worker or replica handling the click reads), and a vote redraws that message in
place with one line under the card: the votes so far and the latest one's sentence (`draw_vote`). An
answer whose message is not kept (older than CARD_KEPT_S, or the note refused) or an edit Teams
refuses gets the sentence as a message, as before.
"""

from __future__ import annotations

import contextlib
import json
import logging

from bot import teams_render as render
from bot.teams_connector import ConnectorFailed
from bot.teams_out import TeamsOut
from core.thread import Threads

log = logging.getLogger("datathread.teams")

CARD_KEPT_S = 7 * 86400.0  # votes come within days of an answer; the note is one message (≤ 28 KB)
MARKS = {"up": "👍", "down": "👎"}


def _key(turn_id: str) -> str:
    return f"teams:answer-card:{turn_id}"


def _actions_card(attachments: list[dict] | tuple[dict, ...]) -> dict | None:
    """The attachment that is the answer's actions card (its 👍/👎), or None."""
    for attachment in attachments:
        actions = (attachment.get("content") or {}).get("actions") or []
        if any((a.get("data") or {}).get(render.ACTION_KEY) == "feedback" for a in actions):
            return attachment
    return None


async def keep_answer_card(
    threads: Threads, turn_id: str, activity_id: str, text: str, attachments: tuple[dict, ...]
) -> None:
    """Keep the message just sent when it carries the answer's actions card. Never raises: without
    it, a vote's sentence is posted as a message."""
    if not (activity_id and _actions_card(attachments)):
        return
    message = json.dumps({"id": activity_id, "text": text, "attachments": list(attachments)})
    try:
        await threads.note(_key(turn_id), message, ttl_s=CARD_KEPT_S)
    except Exception as exc:  # the store: the vote is posted instead
        log.warning("teams: could not keep the answer card of turn %s for its votes: %s", turn_id, exc)


async def draw_vote(
    threads: Threads, out: TeamsOut, record: dict, *, voter: str, name: str, vote: str, said: str
) -> bool:
    """Redraw the answer's message with the votes so far (`record`'s, and this one) and `said`, the
    vote's sentence; False when it cannot be, and the caller posts `said`."""
    kept = None
    with contextlib.suppress(Exception):  # the store: posted instead
        kept = await threads.noted(_key(str(record.get("turn_id") or "")))
    if not kept:
        return False
    message = json.loads(kept)
    votes = {**(record.get("feedback") or {}), voter: vote}
    tally = " · ".join(f"{mark} {sum(v == value for v in votes.values())}" for value, mark in MARKS.items())
    line = f"{tally} — {render.inert(name or 'someone')} {MARKS[vote]}: {said}"
    attachments = [dict(a) for a in message["attachments"]]
    card = _actions_card(attachments)
    if card is None:
        return False
    block = {"type": "TextBlock", "text": line, "wrap": True, "size": "Small", "separator": True}
    card["content"] = {**card["content"], "body": [*card["content"].get("body", []), block]}
    try:
        await out.update(message["id"], attachments=attachments, text=message["text"])
    except ConnectorFailed as exc:
        log.warning("teams: could not draw a vote on its answer's card (%s); posting it instead", exc)
        return False
    return True
