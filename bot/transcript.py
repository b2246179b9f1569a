"""One turn's events folded into what every surface draws: step lines, the model's interim remarks,
the answer, the failure and notes. Slack, Teams and the terminal only draw a `Transcript`.

Pure and synchronous: `apply(event)` updates the fold and says what changed, so the three surfaces
agree on titles (the tool's own, carried by `StepStarted`), outcomes and wording by construction.
`Throttle` is the one rate limit for surfaces that edit a message in place.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from core.events import (
    AnswerReady,
    ArtifactReady,
    StepFinished,
    StepRecord,
    StepStarted,
    Thinking,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnNote,
    TurnStarted,
    Waiting,
)
from core.receipt import receipt_line
from core.tools import step_detail
from core.wording import counted, step_error

WORKING = "Working on it…"
# A question asked while the thread's previous one is still being answered waits for it (the session
# lock): said, or its message sat empty until the first answer ended.
WAITING = "Waiting for the previous question in this thread to finish…"
DEFAULT_THINKING = Thinking(turn_id="").text  # the core's "still thinking" ping carries no remark


class Change(enum.Enum):
    """What an event changed, i.e. what a surface has to draw next."""

    NOTHING = "nothing"
    WAITING = "waiting"  # the turn waits for the thread's previous one
    STARTED = "started"
    THINKING = "thinking"  # the model is working; maybe a remark was added
    STEP = "step"  # `last` started or finished
    ARTIFACT = "artifact"
    FINISHED = "finished"


@dataclass
class StepLine:
    """One step as people see it: its title, what it ran (in brief) and how it ended."""

    step_id: str
    title: str
    detail: str = ""
    status: Literal["running", "done", "failed"] = "running"
    outcome: str = ""  # "16 rows · 0.2 s", or the error in brief


@dataclass
class Transcript:
    """The fold of one turn's events."""

    steps: dict[str, StepLine] = field(default_factory=dict)
    remarks: dict[str, str] = field(default_factory=dict)  # the model's first lines between steps
    order: list[str] = field(default_factory=list)  # step ids and remark keys, as they happened
    answer: str = ""
    failure: TurnFailed | None = None
    notes: list[str] = field(default_factory=list)  # for the person, below the answer
    finished: TurnFinished | None = None
    last: StepLine | None = None  # the step the latest event touched
    cut_short: list[StepLine] = field(default_factory=list)  # steps still running when the turn ended
    waiting: bool = False  # for the thread's previous turn, until this one's model call starts

    def apply(self, event: TurnEvent) -> Change:
        if isinstance(event, Waiting):
            self.waiting = True
            return Change.WAITING
        # Any event but these means the turn runs now: it waits no more.
        self.waiting = self.waiting and isinstance(event, TurnStarted | ArtifactReady)
        if isinstance(event, TurnStarted):
            return Change.STARTED
        if isinstance(event, Thinking):
            if event.text and event.text != DEFAULT_THINKING:
                key = f"say-{len(self.remarks)}"
                self.remarks[key] = brief(event.text, 200)
                self.order.append(key)
            return Change.THINKING
        if isinstance(event, StepStarted):
            line = StepLine(event.step_id, event.title, detail=brief(event.detail))
            self._put(line)
            return Change.STEP
        if isinstance(event, StepFinished):
            rec = event.record
            line = self.steps.get(rec.step_id) or StepLine(rec.step_id, rec.title or rec.tool)
            line.status, line.outcome = ("done" if rec.ok else "failed"), step_outcome(rec)
            self._put(line)
            return Change.STEP
        if isinstance(event, ArtifactReady):
            return Change.ARTIFACT
        if isinstance(event, AnswerReady):
            self.answer = event.text
        elif isinstance(event, TurnNote):  # drawn with the answer, at the end, on every surface
            self.notes.append(event.text)
        elif isinstance(event, TurnFailed):
            self.failure = event
        elif isinstance(event, TurnFinished):
            self.finished = event
            self._cut_short()
            return Change.FINISHED
        return Change.NOTHING

    def _cut_short(self) -> None:
        """A turn stopped (Ctrl-C, a shutdown) or failed mid-step ends without that step's finish: it
        kept spinning "running" in the thread after the turn had said it stopped."""
        self.cut_short = [line for line in self.steps.values() if line.status == "running"]
        for line in self.cut_short:
            line.status, line.outcome = "failed", "stopped before it finished"

    def _put(self, line: StepLine) -> None:
        if line.step_id not in self.steps:
            self.order.append(line.step_id)
        self.steps[line.step_id] = self.last = line

    def rows(self) -> list[StepLine | str]:
        """Steps and remarks in the order they happened (a remark is a plain string)."""
        return [self.steps[k] if k in self.steps else self.remarks[k] for k in self.order]

    def receipt(self) -> str:
        """The answer's receipt in one line (tables, rows, freshness, cost, model calls, time), or ""."""
        done = self.finished
        return receipt_line(done.receipt) if done is not None and done.ok and done.receipt else ""

    def status(self) -> str:
        """The headline of a progress message: working, done (steps and time) or stopped."""
        if self.finished is None:
            return WAITING if self.waiting else WORKING
        if not self.finished.ok:
            return "Stopped"
        s = self.finished.stats
        if not s.steps:  # an answer from what Claude knew already: "Done — 0 steps" read like a fault
            return f"Done in {s.duration_s:.1f} s"
        return f"Done — {counted(s.steps, 'step')} in {s.duration_s:.1f} s"


def step_outcome(record: StepRecord) -> str:
    """One line per finished step: rows, bytes scanned and time, or the error in brief."""
    if not record.ok:
        return brief(step_error(record.error) or record.summary, 150) or "failed"
    parts = []
    if record.rows is not None:
        parts.append(counted(record.rows, "row"))
    if record.bytes_scanned:
        parts.append(f"{format_bytes(record.bytes_scanned)} scanned")
    parts.append(f"{record.duration_s:.1f} s")
    return " · ".join(parts)


def confirmation_said(yes: str, answer: bool | None) -> str:
    """What a confirmation's asker is told once it is answered (`answer` None: it never was). A
    schedule, whose yes button says Create, is created; a query is run."""
    creates = yes == "Create"
    if answer is None:
        return f"No answer, so I didn't {'create the schedule' if creates else 'run it'}."
    if not answer:
        return "Cancelled."
    return "Creating it." if creates else "Running it."


NO_STEPS = "This answer didn't run any queries or code."
CODE_LANG = {"sql": "sql", "code": "python"}  # the step inputs that are code, and their fences' language


def recorded_steps(record: Mapping, *, escape: Callable[[str], str], max_code: int | None = None) -> str:
    """A recorded turn's steps in Markdown, for 'Show SQL & code': each as its task card showed it
    (title, ✓ or ✗, rows · scanned · time or the error in brief), then its SQL or code. Slack and
    Teams each had their own, and Slack's named steps by tool (`query_warehouse`) with the model's
    summary where the cards had said "Querying the warehouse" and "16 rows · 0.2 s". `escape` makes
    step text inert on the surface; code (in a fence longer than any run of backticks in it, so it
    cannot close the fence) is cut at `max_code` characters, when given."""
    steps = record.get("steps") or []
    if not steps:
        return NO_STEPS
    parts = []
    for n, step in enumerate(steps, 1):
        done = _as_record(step)
        title, outcome = _unquoted(done.title or done.tool), _unquoted(step_outcome(done))
        head = f"**{n}. {escape(title)}** {'✓' if done.ok else '✗'} {escape(outcome)}"
        lang = next((CODE_LANG[k] for k in CODE_LANG if isinstance(done.input.get(k), str)), "")
        if lang:
            code = done.input["sql" if lang == "sql" else "code"]
            cut = code if max_code is None or len(code) <= max_code else code[: max_code - 1] + "…"
            fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", cut)), default=0))
            parts.append(f"{head}\n\n{fence}{lang}\n{cut}\n{fence}")
        else:
            detail = step_detail(done.tool, done.input)  # what its task card showed: table, path or input
            parts.append(head + (f" · `{escape(_unquoted(brief(detail, 200)))}`" if detail else ""))
    return "\n\n".join(parts)


def _unquoted(text: str) -> str:
    """Step text set in a Markdown line: its backticks as quotes. A refusal quotes code (`os`), and
    cut short mid-quote, the unclosed backtick turned the rest of the message into code."""
    return text.replace("`", "'")


def _as_record(step: Mapping) -> StepRecord:
    """A stored step (a dict, perhaps from before a field existed) as the record it was made from."""
    raw = step.get("input")
    return StepRecord(
        step_id=str(step.get("step_id", "")),
        tool=str(step.get("tool", "")),
        title=str(step.get("title") or ""),
        input=raw if isinstance(raw, dict) else {},
        ok=bool(step.get("ok", True)),
        summary=str(step.get("summary") or ""),
        duration_s=float(step.get("duration_s") or 0.0),
        rows=step.get("rows"),
        bytes_scanned=step.get("bytes_scanned"),
        bytes_billed=step.get("bytes_billed"),
        error=str(step.get("error") or ""),
    )


def brief(text: str, limit: int = 180) -> str:
    """Text on one line, cut to `limit` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def format_bytes(n: int) -> str:
    """Bytes for people: 0 B, 1.5 KB, 12 MB, 3.2 GB."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 10 else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


class Throttle:
    """At most one redraw per `min_interval_s` (Slack's chat.update is Tier 3; Teams throttles bots that
    edit a message many times a second)."""

    def __init__(self, min_interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.min_interval_s, self.clock = min_interval_s, clock
        self._last = float("-inf")

    def wait_s(self) -> float:
        """Seconds until the next redraw is allowed (0 when it is allowed now)."""
        return max(0.0, self._last + self.min_interval_s - self.clock())

    def mark(self) -> None:
        """A redraw happened now."""
        self._last = self.clock()
