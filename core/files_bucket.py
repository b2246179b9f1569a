"""The files bucket (DATATHREAD_FILES_BUCKET): where a session's download links put its files, and
deleting them.

Each link uploads the file under `<prefix>/files/<session>/<random>/<name>` (bot/files.py) and the
link dies after DATATHREAD_LINK_TTL_SECONDS — the object did not: nothing ever deleted one, so every
CSV sent to a Teams channel stayed in the bucket for good, after its thread was reset, forgotten or
swept. Now a session's objects go with its workspace (the idle sweep, `reset`, `datathread forget`);
a lifecycle rule on the prefix (docs/OPERATIONS.md) is the belt and braces for what a sweep misses.
"""

from __future__ import annotations

import logging

from core.config import Settings
from core.daemon_thread import within
from core.s3_client import DEADLINE_S, s3_client

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


async def delete_session_objects(settings: Settings, session_id: str) -> int:
    """Delete every object of this session's links from the files bucket; how many (0 without a
    bucket). Raises what S3 raised (an OSError, botocore's errors, CallDeadline) for the caller to say."""
    if not settings.files_bucket:
        return 0
    return await within(lambda: _delete_sync(settings, session_id), DEADLINE_S)
