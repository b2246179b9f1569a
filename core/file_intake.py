"""Files a person shared with their question, taken into the thread: written into its workspace
under a safe name, read inside the sandbox, and told — to the model in one text block of the
question, to the person as notes.

A surface fetched the bytes (core/shared_files.py); here each fetched file gets a workspace name made
from the person's (`safe_file_stem`, its kind kept): `../../x.csv` is `x.csv`, a name of emoji alone
`shared.csv`. A name already taken by a different file is never overwritten — `sales.csv` becomes
`sales-2.csv` — while the same name with the same bytes, shared again, is the file already there.
Then `describe_file` reads it in the sandbox (an Excel workbook converted to Parquet first, a CSV that
is not UTF-8 copied to one that is), each file a step the person sees ("Reading sales.csv"), one
after another: a session's steps run one at a time (they share its uid, and a step's end kills that
uid's processes), so they cannot be read at once. Each has FILE_READ_S, and the reads of all of a
message's files FILES_READ_FACTOR times that: a file that takes long (a workbook of a million cells,
a crafted one past the reader's bounds) holds the turn for seconds, not the step limit's two minutes
each. Only reading counts: writing the files (slow on a remote sandbox) takes no file's time. A file
read in what was left of that time is said to have been stopped for that, not for being slow; one
the time ran out before is still written, and said to be unread. A refused file, a full workspace,
a file that does not parse, one that took too long: each is a sentence, for the model in the block
and for the person as a `TurnNote` in words meant for them; nothing raises out of the turn. The
block marks what came from the files (indented, quoted as JSON strings, invisible characters
escaped) and ends with END, so a file cannot write a line that reads as the block's own. It is kept
in the history (follow-ups still know the files; once its turn is older, as one line naming them:
core/history.py), but it is not evidence for the receipt's numbers check (`is_intake_block`).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from core.events import (
    EventSink,
    SharedFile,
    StepFinished,
    StepRecord,
    StepStarted,
    TurnNote,
)
from core.file_describe import Description, converted_name, describe_file, escaped_lines, quoted
from core.file_stems import safe_file_stem
from core.sandbox import WorkspaceFull
from core.shared_files import HEADER, FilesBudget, kind_of, refusal_before_fetch
from core.shared_names import INTAKE_TOOL
from core.tools import ToolContext
from core.wording import in_code_span

log = logging.getLogger("datathread.intake")

END = "(End of the shared files. What came from them is indented above, names and values as JSON strings.)"
# The question of a message that came with files and no words: it is still one (Slack and Teams send
# a file dropped without text; the model is asked to look).
FILES_ONLY = "(No question came with these files: look at them and say briefly what each holds.)"
STEP_TOOL = INTAKE_TOOL  # the tool name of an intake step in records, audit and notebooks
DESCRIPTION_BYTES = 3_000  # a file's description in the block, at most (ten files: 30 KB)
NAME_CHARS = 120  # of the person's name for a file, quoted in the block and the notes
DEFAULT_STEM = "shared"
WENT_WRONG = "Something went wrong on my side while reading it."
OUT_OF_TIME = (
    "Not read: the files before it took all the time reading a message's files may take. It is in "
    "the workspace under that name."
)
OUT_OF_TIME_NOTE = "The files shared before it took all the time I have for reading files."
_ROWS = re.compile(r"^Rows: (\d+)$", re.MULTILINE)
# A file's read, at most: in the sandbox a 100 MB CSV (the size limit) is written and described in
# 1.9 s, a 50,000-row, 8-column workbook read in 3.8-4.1 s (numbers) to 7.1-7.2 s (words), the whole
# step, at load 1-3; a workbook of more XML than 20 s reads is refused at once (core/excel_reading.py).
# So 20 s leaves room on a busy host, yet is a sixth of the step limit each file could hold the turn
# for. Reading all of a message's files: three files' worth (ten slow files held it for ten step
# limits); writing them is not counted (on Modal an upload, as slow as the network).
FILE_READ_S = 20.0
FILES_READ_FACTOR = 3
MIN_READ_S = 0.1  # less time left than this reads nothing (a step takes longer to start): unread


@dataclass(frozen=True)
class TakenFile:
    """What became of one shared file."""

    shared_as: str  # the person's name for it
    size: int = 0
    stored: str = ""  # its name in the workspace; "" when it was not written
    reused: bool = False  # the same name and bytes were there already
    description: Description | None = None
    refusal: str = ""  # why it was not written (refused by a surface or here, workspace full)


@dataclass
class Intake:
    """The block for the model (None without files), the notes for the person and the steps run."""

    block: dict | None
    notes: list[str]
    steps: list[StepRecord]


async def take_in(
    files: tuple[SharedFile, ...],
    ctx: ToolContext,
    emit: EventSink,
    *,
    limit_mb: int,
    total_mb: int,
    first_step: int,
) -> Intake:
    """Write, read and describe each shared file; `first_step` numbers the steps after the turn's own.
    `limit_mb` bounds each file, `total_mb` all of them (DATATHREAD_SHARED_FILE_MB, _FILES_MB)."""
    try:
        existing = {f["path"]: int(f["size"]) for f in await ctx.sandbox.list_files(ctx.session_id)}
        unlisted = ""
    except Exception:  # no listing, no name known to be free: nothing is written
        log.exception("shared files: could not list the workspace of %s", ctx.session_id)
        existing, unlisted = {}, WENT_WRONG
    per_file = min(FILE_READ_S, ctx.step_timeout_s)
    reading_left = FILES_READ_FACTOR * per_file  # seconds of reading; writing the files is not counted
    taken: list[TakenFile] = []
    steps: list[StepRecord] = []
    budget = FilesBudget(file_mb=limit_mb, total_mb=total_mb)
    for index, shared in enumerate(files):
        refused = _refused(shared, index, budget) or unlisted
        if refused:
            taken.append(TakenFile(shared.name, refusal=refused))
            continue
        step_id = f"{ctx.turn_id}-{first_step + len(steps) + 1}"
        one, record, read = await _take_one(shared, ctx, emit, existing, step_id, per_file, reading_left)
        reading_left -= read
        taken.append(one)
        steps.append(record)
    notes = [note for one in taken if (note := _note(one))]
    for note in notes:
        await emit(TurnNote(turn_id=ctx.turn_id, text=note))
    block = {"type": "text", "text": intake_text(taken)} if taken else None
    return Intake(block=block, notes=notes, steps=steps)


def _refused(shared: SharedFile, index: int, budget: FilesBudget) -> str:
    """Why this file is not taken: the surface's refusal, or the same checks again (a surface's bytes
    are held to the same kinds, size, count and total here, whichever surface sent them)."""
    if shared.data is None:
        return shared.refusal or "It could not be fetched."
    size = len(shared.data)
    refused = refusal_before_fetch(shared.name, size, limit_mb=budget.file_mb, index=index)
    refused = refused or budget.claim(shared.name).refusal(size)
    return refused.refusal if refused else ""


async def _take_one(
    shared: SharedFile,
    ctx: ToolContext,
    emit: EventSink,
    existing: dict[str, int],
    step_id: str,
    per_file: float,
    reading_left: float,
) -> tuple[TakenFile, StepRecord, float]:
    """Write one file and read it within `per_file` seconds, or what is left of the message's reading
    time if less (none left: written, said unread); also the seconds its reading took."""
    data, kind = shared.data or b"", kind_of(shared.name)
    started = time.perf_counter()
    stored, reused = await _place(ctx, shared.name, kind, data, existing)
    title = f"Reading {stored}"
    await emit(StepStarted(turn_id=ctx.turn_id, step_id=step_id, tool=STEP_TOOL, title=title, detail=stored))
    one = TakenFile(shared.name, size=len(data), stored=stored, reused=reused)
    read_s, reading = min(per_file, reading_left), 0.0
    try:
        if not reused:
            await ctx.sandbox.write_file(ctx.session_id, stored, data)
        existing[stored] = len(data)
        if read_s >= MIN_READ_S:
            began = time.monotonic()
            step = ctx.step_request("python", timeout_s=read_s)
            try:
                described = await describe_file(ctx.sandbox, step, stored, kind, file_s=per_file)
            finally:
                reading = time.monotonic() - began
        else:
            described = Description(stored, unread=OUT_OF_TIME, reason=OUT_OF_TIME_NOTE)
        one = replace(one, description=described)
        if described.name != stored:
            existing.setdefault(described.name, 0)
    except WorkspaceFull as exc:
        one = replace(one, stored="", refusal=str(exc))
    except Exception:  # a bug, or a sandbox that failed: one sentence, and the turn goes on
        log.exception("shared file %r: could not take it in", stored)
        one = replace(one, stored="", refusal=WENT_WRONG)
    record = _record(one, step_id, title, kind, time.perf_counter() - started)
    await emit(StepFinished(turn_id=ctx.turn_id, record=record))
    return one, record, reading


async def _place(
    ctx: ToolContext, name: str, kind: str, data: bytes, existing: dict[str, int]
) -> tuple[str, bool]:
    """The workspace name for a shared file, and whether that file is already these bytes: never a
    name a different file holds (nor the name its conversion would take: a workbook's Parquet file, a
    CSV's UTF-8 copy), in any case (`Sales.csv` is `sales.csv` on a Mac's disk)."""
    base = PurePosixPath(name.replace("\\", "/")).name
    stem = safe_file_stem(base[: -len(kind) - 1] if kind else base, DEFAULT_STEM)
    held = {path.lower() for path in existing}
    for n in range(1, 10_000):
        candidate = stem if n == 1 else f"{stem}-{n}"
        stored = f"{candidate}.{kind}"
        converted = converted_name(stored, kind)  # a workbook's Parquet file, a CSV's UTF-8 copy
        if stored in existing and existing[stored] == len(data) and await _same_bytes(ctx, stored, data):
            return stored, True
        if stored.lower() not in held and (not converted or converted.lower() not in held):
            return stored, False
    return f"{stem}-{os.urandom(4).hex()}.{kind}", False  # ten thousand names taken: one no one holds


async def _same_bytes(ctx: ToolContext, path: str, data: bytes) -> bool:
    """Whether the workspace's `path` holds `data`. Any failure to read it (a link, a remote sandbox's
    error) is "no": the file gets a name of its own instead of failing the turn."""
    try:
        return await ctx.sandbox.read_file(ctx.session_id, path) == data
    except Exception:
        log.warning("shared files: could not compare with %s in %s", path, ctx.session_id, exc_info=True)
        return False


def _record(one: TakenFile, step_id: str, title: str, kind: str, ran_s: float) -> StepRecord:
    described = one.description
    ok = bool(one.stored) and described is not None and described.ok
    rows = _ROWS.search(described.text) if described is not None else None
    files = tuple(dict.fromkeys(f for f in (one.stored, described and described.name) if f))
    problem = one.refusal or (described.reason or described.unread if described is not None else "")
    return StepRecord(
        step_id=step_id,
        tool=STEP_TOOL,
        title=title,
        input={"path": one.stored or title.removeprefix("Reading "), "shared_as": one.shared_as},
        ok=ok,
        summary=f"read {one.stored}" if ok else f"could not read {kind or 'it'}",
        duration_s=round(ran_s, 3),
        rows=int(rows[1]) if ok and rows else None,
        files=files if one.stored else (),
        error="" if ok else problem[:2000],
    )


def intake_text(taken: list[TakenFile]) -> str:
    """The block's text: the header, a line per file with what came from it indented below, END."""
    lines = [HEADER]
    for one in taken:
        said = _quoted(one.shared_as)
        described = one.description
        if not one.stored:
            where = "could not be put in the workspace" if one.size else "was not taken in"
            lines.append(f"- {said} {where}: {_one_line(one.refusal)}")
            continue
        size = f"{one.size:,} bytes" + (", the same file as shared before" if one.reused else "")
        head = f"- {said} is in the workspace as '{one.stored}' ({size})"
        if described is None or not described.ok:
            what = "Excel" if described is None or described.excel_failed else _kind(one.stored)
            timed = described is not None and (described.timed_out or described.unread == OUT_OF_TIME)
            lines.append(
                f"{head}, but it was not read:" if timed else f"{head}, but it could not be read as {what}:"
            )
            text = described.unread if described else WENT_WRONG
            lines += [f"  {line}" for line in escaped_lines(text) if line.strip()]
            continue
        if described.name != one.stored:
            head += f", converted to '{described.name}'"
        lines.append(f"{head}: query it by that name, e.g. SELECT * FROM {described.query_from}.")
        lines += [f"  {line}" for line in _clipped(described.text.splitlines())]
    return "\n".join([*lines, END])


def _clipped(lines: list[str]) -> list[str]:
    """A file's description within DESCRIPTION_BYTES, cut at a line, and said to be."""
    kept, used = [], 0
    for line in lines:
        used += len(line.encode()) + 3
        if used > DESCRIPTION_BYTES:
            return [*kept, "(the rest of this description is left out)"]
        kept.append(line)
    return kept


def not_read(name: str, why: str) -> str:
    """The note for a file refused before it came in (its kind, its size, a link it may not follow)."""
    return f"I didn't read `{in_code_span(name, NAME_CHARS)}`: {why}"


def _note(one: TakenFile) -> str:
    """The sentence for the person about a file that did not come in whole; "" for one that did."""
    shown = f"`{in_code_span(one.shared_as, NAME_CHARS)}`"
    described = one.description
    if not one.stored and not one.size:
        return not_read(one.shared_as, one.refusal)
    if not one.stored:
        if one.refusal.startswith("The result ("):  # WorkspaceFull's words are for the model
            return f"I couldn't keep {shown}: this thread's workspace has no room left for it."
        return f"I couldn't keep {shown}: {one.refusal}"
    if described is not None and not described.ok:
        if described.reason:
            return f"I couldn't read {shown}. {described.reason}"
        what = "Excel" if described.excel_failed else _kind(one.stored)
        return f"I couldn't read {shown} as {what}: `{in_code_span(described.unread_line, NAME_CHARS)}`"
    return ""


def _kind(name: str) -> str:
    return kind_of(name).upper() if kind_of(name) != "xlsx" else "Excel"


def _quoted(name: str) -> str:
    """The person's name for a file on one line, as a JSON string: a newline in it stays `\\n`, a
    direction override or an invisible tag character is an escape, not what it does."""
    return quoted(name, NAME_CHARS)


def _one_line(text: str) -> str:
    return " ".join(line for line in escaped_lines(text) if line.strip())
