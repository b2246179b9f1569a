"""The rest of an answer that Teams throttled part-way, sent when Teams allows — or said to be lost.

A long answer goes out in several messages (bot/teams_progress.py). When Teams takes the first and
throttles a later one past what the turn waits (a 429 or 503 asking for more than
ANSWER_RETRY_AFTER_MAX_S, bot/teams_connector.py), the person has part of the answer, without its card
(tables, receipt, buttons) or its files. Measured: a 30 KB answer whose second message got `429,
Retry-After: 60` left part 1 posted and the progress card saying "Teams did not take the answer, so
it is not here" — wrong, and the rest was lost.

Now the progress card says what arrived and when the rest follows, and the rest goes to a quick job
(`teams.rest`): it runs after the turn has ended — holding neither the turn's slot nor its
conversation's lock — on any worker or replica, waits each Retry-After within REST_WAIT_MAX_S in all,
sends the remaining messages, then the files, then puts the progress card back to "Done". What does
not arrive by then (or a refusal Teams does not call transient, such as a 413) is said on the card in
one sentence: what is above is only part of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot import teams_render as render
from bot.teams_connector import ConnectorFailed
from bot.teams_files import FileMessage, refusal_words, send_files
from bot.teams_out import TeamsOut
from core.wording import counted

log = logging.getLogger("datathread.teams")

Sent = Callable[[str, str, tuple[dict, ...]], Awaitable[None]]

REST_KIND = "teams.rest"
# How long the rest of an answer may wait for Teams in all: a few minutes. Teams' throttling asks for
# seconds to a minute (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/rate-limit);
# past this the person is better told to ask again than left reading half an answer.
REST_WAIT_MAX_S = 300.0
NO_RETRY_AFTER_S = 5.0  # a transient refusal without a Retry-After: wait this long


class AnswerCut(Exception):
    """A message of an answer was not taken: why, and the messages not sent. `whole`: its first one,
    throttled for a while Teams names — all of it follows (as the rest of a cut answer does), where
    "Teams did not take the answer, so it is not here. Please ask again" lost an answer Teams would
    have taken a minute later."""

    def __init__(
        self, exc: ConnectorFailed, messages: tuple[tuple[str, tuple[dict, ...]], ...], *, whole: bool = False
    ):
        super().__init__(str(exc))
        self.exc, self.messages, self.whole = exc, messages, whole


@dataclass(frozen=True)
class Rest:
    """What has not arrived of an answer: its remaining messages (text, attachments) and its files;
    `whole`: none of it has."""

    messages: tuple[tuple[str, tuple[dict, ...]], ...]
    files: tuple[FileMessage, ...] = ()
    whole: bool = False

    def what(self) -> str:
        """ "the rest of this answer, its card and 2 files", for the sentences below."""
        card = any(attachments for _, attachments in self.messages)
        files = f" and {counted(len(self.files), 'file')}" if self.files else ""
        answer = "this answer" if self.whole else "the rest of this answer"
        return answer + (", with its card" if card else "") + files

    def subject(self) -> str:
        """`what`, before its verb: the aside "with its card" closed by a comma ("…, with its card and
        1 file, follows"); without it the sentence read "…and 1 file follows"."""
        said = self.what()
        return f"{said}," if ", with its card" in said else said

    def to_payload(self) -> dict:
        return {
            "messages": [[text, list(attachments)] for text, attachments in self.messages],
            "files": [[f.name, f.text, list(f.attachments)] for f in self.files],
            "whole": self.whole,
        }

    @classmethod
    def from_payload(cls, payload: dict) -> Rest:
        return cls(
            tuple(
                (str(text), tuple(attachments or ())) for text, attachments in payload.get("messages") or []
            ),
            tuple(
                FileMessage(name, text, tuple(att or ())) for name, text, att in payload.get("files") or []
            ),
            whole=bool(payload.get("whole")),
        )


def wait_s(exc: ConnectorFailed) -> float | None:
    """How long to wait before the rest may go: None when it should not be tried again at all (not a
    refusal Teams calls transient, or it asked for longer than REST_WAIT_MAX_S)."""
    if not exc.transient:
        return None
    wait = NO_RETRY_AFTER_S if exc.retry_after_s is None else exc.retry_after_s
    return wait if wait <= REST_WAIT_MAX_S else None


def waiting_words(rest: Rest, wait: float) -> str:
    return f"⏳ Teams asked me to slow down: {rest.subject()} follows in about {max(1, round(wait))} s."


def lost_words(rest: Rest, exc: ConnectorFailed | None, error_id: str, *, why: str = "") -> str:
    """The sentence on the progress card when the rest of an answer did not arrive (`why`, without a
    refusal: in words)."""
    if exc is not None and exc.unsure:  # no status came back: Teams may have posted it
        return (
            f"⚠️ Teams did not confirm {rest.what()}, so part of it may be missing. If it is, please ask "
            f"again (error id {error_id})."
        )
    why = f" ({refusal_words(exc)})" if exc is not None else f" ({why})" if why else ""
    part = (
        ". Please ask again"
        if rest.whole
        else ": what is above is only part of it. Please ask again to see all of it"
    )
    said = rest.subject()
    return f"⚠️ {said[0].upper()}{said[1:]} did not arrive{why}{part} (error id {error_id})."


def job_payload(
    rest: Rest, *, turn_id: str, wait: float, error_id: str, progress: tuple[str, list[str], str]
) -> dict:
    """A `teams.rest` job's payload but its activity (the conversation's, added by bot/teams_jobs.py).
    `progress`: the turn's progress card — its id, its step lines, and its status once all has arrived
    ("Done — …") — redrawn when the rest has arrived or is lost."""
    progress_id, lines, done = progress
    return {
        "turn_id": turn_id,
        "rest": rest.to_payload(),
        "wait_s": wait,
        "error_id": error_id,
        "progress": {"id": progress_id, "lines": lines, "done": done},
    }


async def send_rest(out: TeamsOut, payload: dict, sent: Sent | None = None) -> None:
    """The `teams.rest` job's work: wait, send what is left, each message as long as Teams throttles it
    within REST_WAIT_MAX_S in all; then the files; then the card says Done — or what was lost. `sent`
    hears of each message that arrived (its id, text and attachments: the answer's card is kept)."""
    rest, error_id = Rest.from_payload(payload.get("rest") or {}), str(payload.get("error_id") or "")
    deadline = time.monotonic() + REST_WAIT_MAX_S
    wait, messages = float(payload.get("wait_s") or 0.0), list(rest.messages)
    where = out.reference.conversation.id
    while messages:
        await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
        text, attachments = messages[0]
        try:
            activity_id = await out.send(text, attachments=list(attachments) or None, answer=True)
        except ConnectorFailed as exc:
            wait = wait_s(exc) if not (exc.silent or exc.gone) else None
            if wait is None or time.monotonic() + wait > deadline:
                left = Rest(
                    tuple(messages), rest.files, whole=rest.whole and len(messages) == len(rest.messages)
                )
                log.warning(
                    "teams: the rest of an answer did not reach conversation %s error_id=%s: %s",
                    where,
                    error_id,
                    exc,
                )
                await _card(out, payload, lost_words(left, exc, error_id))
                return
            continue
        messages.pop(0)
        if sent is not None:
            await sent(activity_id, text, attachments)
    await send_files(out, list(rest.files))
    log.info("teams: the rest of an answer reached conversation %s error_id=%s", where, error_id)
    await _card(out, payload)


async def say_rest_lost(out: TeamsOut, payload: dict) -> None:
    """The process holding the `teams.rest` job stopped before sending it: the card, which said the
    rest follows, says what did not arrive (a message said so, under a card still saying "follows in
    about 60 s"); without a card, one short message does."""
    rest, error_id = Rest.from_payload(payload.get("rest") or {}), str(payload.get("error_id") or "")
    await _card(out, payload, lost_words(rest, None, error_id, why="I stopped before sending it"))


async def _card(out: TeamsOut, payload: dict, lost: str = "") -> None:
    """Redraw the turn's progress card: Done, or `lost` (without a card, one short message says that)."""
    progress = payload.get("progress") or {}
    if not progress.get("id"):
        if lost:
            with contextlib.suppress(ConnectorFailed):
                await out.send(lost, short=True)
        return
    card = render.progress_card(list(progress.get("lines") or []), status=lost or str(progress.get("done")))
    try:
        await out.update(str(progress["id"]), attachments=[card])
    except ConnectorFailed as exc:
        log.warning("teams: could not redraw the progress card in %s: %s", out.reference.conversation.id, exc)
