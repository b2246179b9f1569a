"""The sandbox protocol: where model-written SQL and Python run, one workspace per session.

Two implementations share the step code in `core/steps.py`: the local fork-server pool
(`core/sandbox_local.py`) and Modal (`core/sandbox_modal.py`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

StepKind = Literal["python", "sql", "warehouse"]

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StepResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class Sandbox(Protocol):
    """Runs steps in a session's workspace and reads files back out of it."""

    async def start(self) -> None:
        """Warm up (pre-import, pre-fork) so the first step does not pay for it."""

    async def run(self, request: StepRequest) -> StepResult:
        """Run one step; never raises for a step's own failure — that is an error result."""

    async def read_file(self, session_id: str, path: str) -> bytes:
        """Bytes of a workspace file (for uploads); raises FileNotFoundError/PermissionError."""

    async def write_file(self, session_id: str, path: str, data: bytes) -> None:
        """Place a file the bot fetched (warehouse result, S3 object) into a workspace."""

    async def list_files(self, session_id: str) -> list[dict]:
        """Files of a workspace, for prompts and exports."""

    def protections(self) -> dict[str, str]:
        """Which isolation protections are active, for `datathread doctor` and the start log."""

    async def close(self) -> None:
        """Stop workers; pending steps end with an error result."""
