"""The jobs a web process handed to its turn workers, written down until they end, so that a thread
whose answer was cut short by a killed `datathread serve` (SIGKILL, the OOM killer, a power cut) hears
so after the restart. Before, a live web process told the threads of a worker that died, but when the
web process died with its workers nobody did: the answer stopped half-written, without a word.

One small file per job under DATATHREAD_HOME/jobs, named by the process that wrote it; removed when the
job ends or its thread was told. A starting web process tells the threads of files whose writer died
on this host (core/lock_owner.py) — claiming each by renaming it first, so two starting replicas never
tell one thread twice. Only for worker pipes on one host: with Redis, jobs live in its streams, and
another replica's workers find a dead replica's jobs (core/runner_redis.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from pathlib import Path

from core.lock_owner import holder_died, new_owner
from core.runner import TurnJob

log = logging.getLogger("datathread.runner")


class JobJournal:
    """Files of this process's unfinished jobs (`write`, `done`), and the orphans of dead ones."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.owner = new_owner()
        self.prefix = uuid.uuid4().hex[:12]

    def write(self, job_id: int, job: TurnJob) -> None:
        """Note a job handed to a worker (atomically: a reader never sees half a file)."""
        path = self._path(job_id)
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            part = path.with_suffix(".part")
            part.write_text(json.dumps({"owner": self.owner, "job": job.to_dict()}))
            os.replace(part, path)
        except OSError as exc:  # a full disk costs this safety net, never the answer
            log.warning("could not note a job for after a restart: %s", exc)

    def done(self, job_id: int) -> None:
        with contextlib.suppress(OSError):
            self._path(job_id).unlink()

    def clear(self) -> None:
        """Forget every job of this process (a clean stop has told or finished them all)."""
        for path in self._mine():
            with contextlib.suppress(OSError):
                path.unlink()

    def orphans(self) -> list[TurnJob]:
        """Jobs whose writer died on this host, each claimed (renamed) before it is returned."""
        found = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            try:
                note = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if path.name.startswith(self.prefix) or not holder_died(str(note.get("owner", ""))):
                continue
            claimed = path.with_suffix(f".telling-{os.getpid()}")
            try:
                os.rename(path, claimed)
            except OSError:  # another starting process has it
                continue
            job = note.get("job") or {}
            found.append(
                TurnJob(str(job.get("kind", "")), dict(job.get("payload") or {}), bool(job.get("quick")))
            )
            with contextlib.suppress(OSError):
                claimed.unlink()
        return found

    def _path(self, job_id: int) -> Path:
        return self.folder / f"{self.prefix}-{job_id}.json"

    def _mine(self) -> list[Path]:
        return list(self.folder.glob(f"{self.prefix}-*.json")) if self.folder.is_dir() else []
