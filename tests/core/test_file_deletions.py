"""Which workspace files a deleted shared file left in a thread (`copies_of`), and a saved history
without what came from them (`scrubbed`): table-driven over the pure helpers of core/file_deletions.py;
and the index of shared files on both stores: updated atomically, left by forgotten threads, expired."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.file_deletions import (
    GONE_RESULT,
    KEEP_S,
    KIND,
    FileDeletions,
    copies_of,
    expire_index,
    scrubbed,
)
from core.file_intake import END
from core.forget import forget_for_reset
from core.shared_files import HEADER


def intake(path: str, shared_as: str, *files: str) -> dict:
    step = {"tool": "shared_file", "input": {"path": path, "shared_as": shared_as}, "files": [path, *files]}
    return {"steps": [step]}


TURNS = [intake("people.csv", "people.csv", "people.utf8.csv"), intake("people-2.csv", "people.csv")]


@pytest.mark.parametrize(
    ("turns", "sizes", "listed", "shared", "expected"),
    [
        # its copy and what was made of it; the other file of that name has another size
        (
            TURNS,
            [10],
            {"people.csv": 10, "people.utf8.csv": 12, "people-2.csv": 30},
            (),
            {"people.csv", "people.utf8.csv"},
        ),
        (TURNS, [30], {"people.csv": 10, "people-2.csv": 30}, (), {"people-2.csv"}),
        # Slack stated no size: every copy of that name
        (
            TURNS,
            [None],
            {"people.csv": 10, "people-2.csv": 30},
            (),
            {"people.csv", "people.utf8.csv", "people-2.csv"},
        ),
        # already gone from the workspace: nothing to delete
        (TURNS, [10], {"people-2.csv": 30}, (), set()),
        # turn records expired: a shared name that is the person's own
        ([], [10], {"people.csv": 10, "other.csv": 3}, ("people.csv", "other.csv"), {"people.csv"}),
        ([], [10], {"people.csv": 10}, (), set()),
    ],
    ids=["this-copy", "the-other-copy", "no-size", "gone-already", "no-records", "not-shared"],
)
def test_copies_of(turns, sizes, listed, shared, expected):
    assert copies_of(turns, ["people.csv"], sizes, listed, shared) == expected


def test_scrubbed_keeps_names_and_answers_not_values():
    block = f"{HEADER}\n- \"people.csv\" is in the workspace as 'people.csv' (30 bytes): query it\n  jane@x.com\n{END}"
    history = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "what's in it?"}, {"type": "text", "text": block}],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "run_sql",
                    "input": {"sql": "SELECT * FROM 'people.csv'"},
                }
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "jane@x.com"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t2", "name": "run_sql", "input": {"sql": "SELECT 1"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "One person."}]},
    ]
    kept = scrubbed(history, {"people.csv"})
    assert "jane@x.com" not in str(kept)
    assert "people.csv" in kept[0]["content"][1]["text"]  # the one line still names it
    assert kept[2]["content"][0]["content"] == GONE_RESULT and kept[4] == history[4]
    assert kept[5] == history[5] and scrubbed(history, {"other.csv"}) == history


async def test_two_threads_fetching_one_file_at_once_are_both_kept(make_store):
    """`fetched` read the record and wrote it back unguarded: of two threads fetching one file at once,
    the second write dropped the first thread, whose copy then outlived the file's deletion."""
    index = FileDeletions(make_store(), sandbox=None)  # type: ignore[arg-type]
    other = FileDeletions(make_store(), sandbox=None)  # type: ignore[arg-type]  (another replica)
    sessions = [f"sl-{i:024x}" for i in range(6)]
    await asyncio.gather(
        *(
            (index if i % 2 else other).fetched("slack:F1", sid, name="people.csv", size=10)
            for i, sid in enumerate(sessions)
        )
    )
    record = await index.store.get_record(KIND, "slack:F1")
    assert sorted(record["threads"]) == sessions


async def test_forgotten_threads_leave_the_index_and_old_entries_expire(make_store, settings):
    store = make_store()
    index = FileDeletions(store, sandbox=None)  # type: ignore[arg-type]
    for sid in ("sl-reset", "sl-kept"):
        await index.fetched("slack:F1", sid, name="people.csv", size=10)
    await index.fetched("slack:F2", "sl-reset", name="old.csv", size=3)
    await forget_for_reset(store, settings, "sl-reset")
    assert list((await store.get_record(KIND, "slack:F1"))["threads"]) == ["sl-kept"]
    assert await store.get_record(KIND, "slack:F2") is None  # no thread left: the record goes
    stale = {"id": "slack:F3", "threads": {"sl-old": {"names": ["a.csv"], "at": time.time() - KEEP_S - 1}}}
    await store.put_record(KIND, "slack:F3", stale)
    await expire_index(store)  # the hourly sweep
    assert await store.get_record(KIND, "slack:F3") is None
    assert await store.get_record(KIND, "slack:F1") is not None
