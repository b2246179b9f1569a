"""`POST /slack/events`: what is checked before Bolt sees a request, and what Bolt's answer becomes.

Bolt parses the body before it verifies the signature and raises on what it cannot parse (a 500 with
a traceback in the log, for any stranger's garbage): the body is read with a cap (413), the signature
and timestamp are checked on the raw bytes (401), and a signed body Bolt cannot read is a 400; each
refusal is one log line.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from slack_bolt.adapter.starlette.async_handler import to_async_bolt_request, to_starlette_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot.http_body import BodyTooLarge, read_body, too_large
from bot.slack_identity import DELIVERED_TO, delivered_to

log = logging.getLogger("datathread.slack")

# Slack's replay window: a request whose timestamp is further than this from now is refused.
# https://docs.slack.dev/authentication/verifying-requests-from-slack
SIGNATURE_MAX_AGE_S = 60 * 5


def is_signed(body: bytes, headers: Mapping[str, str], secret: str, *, now: float) -> bool:
    """Slack's v0 signature over the raw bytes, with a fresh timestamp
    (https://docs.slack.dev/authentication/verifying-requests-from-slack).

    Not slack_sdk's `SignatureVerifier`: it decodes the body as UTF-8, `int()`s the timestamp and
    compares the signature as text, so a body of stray bytes, `X-Slack-Request-Timestamp: abc` or a
    non-ASCII signature raises instead of failing the check. Headers arrive as Latin-1 text (ASGI)."""
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not (stamp.isascii() and stamp.isdigit()) or abs(now - int(stamp)) > SIGNATURE_MAX_AGE_S:
        return False
    digest = hmac.new(secret.encode(), b"v0:%s:%s" % (stamp.encode(), body), hashlib.sha256).hexdigest()
    return hmac.compare_digest(f"v0={digest}".encode(), signature.encode("latin-1"))


def to_bolt_request(request: Request, body: bytes) -> AsyncBoltRequest | None:
    """The request as Bolt reads it, or None for a body Slack never sends: not UTF-8, JSON that is
    not an object (`[1,2]`), a form whose `payload` is not a JSON object. Bolt parses the body (and
    reads ids out of it) while building its request, and raises on these."""
    try:
        bolt_request = to_async_bolt_request(request, body)
    except (ValueError, TypeError, AttributeError, LookupError):  # UnicodeDecodeError, JSONDecodeError…
        return None
    return bolt_request if isinstance(bolt_request.body, dict) else None


def events_endpoint(app: AsyncApp, secret: str) -> Callable[[Request], Awaitable[Response]]:
    """The route handler: capped read, signature, parse, then Bolt (see the module docstring)."""

    async def slack_events(request: Request) -> Response:
        try:
            body = await read_body(request)
        except BodyTooLarge:
            log.warning("POST /slack/events: body over the size cap, refused (413)")
            return too_large()
        if not is_signed(body, request.headers, secret, now=time.time()):
            # Bolt's own answer to a bad signature; the hint is for a wrong SLACK_SIGNING_SECRET.
            log.warning(
                "POST /slack/events: bad or missing signature, or a stale timestamp (401); if every "
                "request from Slack gets this, SLACK_SIGNING_SECRET is not this Slack app's"
            )
            return JSONResponse({"error": "invalid request"}, status_code=401)
        if (bolt_request := to_bolt_request(request, body)) is None:
            log.warning("POST /slack/events: a signed body that is not a Slack payload (400)")
            return JSONResponse({"error": "not a Slack payload"}, status_code=400)
        bolt_request.context[DELIVERED_TO] = delivered_to(bolt_request.body)  # for its authorize
        response = await app.async_dispatch(bolt_request)
        return to_starlette_response(response)

    return slack_events
