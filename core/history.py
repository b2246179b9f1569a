"""Conversation history in Anthropic's message format: kept valid, and kept small.

Valid means: roles alternate starting with `user`, every `tool_use` is answered by a `tool_result` in
the next message, no text block is empty or only whitespace (the API refuses such a history on every
later request), no text holds a lone surrogate (the request could not be encoded, on every later
question: core/text_repair.py), and the history ends with an assistant message. Small means: tool results of
older turns are cut to a stub that says where the full result lives (in the workspace files).
"""

from __future__ import annotations

import copy
import re

from core.shared_files import is_intake_block
from core.text_repair import readable_data
from core.wording import counted

INTERRUPTED = "The step was interrupted before it finished; its result is unknown."
COMPACT_CHARS = 400
KEEP_TURNS, FULL_TURNS, MAX_TURNS = 2, 6, 40  # sent whole; with results cut to stubs; at all
NAMES_SHOWN = 8  # files a collapsed turn names (then "and N more"): its line stays short
# What the bot writes around a step's output (core/tools.py): "Saved …" opens a result and "Attached …"
# is one; "New or changed files: …" is its last line. Only there: a step's stdout may print look-alikes.
_SAVED = re.compile(r"Saved ([\d,]+ rows?) to '(.+?)'\. Columns:")
_CHANGED = re.compile(r"New or changed files: (.*)")
_FILE = re.compile(r"(.+?) \([\d,]+ bytes?\)(?:, |$)")
_ATTACHED = re.compile(r"Attached (.+?) \([\d,]+ bytes?\) to the conversation")
# The shared-files block's own lines (core/file_intake.py `intake_text`): one at the margin a file, after
# the person's name for it as a JSON string; all that came from the file is indented below it. A
# workspace name is letters, digits, "_", "." and "-" (core/file_stems.py), never a quote.
_SHARED = re.compile(r'- "(?:[^"\\]|\\.)*" (.*)')
_IN_WORKSPACE = re.compile(r"is in the workspace as '([^']+)' \([^)]*\)(?:, converted to '([^']+)')?(.*)")
_SHARED_ROWS = re.compile(r"  Rows: (\d+)")


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def is_question(message: dict) -> bool:
    """A user message that a person wrote (not one that only carries tool results)."""
    return message.get("role") == "user" and not any(b.get("type") == "tool_result" for b in _blocks(message))


def repair(messages: list[dict], *, failure_note: str | None = None) -> list[dict]:
    """Make any history valid: answer dangling tool_use blocks, merge same-role runs, end on assistant,
    resolve lone surrogates (a history saved before questions were repaired as they came in heals as
    it is loaded, instead of failing every later request)."""
    out: list[dict] = []
    for message in readable_data(copy.deepcopy(messages)):
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        blocks = [b for b in _blocks(message) if b.get("type") != "text" or str(b.get("text") or "").strip()]
        if not blocks:
            continue
        if out and out[-1]["role"] == "assistant" and role == "user":
            blocks = _answer_pending(out[-1], blocks)
        elif out and out[-1]["role"] == "assistant" and role == "assistant":
            out.append({"role": "user", "content": _answer_pending(out[-1], [])})
        if out and out[-1]["role"] == role:
            out[-1]["content"] = _blocks(out[-1]) + blocks
            continue
        if not out and role == "assistant":
            continue
        if role == "user":
            blocks = _drop_orphan_results(out[-1] if out else None, blocks)
            if not blocks:
                continue
        out.append({"role": role, "content": blocks})
    if out and out[-1]["role"] == "assistant" and _pending_ids(out[-1]):
        out.append({"role": "user", "content": _answer_pending(out[-1], [])})
    if out and out[-1]["role"] == "user":
        note = failure_note or "I could not finish that request."
        out.append({"role": "assistant", "content": [{"type": "text", "text": note}]})
    return out


def _pending_ids(assistant: dict) -> list[str]:
    return [b["id"] for b in _blocks(assistant) if b.get("type") == "tool_use"]


def _answer_pending(assistant: dict, blocks: list[dict]) -> list[dict]:
    answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
    missing = [
        {"type": "tool_result", "tool_use_id": i, "content": INTERRUPTED, "is_error": True}
        for i in _pending_ids(assistant)
        if i not in answered
    ]
    results = [b for b in blocks if b.get("type") == "tool_result"] + missing
    return results + [b for b in blocks if b.get("type") != "tool_result"]


def _drop_orphan_results(previous: dict | None, blocks: list[dict]) -> list[dict]:
    valid = set(_pending_ids(previous)) if previous else set()
    return [b for b in blocks if b.get("type") != "tool_result" or b.get("tool_use_id") in valid]


def compact(
    messages: list[dict],
    *,
    keep_turns: int = KEEP_TURNS,
    full_turns: int = FULL_TURNS,
    max_turns: int = MAX_TURNS,
) -> list[dict]:
    """Keep requests bounded however long the thread gets.

    The last `keep_turns` questions are sent whole; up to `full_turns` back, tool results are cut to
    stubs; older turns shrink to the question and the final answer (their files stay in the workspace);
    beyond `max_turns` turns are dropped. Only question boundaries decide this, so within one turn the
    compacted prefix is byte-stable and stays in the prompt cache.
    """
    starts = [i for i, m in enumerate(messages) if is_question(m)]
    if len(starts) > max_turns:
        messages = messages[starts[-max_turns] :]
        starts = [i for i, m in enumerate(messages) if is_question(m)]
    if not starts:
        return messages
    stub_from = starts[-keep_turns] if len(starts) >= keep_turns else 0
    whole_from = starts[-full_turns] if len(starts) >= full_turns else 0
    out: list[dict] = list(messages[: starts[0]])
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        turn = messages[start:end]
        if start < whole_from:
            out += _collapse_turn(turn)
        elif start < stub_from:
            out += [_stub_message(m) for m in turn]
        else:
            out += turn
    return out


def for_storage(
    messages: list[dict], *, full_turns: int = FULL_TURNS, max_turns: int = MAX_TURNS
) -> list[dict]:
    """The history to save: only what a later request can send. The next question makes every turn one
    older, so turns `compact` will only ever send collapsed are saved collapsed (it sends them unchanged,
    byte for byte) and turns it will drop are not saved. A repaired history stays valid."""
    starts = [i for i, m in enumerate(messages) if is_question(m)]
    if not starts:
        return messages
    bounds = [*starts, len(messages)]  # as `compact` will see them, the next question's start last
    whole_from = bounds[-full_turns] if len(bounds) >= full_turns else 0
    out: list[dict] = []
    turns = list(zip(bounds, bounds[1:], strict=False))
    for start, end in turns[max(0, len(turns) - max_turns + 1) :]:
        out += _collapse_turn(messages[start:end]) if start < whole_from else messages[start:end]
    return out


def _stub_message(message: dict) -> dict:
    if message.get("role") != "user" or isinstance(message.get("content"), str):
        return message
    if is_question(message):
        return {"role": "user", "content": _shortened_question(message)}
    return {"role": "user", "content": [_compact_block(b) for b in message["content"]]}


def _shortened_question(question: dict) -> list[dict]:
    """The question's blocks with a shared-files block as its one line. Never the first block: that is
    the person's own words, whatever they say (as core/receipt.py reads them)."""
    return [
        {**b, "text": shared_files_line(b["text"])}
        if n > 0 and b.get("type") == "text" and is_intake_block(str(b.get("text") or ""))
        else b
        for n, b in enumerate(_blocks(question))
    ]


def shared_files_line(block: str) -> str:
    """An older turn's shared-files block in one line, read from its own lines (so its bytes never
    change): "(Shared with this question: 'sales.csv' 1,204 rows, 'Q3.xlsx' as 'Q3.parquet' 310 rows,
    'broken.csv' not read; 1 file not taken in.)", at most NAMES_SHOWN files named. The files stay
    in the workspace, where a step reads them again."""
    named: list[list[str]] = []  # [its names, its rows or "not read"]
    current: list[str] | None = None  # the entry whose indented lines follow (the first "Rows: N")
    unknown = untaken = 0
    for line in block.splitlines():
        if not (shared := _SHARED.fullmatch(line)):
            if current is not None and not current[1] and (count := _SHARED_ROWS.fullmatch(line)):
                current[1] = counted(int(count[1]), "row")
            continue
        current = None
        if not (placed := _IN_WORKSPACE.fullmatch(shared[1])):
            refused = shared[1].startswith(("could not be put in the workspace:", "was not taken in:"))
            untaken, unknown = untaken + refused, unknown + (not refused)
            continue
        stored, converted, rest = placed.groups()
        name = f"'{_cut(stored)}'" + (f" as '{_cut(converted)}'" if converted else "")
        current = [name, "not read" if rest.startswith(", but it") else ""]
        named.append(current)
    parts = [_names([f"{name} {rows}".strip() for name, rows in named], cut=False)] if named else []
    if unknown:
        parts.append(counted(unknown, "more file" if named else "file"))
    if untaken:
        parts.append(f"{counted(untaken, 'file')} not taken in")
    return f"(Shared with this question: {'; '.join(parts) or 'no files'}.)"


def _cut(name: str) -> str:
    return name if len(name) <= 80 else name[:79] + "…"


def _collapse_turn(turn: list[dict]) -> list[dict]:
    question = [b for b in _shortened_question(turn[0]) if b.get("type") == "text"]
    answers = [m for m in turn if m.get("role") == "assistant"]
    last = [b.get("text", "") for b in _blocks(answers[-1]) if b.get("type") == "text"] if answers else []
    steps = sum(1 for m in answers for b in _blocks(m) if b.get("type") == "tool_use")
    note = f"\n[{counted(steps, 'step')}; {_files_line(turn)}]" if steps else ""
    answer = ("\n".join(t for t in last if t).strip() or "(no answer)") + note
    return [
        {"role": "user", "content": question or [{"type": "text", "text": "(question)"}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def _files_line(turn: list[dict]) -> str:
    """What a collapsed turn's steps left, from its own tool results (so its bytes never change): "files:
    delays.parquet (16 rows), delays.png; attached: delays.png", at most NAMES_SHOWN names a list."""
    made: dict[str, str] = {}
    attached: list[str] = []
    for message in turn:
        for block in _blocks(message) if message.get("role") == "user" else []:
            if block.get("type") != "tool_result" or block.get("is_error"):
                continue
            text = _result_text(block)
            if saved := _SAVED.match(text):
                made.setdefault(saved[2], f"{saved[2]} ({saved[1]})")
            if changed := _CHANGED.fullmatch(text.rpartition("\n")[2]):
                for name in _FILE.findall(changed[1]):
                    made.setdefault(name, name)
            if (sent := _ATTACHED.match(text)) and sent[1] not in attached:
                attached.append(sent[1])
    parts = [f"files: {_names(list(made.values()))}"] if made else ["no files saved"]
    if attached:
        parts.append(f"attached: {_names(attached)}")
    return "; ".join(parts)


def _names(names: list[str], *, cut: bool = True) -> str:
    shown = ", ".join(_cut(n) if cut else n for n in names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def _result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(c.get("text", "") for c in (content or []) if isinstance(c, dict))


def _compact_block(block: dict) -> dict:
    if block.get("type") != "tool_result":
        return block
    text = _result_text(block)
    if len(text) <= COMPACT_CHARS:
        return block
    stub = text[:COMPACT_CHARS].rsplit("\n", 1)[0]
    return {
        **block,
        "content": stub + "\n[… older result shortened; the full data is in the workspace files]",
    }


def strip_cache_control(messages: list[dict]) -> list[dict]:
    """History is stored without cache breakpoints; the loop adds its own per request."""
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict):
                    block.pop("cache_control", None)
    return out
