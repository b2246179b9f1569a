"""Tool calls the model issues together in one message run concurrently, unless they touch the same files.

Each call has a `Footprint`: the workspace files it reads and writes ("*" = any file, for Python and SQL
over workspace files). A call waits for every earlier call of its message it conflicts with (one writes
what the other reads or writes), so two queries saving different files overlap, while a chart drawn
from a query's result waits for that query, and two calls saving the same `save_as` never race.
At most `limit` calls run at once; results come back in the order the model wrote the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypeVar

from core.file_stems import safe_file_stem

ANY = "*"
ATTACHMENTS = "<attachments>"  # attach_file calls keep their order: files are posted as the model listed them

Result = TypeVar("Result")


@dataclass(frozen=True)
class Footprint:
    """What a call reads and writes in the session's workspace."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()

    def conflicts(self, other: Footprint) -> bool:
        return _overlap(self.writes, other.reads | other.writes) or _overlap(other.writes, self.reads)


def _overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    if not a or not b:
        return False
    return ANY in a or ANY in b or bool(a & b)


def _saved(save_as: object) -> frozenset[str]:
    """The file a `save_as` names (as the step will spell it); without one, the step picks a name."""
    if not isinstance(save_as, str) or not save_as.strip():
        return frozenset({ANY})
    return frozenset({safe_file_stem(save_as, "result") + ".parquet"})


def footprint(name: str, raw_input: object) -> Footprint:
    """A call's footprint from its name and input. Unknown tools and odd inputs may touch anything."""
    args = raw_input if isinstance(raw_input, dict) else {}
    if name in ("list_tables", "describe_table", "list_files"):
        return Footprint()
    if name in ("query_warehouse", "load_file"):
        return Footprint(writes=_saved(args.get("save_as")))
    if name == "run_sql":
        return Footprint(reads=frozenset({ANY}), writes=_saved(args.get("save_as")))
    if name == "attach_file" and isinstance(args.get("path"), str):
        path = PurePosixPath(args["path"].strip().removeprefix("./"))
        converted = {str(path.with_suffix(".csv"))} if path.suffix.lower() == ".parquet" else set()
        return Footprint(reads=frozenset({str(path)}), writes=frozenset({ATTACHMENTS, *converted}))
    return Footprint(reads=frozenset({ANY}), writes=frozenset({ANY}))


async def run_concurrently(
    footprints: Sequence[Footprint],
    run: Callable[[int], Awaitable[Result]],
    *,
    limit: int,
) -> list[Result]:
    """`run(i)` for every call, overlapping where footprints allow, at most `limit` at once; in order."""
    slots = asyncio.Semaphore(max(1, limit))
    done = [asyncio.Event() for _ in footprints]

    async def one(i: int) -> Result:
        try:
            for j in range(i):
                if footprints[j].conflicts(footprints[i]):
                    await done[j].wait()
            async with slots:
                return await run(i)
        finally:
            done[i].set()

    try:
        async with (
            asyncio.TaskGroup() as group
        ):  # one failure cancels the rest instead of leaving them running
            tasks = [group.create_task(one(i)) for i in range(len(footprints))]
    except ExceptionGroup as failed:  # the caller sees the failure itself, as with sequential calls
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]
