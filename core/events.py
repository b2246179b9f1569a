"""Neutral types at the core's boundary: what comes in from a surface and what a turn emits.

Surfaces translate their platform's payloads into `IncomingMessage` and render the `TurnEvent`s;
nothing here knows about Slack or Teams.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from core.text_repair import readable

Surface = Literal["terminal", "slack", "teams", "api"]


@dataclass(frozen=True)
class SharedFile:
    """A file a person shared with their question, as their surface fetched it (core/shared_files.py).

    `data` is None when the surface could not or would not fetch it (too large, a kind the bot can't
    read, a link it may not follow); `refusal` then says why, in a sentence the answer can pass on."""

    name: str
    data: bytes | None = None
    refusal: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", readable(self.name))

    def __repr__(self) -> str:  # never the bytes: a message is logged and compared in tests
        size = "not fetched" if self.data is None else f"{len(self.data)} bytes"
        return f"SharedFile({self.name!r}, {size})"


@dataclass(frozen=True)
class IncomingMessage:
    """One question from a person, already stripped of mentions, with where it came from."""

    text: str
    surface: Surface
    thread_key: tuple[str, ...]  # e.g. (team, channel, thread_ts) — stable per conversation
    user_id: str = "local"
    channel_id: str = ""
    team_id: str = ""
    # Slack: the asker's Enterprise Grid organization (E…) when known, which DATATHREAD_ALLOWED_TEAMS may list.
    enterprise_id: str = ""
    user_name: str = ""
    is_direct: bool = False  # a 1:1 conversation with the bot (Slack DM, Teams personal chat)
    user_tz: str = ""  # the asker's IANA time zone when the surface knows it (for schedules)
    # Who the asker is to the organization the bot is installed in, when the surface can tell (Slack, Teams):
    # "" one of its people, or core/access.py's GUEST, EXTERNAL, UNCONFIRMED (the platform could not say),
    # MAYBE_GUEST (at home, but whether a guest could not be asked while guests are refused).
    outsider: str = ""
    # The asker's locale (BCP 47: "de-DE") when the surface knows it (Teams sends the client's): told
    # to the model with the time, for whose calendar "this week" is on (core/asked_when.py).
    user_locale: str = ""
    # Files shared with the question, already in hand (`ask --file`, `/file`). Slack and Teams pass a
    # `FileFetcher` to `Analyst.handle` instead: the core fetches once the turn's turn has come.
    files: tuple[SharedFile, ...] = ()

    def __post_init__(self) -> None:
        """The question and the name as UTF-8 can encode them, whichever surface built the message: a
        byte argv or stdin could not decode (or a lone surrogate escape in a payload's JSON) made every
        later request of the session fail to encode (core/text_repair.py)."""
        object.__setattr__(self, "text", readable(self.text))
        object.__setattr__(self, "user_name", readable(self.user_name))


@dataclass(frozen=True)
class FileInfo:
    """A file in a session workspace, by path relative to the workspace."""

    path: str
    size: int
    kind: str = ""  # "png", "csv", "parquet", ...


@dataclass(frozen=True)
class StepRecord:
    """What one tool call did: kept with the turn for 'Show SQL & code', audit and notebooks."""

    step_id: str
    tool: str
    input: dict
    ok: bool
    summary: str
    duration_s: float
    rows: int | None = None
    bytes_scanned: int | None = None  # processed, as the warehouse reports it
    files: tuple[str, ...] = ()
    error: str = ""
    tables: tuple[str, ...] = ()  # what the policy saw a query read (tables, or workspace files)
    title: str = ""  # the tool's title, as its task card said it ("Querying the warehouse")
    bytes_billed: int | None = None  # what the warehouse billed (BigQuery: 10 MB at least; 0 from cache)


@dataclass(frozen=True)
class TurnStarted:
    turn_id: str
    session_id: str
    question: str
    kind: Literal["turn_started"] = "turn_started"


@dataclass(frozen=True)
class Thinking:
    """The model is working (no step yet); surfaces show a status like 'thinking…'."""

    turn_id: str
    text: str = "Thinking…"
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True)
class Waiting:
    """The turn waits for another turn of the same session (the session lock) before it starts; the
    terminal says so, where a second `chat` on one session otherwise sat silent."""

    turn_id: str
    text: str = "Waiting for another conversation on this session to finish…"
    kind: Literal["waiting"] = "waiting"


@dataclass(frozen=True)
class StepStarted:
    turn_id: str
    step_id: str
    tool: str
    title: str  # one line for people: "Querying the warehouse"
    detail: str = ""  # the SQL or code, for surfaces that show it in brief
    kind: Literal["step_started"] = "step_started"


@dataclass(frozen=True)
class StepFinished:
    turn_id: str
    record: StepRecord
    kind: Literal["step_finished"] = "step_finished"


@dataclass(frozen=True)
class ArtifactReady:
    """The model attached a workspace file; surfaces upload `path` (absolute) into the thread."""

    turn_id: str
    session_id: str
    path: str
    name: str
    title: str
    size: int
    mime: str
    # What a screen reader says for an image (core/attachment_words.py): plain, one line, at most 1000
    # characters; the model's description when `described`, else made from the title and the file's name.
    alt_text: str = ""
    described: bool = False
    kind: Literal["artifact"] = "artifact"


@dataclass(frozen=True)
class AnswerDelta:
    """A piece of text as the model writes it, in order; the pieces of one `call` join to its text.

    Every model call streams its text. Text of a call that goes on to run steps is a preamble (the loop
    also sends its first line as `Thinking`); the last call's text is the answer, and `AnswerReady`
    still carries it whole. Surfaces that cannot draw text incrementally ignore these.
    """

    turn_id: str
    text: str
    call: int  # the model call of this turn that wrote it (1, 2, …): a new number is a new paragraph
    kind: Literal["answer_delta"] = "answer_delta"


@dataclass(frozen=True)
class AnswerReady:
    turn_id: str
    text: str  # Markdown as Claude wrote it; surfaces convert
    kind: Literal["answer"] = "answer"


class ModelFault(StrEnum):
    """Why a turn failed when the model's set-up is at fault, not the question: every later turn fails
    the same way until someone fixes the key, the model name, the endpoint or the account (so a batch
    of questions, such as `datathread eval`, stops instead of asking the rest)."""

    UNREACHABLE = "unreachable"  # no connection to the API endpoint
    NO_REPLY = "no_reply"  # connected, but no reply within the deadline (a proxy or firewall black hole)
    NOT_CLAUDE = "not_claude"  # an answer, but not the Messages API's (a proxy's or a web server's page)
    KEY_REJECTED = "key_rejected"
    MODEL_DENIED = "model_denied"  # the key may not use the configured model
    MODEL_NOT_FOUND = "model_not_found"
    NO_CREDIT = "no_credit"


@dataclass(frozen=True)
class TurnNote:
    """A sentence the core says to the person whatever the model writes, shown below the answer
    (bot/transcript.py `notes`): a shared file that was not taken in, and why. Markdown, one line."""

    turn_id: str
    text: str
    kind: Literal["note"] = "note"


@dataclass(frozen=True)
class TurnFailed:
    """The turn could not finish. `message` is short and human; `error_id` matches the log line."""

    turn_id: str
    error_id: str
    message: str
    retry_after_s: float | None = None
    fault: ModelFault | None = None  # the model's set-up failed the turn, not the question
    kind: Literal["failed"] = "failed"


@dataclass(frozen=True)
class TurnStats:
    steps: int = 0
    rows: int = 0
    bytes_scanned: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True)
class Receipt:
    """What one answer stands on (`core/receipt.py` builds it); empty fields are unknown and left out."""

    tables: tuple[str, ...] = ()  # warehouse tables (and workspace files) the turn's queries read
    rows: int = 0  # rows the turn's queries returned
    bytes_billed: int = 0
    model_calls: int = 0
    wall_s: float = 0.0
    fresh_as_of: datetime | None = None  # the oldest last-modified time of the tables read, if known
    verified_by: str = ""  # "@alice" when the answer followed a verified query
    unsupported: tuple[str, ...] = ()  # numbers in the answer that no step produced


@dataclass(frozen=True)
class TurnFinished:
    turn_id: str
    session_id: str
    ok: bool
    stats: TurnStats
    steps: tuple[StepRecord, ...] = ()
    receipt: Receipt | None = None  # on answered turns
    # On answered turns: whether "Schedule…" can repeat it — not when it read a file a person shared
    # (each run starts without it). Surfaces draw the menu only then (core/shared_names.read_shared_file).
    schedulable: bool = False
    kind: Literal["turn_finished"] = "turn_finished"


@dataclass(frozen=True)
class ConfirmRequest:
    """A step needs a person's yes before it runs (an expensive query)."""

    turn_id: str
    step_id: str
    prompt: str
    kind: Literal["confirm"] = "confirm"
    yes: str = ""  # the label of the yes button ("Create" for a schedule); empty = the surface's "Run"


TurnEvent = (
    TurnStarted
    | Thinking
    | Waiting
    | StepStarted
    | StepFinished
    | ArtifactReady
    | AnswerDelta
    | AnswerReady
    | TurnNote
    | TurnFailed
    | TurnFinished
)

EventSink = Callable[[TurnEvent], Awaitable[None]]


class NobodyListening(Exception):
    """What an EventSink raises, on a `Thinking` event, once nothing it shows can reach anyone (the
    channel refuses the bot's messages, even the asker's private ones): the turn stops before its
    next model call, instead of paying for an answer nobody will see, and is saved with this
    sentence as its failure. Raised on an `AnswerDelta` (the person stopped the text as it streamed:
    Teams' Stop), it ends the model call there; `shown` is what people saw of that call's text, the
    one part of it the turn keeps (a follow-up sees what they saw, not the rest nobody read)."""

    def __init__(self, why: str, *, shown: str = "") -> None:
        super().__init__(why)
        self.shown = shown


Confirmer = Callable[[ConfirmRequest], Awaitable[bool]]

# Fetches the files shared with a message, with the surface's own client: each fetched, or refused in a
# sentence; never raises for a file. The core calls it once the turn holds its session's lock, after
# its checks (core/file_fetch.py); a callable beside the message, as `Confirmer` is, not a field of it.
FileFetcher = Callable[[], Awaitable[tuple[SharedFile, ...]]]


@dataclass
class TurnOutcome:
    """What `Analyst.handle` returns: the answer, the files and the stats, for callers like `ask`."""

    turn_id: str
    session_id: str
    ok: bool
    answer: str = ""
    error: str = ""
    error_id: str = ""
    fault: ModelFault | None = None  # set when the model's set-up, not this question, failed the turn
    # Stopped at its own limits (token budget, tool calls): asked again, it would spend as much and
    # stop the same way (a schedule does not retry it).
    at_limit: bool = False
    # Refused before it started by the asker's daily budget or hourly limit (a schedule's owner's, for
    # a scheduled run): nothing to retry now, and not the question's fault.
    limited: bool = False
    artifacts: list[ArtifactReady] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    stats: TurnStats = field(default_factory=TurnStats)
    shared_files: tuple[str, ...] = ()  # files people shared in the thread that its steps read
