"""The files bucket (DATATHREAD_FILES_BUCKET): where a session's download links put its files, and
deleting them.

Each link uploads the file under `<prefix>/files/<session>/<random>/<name>` (bot/files.py) and the
link dies after DATATHREAD_LINK_TTL_SECONDS — the object did not: nothing ever deleted one, so every
CSV sent to a Teams channel stayed in the bucket for good, after its thread was reset, forgotten or
swept. Now a session's objects go with its workspace (the idle sweep, `reset`, `datathread forget`);
a lifecycle rule on the prefix (docs/OPERATIONS.md) is the belt and braces for what a sweep misses.

A run over many threads (`datathread forget --channel`, the sweeps) deletes through one `BucketRun`:
after the bucket's first failure it is not called again in that run. Against an endpoint that never
answered, each thread cost ~41 s (two tries of botocore's timeouts) while holding its lock: 82 s for a
channel of two threads, hours for a workspace's.
"""

from __future__ import annotations

import logging

from core.config import Settings
from core.daemon_thread import within
from core.s3_client import DEADLINE_S, s3_client, s3_reason

log = logging.getLogger("datathread.files")

PAGE = 1000  # S3 lists and deletes at most 1,000 keys a call


def bucket_and_prefix(settings: Settings) -> tuple[str, str]:
    """DATATHREAD_FILES_BUCKET split into the bucket and the key prefix ("" for none)."""
    bucket, _, prefix = (settings.files_bucket or "").partition("/")
    return bucket, prefix.strip("/")


def session_prefix(settings: Settings, session_id: str) -> str:
    """The key prefix every object of this session's links starts with (ends in a slash)."""
    _, prefix = bucket_and_prefix(settings)
    return "/".join(p for p in (prefix, "files", session_id) if p) + "/"


def object_key(settings: Settings, session_id: str, token: str, path: str) -> str:
    """The key of one uploaded file: the session's prefix, a random part (links are not guessable) and its name."""
    return f"{session_prefix(settings, session_id)}{token}/{path}"


def _delete_sync(settings: Settings, session_id: str) -> int:
    bucket, _ = bucket_and_prefix(settings)
    client = s3_client(settings)
    deleted = 0
    token = None
    while True:  # list a page, delete it; the next page after the last key listed
        listed = client.list_objects_v2(
            Bucket=bucket,
            Prefix=session_prefix(settings, session_id),
            MaxKeys=PAGE,
            **({"ContinuationToken": token} if token else {}),
        )
        keys = [{"Key": o["Key"]} for o in listed.get("Contents", [])]
        if keys:
            answer = client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            failed = answer.get("Errors") or []
            deleted += len(keys) - len(failed)
            if failed:
                raise OSError(f"{len(failed)} object(s) were not deleted: {failed[0].get('Code', '')}")
        if not listed.get("IsTruncated"):
            return deleted
        token = listed.get("NextContinuationToken")


async def delete_session_objects(
    settings: Settings, session_id: str, *, deadline_s: float = DEADLINE_S
) -> int:
    """Delete every object of this session's links from the files bucket; how many (0 without a
    bucket). Raises what S3 raised (an OSError, botocore's errors, CallDeadline) for the caller to say."""
    if not settings.files_bucket:
        return 0
    return await within(lambda: _delete_sync(settings, session_id), deadline_s)


class BucketRun:
    """The files-bucket deletions of one run: each thread's objects, until the bucket first fails (a
    timeout, a refusal); from then on none is tried, and each is answered "not deleted" at once. The
    failure is logged once, with the thread it happened on."""

    def __init__(self, settings: Settings, *, deadline_s: float = DEADLINE_S, why: str = "") -> None:
        self.settings = settings
        self.deadline_s = deadline_s
        self.why = why  # what the run is, for the log line ("reset", "the idle sweep", …)
        self.failure: str | None = None  # the first failure's reason

    async def delete(self, session_id: str) -> int | None:
        """How many objects of the thread went; None when they were not deleted (this call failed, or
        an earlier one did and this one was not tried)."""
        if self.failure is not None:
            return None
        try:
            return await delete_session_objects(self.settings, session_id, deadline_s=self.deadline_s)
        except Exception as exc:  # the bucket is the operator's: said once, and the caller counts it
            self.failure = s3_reason(exc)
            log.warning(
                "%scould not delete the files bucket's objects of %s (%s); no other thread's are tried "
                "in this run",
                f"{self.why}: " if self.why else "",
                session_id,
                self.failure,
            )
            return None
