"""Files from S3: which buckets/prefixes the bot may read, listing them, and fetching one with a size cap.

The bot downloads with its own credentials (environment or instance role, as boto3 finds them) and
places the bytes in a workspace through the sandbox; credentials never enter the sandbox. boto3 is
blocking, so every call runs in a daemon thread with a deadline for the whole call (core/daemon_thread.py),
on a client with bounded reads and tries (core/s3_client.py):
an endpoint that never answered held a step for 180 s (boto's 60 s read timeout, three tries), one that
dripped its answer for ever, and either kept the process alive after Ctrl-C. An endpoint that answers
with a web page (a proxy's login) is said to be one, not listed as "0 files" or loaded as data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from core.config import Settings, split_list
from core.daemon_thread import CallDeadline, in_daemon_thread, within
from core.s3_client import DEADLINE_S, s3_client, s3_reason
from core.wording import counted

T = TypeVar("T")


class S3Refusal(Exception):
    """A request the policy refuses (outside the allowed prefixes, too large), or S3 out of reach; one
    sentence for the model. `listed`: what a listing found in the places that did answer."""

    def __init__(self, message: str, *, listed: list[S3Object] | None = None):
        super().__init__(message)
        self.listed = listed or []


@dataclass(frozen=True)
class S3Root:
    """One allowed place: a bucket and a key prefix ('' = the whole bucket)."""

    bucket: str
    prefix: str = ""

    def covers(self, bucket: str, key: str) -> bool:
        return bucket == self.bucket and key.startswith(self.prefix)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class S3Object:
    """A listed object."""

    bucket: str
    key: str
    size: int
    modified: datetime | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def parse_roots(value: str) -> tuple[S3Root, ...]:
    """`"bucket[/prefix],..."` → roots; a prefix always ends with '/' so 'data' never matches 'database'."""
    roots = []
    for item in split_list(value):
        bucket, _, prefix = item.removeprefix("s3://").partition("/")
        prefix = prefix.strip("/")
        roots.append(S3Root(bucket, f"{prefix}/" if prefix else ""))
    return tuple(roots)


def parse_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` (or `bucket/key`) → (bucket, key)."""
    bucket, _, key = uri.strip().removeprefix("s3://").partition("/")
    return bucket, key


class S3Source:
    """Read-only access to the configured buckets/prefixes, with a per-file size cap."""

    def __init__(
        self,
        roots: tuple[S3Root, ...],
        *,
        max_bytes: int,
        client_factory: Any,
        deadline_s: float = DEADLINE_S,
        endpoint: str = "",
    ):
        self.roots = roots
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self.endpoint = endpoint  # the configured endpoint, named even when making the client ran out of time
        self._client_factory = client_factory
        self._client: Any = None

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Source | None:
        """The S3 source the settings describe, or None when no bucket is configured."""
        roots = parse_roots(settings.s3_buckets)
        if not roots:
            return None

        def client() -> Any:
            made = s3_client(settings)  # bounded reads and tries (core/s3_client.py)
            made.meta.events.register("after-call.s3", refuse_web_pages)
            return made

        max_bytes = settings.s3_max_file_mb * 1024 * 1024
        deadline_s = min(DEADLINE_S, settings.step_timeout)  # a call to S3 takes no longer than a step may
        endpoint = str(settings.s3_endpoint_url or "").rstrip("/")
        return cls(
            roots, max_bytes=max_bytes, client_factory=client, deadline_s=deadline_s, endpoint=endpoint
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def where(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def check(self, bucket: str, key: str) -> None:
        """Refuse anything outside the configured roots."""
        if not bucket or not any(r.covers(bucket, key) for r in self.roots):
            raise S3Refusal(f"s3://{bucket}/{key} is outside what I may read ({self.where()}).")

    async def list(self, prefix: str | None = None, *, limit: int = 200) -> list[S3Object]:
        """Objects under `prefix` (an s3:// URI or bucket/key prefix), or under every root: the places
        listed at once, within one deadline for the whole listing (it was one per root, one after the
        other: N roots behind an endpoint that never answers, N × 41 s). A place that did not answer
        in time is named in the S3Refusal, which carries what the others listed (`listed`)."""
        places = self._places(prefix)
        ends = time.monotonic() + self.deadline_s
        await self._call(lambda: self.client, places[0][0])  # built once, before the threads share it
        listings = [
            asyncio.ensure_future(
                in_daemon_thread(lambda b=b, k=k: self._list_sync(b, k, limit), name="datathread-s3")
            )
            for b, k in places
        ]
        try:
            _, pending = await asyncio.wait(listings, timeout=max(0.0, ends - time.monotonic()))
        finally:  # given up, or the caller cancelled: nobody reads the rest (their threads are daemons)
            for listing in listings:
                listing.cancel()
        return self._gathered(list(zip(places, listings, strict=True)), pending, limit)

    def _gathered(self, listings: list, pending: set, limit: int) -> list[S3Object]:
        """The objects the places listed, in the roots' order; an S3Refusal (with them) naming every
        place that did not answer — past the deadline, or its client's tries timed out — or else the
        first other failure."""
        answered = [(place, listing) for place, listing in listings if listing not in pending]
        found = [o for _, listing in answered if not listing.exception() for o in listing.result()]
        out = found[:limit]
        silent = [place for place, listing in answered if _timed_out(listing.exception())]
        unanswered = [
            f"s3://{b}/{k}" for (b, k), listing in listings if listing in pending or (b, k) in silent
        ]
        if unanswered and (
            pending or len(listings) > 1
        ):  # one place's own timeout: said below, as any call's
            what = f"bucket {listings[0][0][0]}" if len(listings) == 1 else " and ".join(unanswered)
            when = "in time" if silent else f"within {self.deadline_s:g} s"
            others = f"; the other places hold the {counted(len(out), 'file')} listed here" if out else ""
            raise S3Refusal(f"S3 ({self._place(what)}) did not answer {when}{others}.", listed=out)
        failed = [(place, listing.exception()) for place, listing in answered if listing.exception()]
        if failed:
            (bucket, _), exc = failed[0]
            raise self._refusal(exc, bucket, listed=out)
        return out

    def _places(self, prefix: str | None) -> list[tuple[str, str]]:
        """(bucket, key prefix) pairs to list for `prefix`: itself, the roots inside it, or every root."""
        if not prefix:
            return [(r.bucket, r.prefix) for r in self.roots]
        bucket, key = parse_uri(prefix)
        if any(r.covers(bucket, key) for r in self.roots):
            return [(bucket, key)]
        # a prefix above a root ("s3://b/") lists the roots inside it
        inner = [r for r in self.roots if r.bucket == bucket and r.prefix.startswith(key)]
        if not inner:
            self.check(bucket, key)
        return [(r.bucket, r.prefix) for r in inner]

    async def _call(self, fn: Callable[[], T], bucket: str) -> T:
        """One blocking S3 call, bounded as a whole; its failures as one sentence (S3Refusal)."""
        try:
            return await within(fn, self.deadline_s, name="datathread-s3")
        except CallDeadline:
            raise S3Refusal(
                f"S3 ({self._place(f'bucket {bucket}')}) did not answer within {self.deadline_s:g} s."
            ) from None
        except Exception as exc:
            raise self._refusal(exc, bucket) from None

    def _refusal(self, exc: BaseException, bucket: str, *, listed: list[S3Object] | None = None) -> Exception:
        """A failed call's exception as it goes on: ours and the policy's as they are, botocore's as one
        sentence with the reason in words (never the endpoint's token)."""
        if isinstance(exc, S3Refusal | KeyError | ValueError):
            return exc
        reason = s3_reason(exc) if isinstance(exc, Exception) else type(exc).__name__
        return S3Refusal(
            f"Could not read from S3 ({self._place(f'bucket {bucket}')}): {reason}.", listed=listed
        )

    def _place(self, what: str) -> str:
        # the client's (AWS's own, when none is configured) once made; making it can take the whole deadline
        endpoint = self.endpoint or getattr(getattr(self._client, "meta", None), "endpoint_url", "") or ""
        return what + (f" at {endpoint}" if endpoint else "")

    def _list_sync(self, bucket: str, prefix: str, limit: int) -> list[S3Object]:
        out: list[S3Object] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for item in page.get("Contents", []):
                out.append(S3Object(bucket, item["Key"], int(item["Size"]), item.get("LastModified")))
                if len(out) >= limit:
                    return out
        return out

    async def fetch(self, uri: str) -> tuple[str, bytes]:
        """The object's key and bytes; refuses before downloading when it is over the size cap."""
        bucket, key = parse_uri(uri)
        self.check(bucket, key)
        head = await self._call(lambda: self.client.head_object(Bucket=bucket, Key=key), bucket)
        size = int(head["ContentLength"])
        if size > self.max_bytes:
            raise S3Refusal(
                f"s3://{bucket}/{key} is {_mb(size)}, over the {_mb(self.max_bytes)} limit for loading "
                "files; ask for a smaller extract (filtered or aggregated) instead."
            )
        if size == 0:
            return key, b""
        # Range caps the download even if the object grew after the HEAD.
        body = await self._call(lambda: self._get_sync(bucket, key), bucket)
        if len(body) > self.max_bytes:
            raise S3Refusal(f"s3://{bucket}/{key} is over the {_mb(self.max_bytes)} limit for loading files.")
        return key, body

    def _get_sync(self, bucket: str, key: str) -> bytes:
        reply = self.client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{self.max_bytes}")
        with reply["Body"] as body:
            return body.read()


def refuse_web_pages(http_response: Any, model: Any, **_: Any) -> None:
    """botocore's hook after every S3 call: a web page (a proxy's login, a captive portal) answered 200,
    and was parsed as an empty listing or saved as the file. No file the tools load is a web page."""
    kind = (http_response.headers.get("content-type") or "").lower()
    an_object = model.name in ("HeadObject", "GetObject") and http_response.headers.get("etag")
    if kind.startswith("text/html") and not an_object:  # an object's type is its owner's to set
        raise S3Refusal(
            f"The S3 endpoint answered {model.name} with a web page, not an S3 reply (a proxy or a login "
            "page, perhaps): an admin needs to check DATATHREAD_S3_ENDPOINT_URL and the network."
        )


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):,.1f} MB"


def _timed_out(exc: BaseException | None) -> bool:
    """botocore's tries all timed out: the endpoint took the connection, or not even that, and never answered."""
    if exc is None:
        return False
    from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError

    return isinstance(exc, ReadTimeoutError | ConnectTimeoutError)
