"""Download links for workspace files: HMAC-signed, time-limited `/files/...` URLs served by this app,
or S3 presigned URLs when `DATATHREAD_FILES_BUCKET` is set.

Chat surfaces that cannot upload a file into a conversation (Teams channels and group chats) post a
link instead. A link names one file of one session and dies after `DATATHREAD_LINK_TTL_SECONDS`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import mimetypes
import secrets
import time
import unicodedata
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from core.config import Settings
from core.daemon_thread import CallDeadline, within
from core.files_bucket import bucket_and_prefix, object_key
from core.s3_client import DEADLINE_S, s3_client, s3_reason
from core.sessions import StoreUnavailable

log = logging.getLogger("datathread.files")


@dataclass
class LinkSigner:
    """Signs and checks `/files/<session>/<path>?exp=..&sig=..` URLs with one secret."""

    secret: bytes
    public_url: str
    ttl_s: int
    clock: Callable[[], float] = field(default=time.time)

    def params(self, session_id: str, path: str, *, ttl_s: int | None = None) -> dict[str, str]:
        """`{"exp", "sig"}` for one file: the query of a link, or a context a platform echoes back."""
        expires = int(self.clock()) + (ttl_s or self.ttl_s)
        return {"exp": str(expires), "sig": self._mac(session_id, path, expires)}

    def sign(self, session_id: str, path: str, *, ttl_s: int | None = None) -> str:
        """A URL anyone holding it may use until it expires (so keep the TTL short)."""
        quoted = urllib.parse.quote(f"{session_id}/{path}")
        query = urllib.parse.urlencode(self.params(session_id, path, ttl_s=ttl_s))
        return f"{self.public_url.rstrip('/')}/files/{quoted}?{query}"

    def check(self, session_id: str, path: str, expires: str, sig: str) -> str | None:
        """None when the link is valid now; otherwise why not ("expired", "bad signature")."""
        if not expires.isdigit():
            return "bad signature"
        if not hmac.compare_digest(self._mac(session_id, path, int(expires)), sig):
            return "bad signature"
        if int(expires) < self.clock():
            return "expired"
        return None

    def _mac(self, session_id: str, path: str, expires: int) -> str:
        msg = f"{session_id}\n{path}\n{expires}".encode()
        digest = hmac.new(self.secret, msg, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def build_signer(settings: Settings, kept: bytes) -> LinkSigner:
    """The signer for these settings: DATATHREAD_LINK_SECRET when set, else `kept`, the secret the
    bot's processes share through the session store (`Threads.kept_secret`). It was a random secret
    per process: the turn worker signed each link and the web process, with a secret of its own,
    refused every one ("bad signature") — Teams channel files and "Export notebook" never worked."""
    if settings.link_secret is not None and settings.link_secret.get_secret_value():
        kept = settings.link_secret.get_secret_value().encode()
    return LinkSigner(secret=kept, public_url=settings.public_url, ttl_s=settings.link_ttl_seconds)


@dataclass
class FileLinks:
    """Download links for workspace files, and the `/files/...` route that serves our own."""

    settings: Settings
    read: Callable[[str, str], Awaitable[bytes]]  # a workspace file's bytes (through the thread seam)
    kept_secret: Callable[[str], Awaitable[bytes]]  # the store's shared secret (through the thread seam)
    _signer: LinkSigner | None = None

    async def signer(self) -> LinkSigner:
        """The app's one signer, built on first use (the store is asked once per process)."""
        if self._signer is None:
            kept = b"" if self.settings.link_secret is not None else await self.kept_secret("download-links")
            self._signer = build_signer(self.settings, kept)
        return self._signer

    async def download_link(self, session_id: str, path: str, data: bytes | None = None) -> str:
        """A time-limited URL for a workspace file: S3 presigned when a bucket is set, else our own."""
        if not self.settings.files_bucket:
            return (await self.signer()).sign(session_id, path)
        if data is None:
            data = await self.read(session_id, path)
        try:  # a daemon thread with a deadline, as every S3 call (core/s3_client.py)
            return await within(lambda: _presign_s3(self.settings, session_id, path, data), DEADLINE_S)
        except CallDeadline:
            why = f"the files bucket did not answer within {DEADLINE_S:g} s"
        except Exception as exc:  # botocore's: in words, never its URL (the bucket's key, a signature)
            why = f"the files bucket could not take it: {s3_reason(exc)}"
        # the one line for whoever runs datathread (AccessDenied, no credentials): the caller tells the person
        log.warning("files: no download link for %r of session %s: %s", path, session_id, why)
        raise LinkUnavailable(why)

    async def offer(self, session_id: str, path: str) -> dict[str, str]:
        """The context a platform echoes back when a person answers one offer of a file (Teams' file
        consent): signed like a link, with an id of its own so that the offer is taken once however
        often its card is clicked (`offer` need not be signed: it only tells offers apart)."""
        context = (await self.signer()).params(session_id, path)
        return {**context, "session_id": session_id, "path": path, "offer": secrets.token_hex(8)}

    def routes(self) -> list[Route]:
        """`GET /files/<session>/<path>?exp&sig` for bot/server.py."""
        return [Route("/files/{session_id}/{path:path}", self._serve, methods=["GET"])]

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def _serve(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        path = request.path_params["path"]
        try:
            signer = await self.signer()
        except StoreUnavailable:
            return PlainTextResponse("Links cannot be checked right now; try again shortly.", status_code=503)
        problem = signer.check(
            session_id, path, request.query_params.get("exp", ""), request.query_params.get("sig", "")
        )
        if problem:
            status = 410 if problem == "expired" else 403
            return PlainTextResponse(f"This link is not valid ({problem}).", status_code=status)
        try:
            data = await self.read(session_id, path)
        except (FileNotFoundError, PermissionError, IsADirectoryError, ValueError):
            return PlainTextResponse("This file no longer exists.", status_code=404)
        return Response(
            data,
            media_type=_mime(path),
            headers={"content-disposition": attachment(path.rsplit("/", 1)[-1]), "cache-control": "private"},
        )


class LinkUnavailable(Exception):
    """The files bucket did not take the file (no answer in time, refused, no credentials); logged
    where it is raised, the message is a few words for a person. Not an OSError: callers that show
    a missing file's reason must not take this for one."""


_UNSHOWN = ("Cc", "Zl", "Zp")  # control characters, line and paragraph separators
# Direction marks, embeddings, overrides and isolates: "invoice\u202egpj.exe" is offered as
# "invoiceexe.jpg". Emoji joiners (also format characters) stay.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def attachment(name: str) -> str:
    """The Content-Disposition of a download named `name`, in any script (RFC 6266): an ASCII
    `filename` for old clients and `filename*` with the UTF-8 name (RFC 5987). A header must be
    latin-1: "遅延.csv" in `filename` made Starlette raise, a 500 for the person. Control characters,
    quotes and backslashes never reach the header, where they could end it or its quoted string."""
    name = (
        "".join(c for c in name if unicodedata.category(c) not in _UNSHOWN and c not in _BIDI) or "download"
    )
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()  # café → cafe
    fallback = "".join(c if c.isprintable() and c not in '"\\' else "_" for c in plain)
    stem, dot, ext = fallback.rpartition(".") if "." in fallback else (fallback, "", "")
    if not stem.strip("_. "):  # nothing of the name is ASCII ("遅延.csv"): a plain one, same extension
        fallback = f"download.{ext}" if ext else "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{urllib.parse.quote(name, safe='')}"


def _presign_s3(settings: Settings, session_id: str, path: str, data: bytes) -> str:
    """Upload the file and sign a link to it, on a client with bounded reads and tries: botocore's
    defaults (60 s reads, several tries) held a Teams file's delivery for minutes when the files
    bucket's endpoint never answered, and `asyncio.to_thread` kept the process alive after Ctrl-C."""
    bucket, _ = bucket_and_prefix(settings)
    key = object_key(settings, session_id, secrets.token_hex(8), path)  # deleted with the workspace
    client = s3_client(settings)
    client.put_object(Bucket=bucket, Key=key, Body=data, ContentType=_mime(path))
    return client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=settings.link_ttl_seconds
    )


def _mime(path: str) -> str:
    return mimetypes.guess_type(path)[0] or "application/octet-stream"
