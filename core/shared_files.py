"""Files people share with a question: what a surface fetches, and the sentence for what it doesn't.

A person drops `sales.csv` into a Slack thread, a Teams chat or `datathread ask --file` and asks about
it. Each surface fetches the bytes with its own client (it alone holds the token) into a `SharedFile`;
the core then writes them into the thread's workspace and describes them from inside the sandbox
(`core/file_intake.py`). The decisions every surface makes the same way live here, so Slack, Teams and
the terminal refuse the same files in the same words before downloading a byte.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from core.events import SharedFile

# What DuckDB (or pandas, for Excel) reads in the sandbox: the same list `load_file` takes from S3.
READABLE = ("csv", "tsv", "parquet", "json", "jsonl", "ndjson", "xlsx")
MAX_FILES = 10  # per question: more are refused by name, the first ten are fetched


def kind_of(name: str) -> str:
    """The file's kind by its extension, lower case ("" for none). A name that is only an extension
    (`.csv`) has that kind: a file shared as `.csv` is a CSV, not a file without an extension."""
    base = PurePosixPath(name.replace("\\", "/")).name
    return base.rpartition(".")[2].lower() if "." in base else ""


def refusal_before_fetch(name: str, size: int | None, *, limit_mb: int, index: int = 0) -> SharedFile | None:
    """The refused `SharedFile` for a file not worth fetching, or None to fetch it.

    `size` is what the platform says (None when it doesn't: the fetch then stops at the limit);
    `index` is the file's place among those shared with the question."""
    if index >= MAX_FILES:
        return SharedFile(name, refusal=f"I read at most {MAX_FILES} files shared with one question.")
    kind = kind_of(name)
    if kind not in READABLE:
        what = f"a .{kind} file" if kind else "a file without an extension"
        return SharedFile(
            name, refusal=f"{what.capitalize()} is not one I can read; I read {', '.join(READABLE)}."
        )
    if size is not None and size > limit_mb * 2**20:
        return too_large(name, limit_mb)
    return None


def too_large(name: str, limit_mb: int) -> SharedFile:
    """The refusal for a file over DATATHREAD_SHARED_FILE_MB (said before or during the fetch)."""
    return SharedFile(name, refusal=f"It is larger than the {limit_mb} MB I take from a shared file.")
