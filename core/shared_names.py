"""A file a person shared stays theirs: a saved result never takes its name.

The intake (core/file_intake.py) writes what a person shares into the thread's workspace, and the
model saves results there under names it picks (`save_as`). A result named like a shared file
replaced the person's data without a word (a shared `flights.parquet`, then `query_warehouse`
with save_as="flights": "Saved 3 rows to 'flights.parquet'", their rows gone).

So the thread's meta in the session store keeps the names of the files shared in it (`META_KEY`): the
bot's own record, which no step can change, and which costs no call — the turn's first store write
returns it. (Not a hidden marker file in the workspace: a step can rewrite or delete it, and the bot,
which writes BigQuery's results itself, would read a file model code can fill on every query, one
more call to Modal each time.) Every path that saves a result picks the next free name instead of a shared one
(`flights-2.parquet`), and the tool tells the model (`renamed_note`): a SQL step inside the sandbox
(core/steps.py, the same code locally and on Modal, where the name crosses in the StepRequest), a
BigQuery result and an S3 copy, which the bot writes (with the names the copy is read through: a
workbook's Parquet file, a CSV's UTF-8 copy; core/tools_s3.py). A name is only passed over while its file is
there where the step can look; from the bot's side, which cannot look without another call, a
shared name is always passed over. `run_python` writing over a shared file by name is the model's
explicit choice, and is left to it.

The same names tell which turns read a shared file (`used_by`, `read_shared_file`): a schedule of such an
answer could never run (core/schedules_tool.py), so its end event offers none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

META_KEY = "shared_files"  # in the session's meta: the workspace names of the files shared there
INTAKE_TOOL = "shared_file"  # the tool name of the intake's steps in records, audit and notebooks
MAX_NAMES = 200  # the latest kept: each step's request carries them
NAME_CHARS = 300  # a workspace name longer than this is not one the intake writes


def shared_in(meta: Mapping | None) -> tuple[str, ...]:
    """The names recorded in a session's meta (anything else there is ignored)."""
    names = (meta or {}).get(META_KEY)
    if not isinstance(names, list):
        return ()
    return tuple(n for n in names if isinstance(n, str) and 0 < len(n) <= NAME_CHARS)[-MAX_NAMES:]


def with_names(shared: Sequence[str], added: Iterable[str]) -> tuple[str, ...]:
    """`shared` and the names `added` (the intake's, in order, a name shared again the latest), each once,
    the latest MAX_NAMES."""
    new = [name for name in added if name]
    return tuple(dict.fromkeys([*(n for n in shared if n not in new), *new]))[-MAX_NAMES:]


def unshared_stem(
    stem: str,
    shared: Iterable[str],
    *,
    kinds: tuple[str, ...] = ("parquet",),
    exists: Callable[[str], bool] | None = None,
) -> str:
    """`stem`, or the first of `stem-2`, `stem-3`… whose files (one per kind) are no shared file's, in
    any case (`Sales.csv` is `sales.csv` on a Mac's disk, and to the person who downloads both). With
    `exists`, a name whose shared file is gone is free again; without it, every shared name is taken.
    The same stem always gives the same name, so a result saved again under its `save_as` replaces the
    model's own earlier one."""
    held = {name.lower(): name for name in shared}
    if not held:
        return stem
    for n in range(1, 10_000):
        candidate = stem if n == 1 else f"{stem}-{n}"
        theirs = [held[name] for kind in kinds if (name := f"{candidate}.{kind}".lower()) in held]
        if not any(exists is None or exists(name) for name in theirs):
            return candidate
    raise RuntimeError(f"no free name for {stem}")  # ten thousand shared files of one name: never


def renamed_note(wanted: str, saved: str, shared: Iterable[str]) -> str:
    """What the model is told when a result could not take the name it asked for; "" when it did."""
    if not wanted or not saved or wanted == saved:
        return ""
    theirs = next((name for name in shared if name.lower() == wanted.lower()), wanted)
    return f"Saved as '{saved}': '{theirs}' is a file the person shared and stays as it is."


def used_by(steps: Iterable, shared: Iterable[str]) -> tuple[str, ...]:
    """The shared files a turn's steps named (in their SQL, code or paths)."""
    inputs = ((getattr(step, "input", None) or {}).values() for step in steps)
    return named_in([value for values in inputs for value in values if isinstance(value, str)], shared)


def read_shared_file(record: Mapping) -> bool:
    """Whether a recorded turn read a file a person shared: the one decision that its answer cannot be
    scheduled, both for "Schedule…" refusing a pick (core/schedules_tool.py `unschedulable`) and for
    the turn's end event saying whether to draw that menu at all (`TurnFinished.schedulable`). Its
    `shared_files` (`used_by`), or an intake step (turns recorded before `shared_files` was)."""
    steps = [s for s in record.get("steps") or [] if isinstance(s, Mapping)]
    return bool(record.get("shared_files")) or any(s.get("tool") == INTAKE_TOOL for s in steps)


def named_in(texts: Iterable[str], shared: Iterable[str]) -> tuple[str, ...]:
    """The shared files `texts` name, in any case: `sales.csv` in `FROM 'sales.csv'`, not in
    `FROM 'old_sales.csv'`."""
    said = "\n".join(texts)
    return tuple(
        name
        for name in dict.fromkeys(shared)
        if re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", said, re.IGNORECASE)
    )
