"""The sandbox protocol: where model-written SQL and Python run, one workspace per session.

Two implementations share the step code in `core/steps.py`: the local fork-server pool
(`core/sandbox_local.py`) and Modal (`core/sandbox_modal.py`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from core.file_stems import safe_file_stem

StepKind = Literal["python", "sql", "warehouse"]

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

# Bounds on every field of a result that crossed from a step (see `StepResult.untrusted`).
ERROR_BYTES = 4_000
MAX_COLUMNS, NAME_CHARS, TYPE_CHARS = 200, 120, 60  # bytes, for text
MAX_FILES, PATH_CHARS, KIND_CHARS = 200, 300, 16
MAX_COUNT = 2**62


def is_saved_name(value: object) -> bool:
    """A result file's name as a step may report it: a plain stem (`safe_file_stem`'s: letters of any
    script, digits, `_.-`) and `.parquet`. ASCII alone was taken: `save_as="Verspätung"` wrote
    `Verspätung.parquet` and the model got no rows, columns or preview for it."""
    if not isinstance(value, str) or not value.endswith(".parquet"):
        return False
    stem = value.removesuffix(".parquet")
    return bool(stem) and safe_file_stem(stem, "") == stem


def is_valid_session_id(session_id: str) -> bool:
    """Session ids become directory names; only a safe alphabet may pass."""
    return bool(_SESSION_ID.match(session_id))


@dataclass(frozen=True)
class StepRequest:
    """One step to run in a session's workspace. Plain data: crosses process and network boundaries."""

    kind: StepKind
    session_id: str
    code: str = ""  # Python source, or SQL
    save_as: str | None = None
    timeout_s: float = 120.0
    memory_mb: int = 4096
    output_bytes: int = 20_000
    file_mb: int = 1024
    preview_rows: int = 20
    preview_bytes: int = 8_000
    shared: tuple[str, ...] = ()  # files people shared here: a saved result never takes their names

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class StepResult:
    """What a step produced. `error` is for the model (actionable); `killed` marks a limit breach."""

    ok: bool
    output: str = ""
    error: str = ""
    files: list[dict] = field(default_factory=list)  # [{"path", "size", "kind"}] new or changed
    rows: int | None = None
    columns: list[dict] = field(default_factory=list)  # [{"name", "type"}]
    preview: str = ""
    saved_as: str | None = None
    duration_s: float = 0.0
    killed: bool = False
    bytes_scanned: int | None = None
    bytes_billed: int | None = None  # set by the warehouse itself, never by a step's own result

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StepResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @classmethod
    def untrusted(cls, data: Any, request: StepRequest) -> StepResult:
        """A result that came from code the model wrote (a step child, a Modal container), made safe.

        Every field is type-checked and bounded before anything else touches it: text is clipped to
        the request's limits, column and file lists are capped in count and length, counts must be
        plain non-negative integers. Whatever the step sent, the bot gets a `StepResult` of bounded
        size (tens of KB), so no later handling — redaction, rendering, storage — can be flooded.
        """
        if not isinstance(data, dict):
            return cls(ok=False, error="The step returned no valid result.")
        rows = _count(data.get("rows"))
        saved_as = data.get("saved_as")
        saved_as = saved_as if is_saved_name(saved_as) else None
        return cls(
            ok=data.get("ok") is True,
            output=clip_text(data.get("output"), request.output_bytes),
            error=clip_text(data.get("error"), ERROR_BYTES),
            files=_files(data.get("files")),
            rows=rows if rows is not None or saved_as is None else 0,
            columns=_columns(data.get("columns")),
            preview=clip_text(data.get("preview"), request.preview_bytes),
            saved_as=saved_as,
            duration_s=_seconds(data.get("duration_s")),
            killed=data.get("killed") is True,
            bytes_scanned=_count(data.get("bytes_scanned")),
        )


def clip_text(value: Any, limit: int, *, note: bool = True) -> str:
    """`value` as text of at most `limit` UTF-8 bytes (a note, or for short fields '…', says where it
    was cut); non-text → ''.

    Lone surrogates (valid in JSON, not in UTF-8) become '?', so nothing later fails to encode it."""
    if not isinstance(value, str):
        return ""
    data = value[: limit + 1].encode(errors="replace")  # a char is ≥ 1 byte: enough to decide
    if len(value) <= limit and len(data) <= limit:
        return data.decode()
    tail = f"\n… [cut at {limit} bytes]" if note else "…"
    room = max(0, limit - len(tail.encode()))
    return data[:room].decode(errors="ignore") + tail


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return value if ok else None


def _seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return min(max(float(value), 0.0), 1e6)
    return 0.0


def _columns(value: Any) -> list[dict]:
    if not isinstance(value, list):
        return []
    out = []
    for column in value[:MAX_COLUMNS]:
        if isinstance(column, dict):
            name, kind = column.get("name"), column.get("type")
            name, kind = clip_text(name, NAME_CHARS, note=False), clip_text(kind, TYPE_CHARS, note=False)
            out.append({"name": name, "type": kind})
    return out


def _files(value: Any) -> list[dict]:
    if not isinstance(value, list):
        return []
    out: list[dict] = []
    for entry in value[: 50 * MAX_FILES]:  # bounded work, whatever the list holds
        if len(out) == MAX_FILES:
            break
        if not isinstance(entry, dict):
            continue
        path, size = entry.get("path"), _count(entry.get("size"))
        if not isinstance(path, str) or not 0 < len(path) <= PATH_CHARS or "\x00" in path or size is None:
            continue  # a path too long to be real (or not text) is not a file the bot will look for
        if path.startswith("/") or ".." in path.split("/"):
            continue
        out.append({"path": path, "size": size, "kind": clip_text(entry.get("kind"), KIND_CHARS, note=False)})
    return out


class WorkspaceFull(OSError):
    """A file the bot was to place in a workspace (a warehouse result, an S3 object, a notebook) would
    take it past its quota: those were written past it (6.9 MB into a 1 MB workspace), where a step's
    own writes never go. The message is for the model and people."""


class Sandbox(Protocol):
    """Runs steps in a session's workspace and reads files back out of it."""

    async def start(self) -> None:
        """Warm up (pre-import, pre-fork) so the first step does not pay for it."""

    async def run(self, request: StepRequest) -> StepResult:
        """Run one step; never raises for a step's own failure — that is an error result."""

    async def read_file(self, session_id: str, path: str) -> bytes:
        """Bytes of a workspace file (for uploads); raises FileNotFoundError/PermissionError."""

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        """Place a file the bot fetched (warehouse result, S3 object) into a workspace, within its
        quota (WorkspaceFull)."""

    async def list_files(self, session_id: str) -> list[dict]:
        """Files of a workspace, for prompts and exports."""

    def protections(self) -> dict[str, str]:
        """Which isolation protections are active, for `datathread doctor` and the start log."""

    async def close(self) -> None:
        """Stop workers; pending steps end with an error result."""
