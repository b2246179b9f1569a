"""`POST /slack/events`: what is checked before Bolt sees a request, and what Bolt's answer becomes.

Bolt parses the body before it verifies the signature and raises on what it cannot parse, and its
listeners read the fields Slack always sends (`command["team_id"]`, `event["channel"]`…): a stranger's
garbage, or a signed body of the wrong shape, was a 500 with a traceback in the log. Here the body is
read with a cap (413), the signature and timestamp are checked on the raw bytes (401), and a signed
body that is not shaped like what Slack sends is a 400 — each refusal one log line. A well-formed
payload no listener takes (an event type the app does not handle, another app's slash command) is
acknowledged with a 200 and one line: Slack retries an event that gets anything else
(https://docs.slack.dev/apis/events-api/#failure-conditions).
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


# The fields the listeners (bot/slack_app.py) and Bolt's middleware read, with the type Slack sends:
# (required, optional) per kind of payload. https://docs.slack.dev/reference/events,
# https://docs.slack.dev/interactivity/implementing-slash-commands#app_command_handling,
# https://docs.slack.dev/reference/interaction-payloads/block_actions-payload
Fields = tuple[dict[str, type], dict[str, type]]
MESSAGE_EVENT: Fields = (
    {"channel": str, "ts": str},
    {"text": str, "thread_ts": str, "channel_type": str},
)
EVENTS: dict[str, Fields] = {
    "message": MESSAGE_EVENT,
    "app_mention": MESSAGE_EVENT,
    "app_home_opened": ({"user": str}, {"tab": str}),
    "assistant_thread_started": ({}, {"assistant_thread": dict}),
}
COMMAND: Fields = ({"team_id": str, "channel_id": str, "user_id": str}, {"text": str})
BLOCK_ACTIONS: Fields = (
    {"user": dict, "actions": list},
    {"team": dict, "container": dict, "message": dict, "channel": dict},
)
ACTION: Fields = ({"action_id": str}, {"value": str, "selected_option": dict})


def misfit(obj: dict, fields: Fields, where: str) -> str | None:
    """The first field of `obj` that is missing (when required) or of another type, named, or None."""
    required, optional = fields
    for key, kind in (required | optional).items():
        value = obj.get(key)
        if (value is not None or key in required) and not isinstance(value, kind):
            return f"{where}.{key} is not {'an' if kind is dict else 'a'} {kind.__name__}"
    return None


def payload_problem(body: dict) -> str | None:
    """Why a signed, parsed body is not a payload Slack sends (a phrase for the log), or None.
    Everything Slack posts has a `type` (events, interactivity's `payload`) or is a slash command
    or Slack's `ssl_check`."""
    if not isinstance(body.get("type"), str) and "command" not in body and "ssl_check" not in body:
        return "no type, command or payload"
    if body.get("type") == "event_callback":
        event = body.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return "an event_callback without an event object"
        if not isinstance(event.get("subtype"), str | None) or not isinstance(event.get("user"), str | None):
            return "event.subtype or event.user is not a string"
        fields = EVENTS.get(event["type"])
        if fields is None or (event["type"] in ("message", "app_mention") and event.get("user") is None):
            return None  # not answered: nothing more is read of it
        return misfit(event, fields, "event")
    if "command" in body:
        return misfit(body, COMMAND, "command")
    if body.get("type") == "block_actions":
        if problem := misfit(body, BLOCK_ACTIONS, "payload"):
            return problem
        if not isinstance(body["user"].get("id"), str):
            return "payload.user.id is not a str"
        for action in body["actions"]:
            if not isinstance(action, dict) or (problem := misfit(action, ACTION, "action")):
                return problem or "an action is not an object"
    return None


def events_endpoint(app: AsyncApp, secret: str) -> Callable[[Request], Awaitable[Response]]:
    """The route handler: capped read, signature, shape, then Bolt (see the module docstring)."""

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
        bolt_request = to_bolt_request(request, body)
        problem = "not a JSON object" if bolt_request is None else payload_problem(bolt_request.body)
        if problem:
            log.warning(
                "POST /slack/events: a signed body that is not a Slack payload (%s), refused (400)", problem
            )
            return JSONResponse({"error": "not a Slack payload"}, status_code=400)
        bolt_request.context[DELIVERED_TO] = delivered_to(bolt_request.body)  # for its authorize
        response = await app.async_dispatch(bolt_request)
        if response.status == 404:  # Bolt's "unhandled request": nothing of ours listens for it
            log.info("POST /slack/events: %s, ignored", describe(bolt_request.body))
            return Response(status_code=200)
        return to_starlette_response(response)

    return slack_events


def describe(body: dict) -> str:
    """What a payload is, in a few words: `an event of type reaction_added`, `the command /other`."""
    if isinstance(body.get("event"), dict):
        return f"an event of type {str(body['event'].get('type'))[:40]!r} no listener handles"
    if "command" in body:
        return f"the slash command {str(body['command'])[:40]!r}, not this app's"
    return f"a payload of type {str(body.get('type'))[:40]!r} no listener handles"
