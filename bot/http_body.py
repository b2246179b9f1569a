"""Request bodies read with a size cap, for the routes anyone on the internet can POST to.

Starlette's `request.body()` reads whatever arrives, however big, before a route can look at it: an
unsigned 200 MB body to `/slack/events` was read whole (seconds of CPU and its size in memory) only to
be refused with a 401. Here a body is refused as soon as it is known to be too big, and the rest of it
is never read: the 413 says `Connection: close`, so the server drops the connection instead of reading
the remainder to reach the next request on it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

# 1 MiB. What Slack and Teams send is small: a Slack message's text is cut at 40,000 characters and an
# interaction carries at most a 50-block message or a 100-block modal (tens to a few hundred KB); a
# Teams activity references files and images by URL. Anything bigger is not from them.
BODY_LIMIT = 1 << 20


class BodyTooLarge(Exception):
    """The request's body is over the cap; nothing more of it was read."""


async def read_body(request: Request, *, limit: int = BODY_LIMIT) -> bytes:
    """The whole body, or `BodyTooLarge` as soon as it is over `limit` bytes: from Content-Length
    before anything is read, else counted while it streams in (a chunked body declares no length)."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def too_large() -> JSONResponse:
    """413, closing the connection so that the unread rest of the body is not read after all."""
    return JSONResponse({"error": "request body too large"}, status_code=413, headers={"connection": "close"})
