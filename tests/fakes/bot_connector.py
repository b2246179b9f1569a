"""A fake Bot Connector service (the Bot Framework's REST API that Teams exposes as `serviceUrl`),
served over real HTTP on loopback, plus the OpenID metadata and signing key the channel would use.

It records every call the real `botframework-connector` client makes: new activities
(`POST /v3/conversations/{id}/activities`), replies (`POST .../activities/{id}`), updates
(`PUT .../activities/{id}`), and file uploads to the `uploadInfo.uploadUrl` of the file-consent flow.
It answers `GET /v3/conversations/{id}/members/{member}` (botbuilder's `TeamsInfo.get_member`) from
the conversation's roster, as Teams does: a TeamsChannelAccount for a member named by their `29:` id
or Entra object id, 404 `MemberNotFoundInConversation` for anyone else, and 404 `ThreadNotFound` for a
channel thread's id (`19:…;messageid=…`), which the route does not know as a conversation
(microsoft/botframework-sdk#3062). A conversation's roster is `rosters[id]` (a shared channel's, with
members from outside the host team) or else `members` (the team's, a chat's); those lookups are kept
apart (`member_lookups`), so the calls tests count are still the activities.
Tests mint channel tokens with `token()`, signed by a key the fake publishes at `/openid`.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.fakes.loopback import LoopbackServer

POLL_S = 0.02  # serve_forever's shutdown check: stop() returns within this, not 0.5 s

CHANNEL_ISSUER = "https://api.botframework.com"

HOME_TENANT = "tenant-1"  # the tenant of the harness's conversations (tests/bot/teams_harness.py)


def account(member_id: str, aad: str, name: str, *, tenant: str = HOME_TENANT, role: str = "user") -> dict:
    """A conversation member as the members route answers: botbuilder.schema.teams.TeamsChannelAccount's
    JSON (`tenantId`: the person's own tenant; `userRole`: "user", "guest" or "anonymous"). An anonymous
    meeting participant has no Entra object id and no address (`aad` ""), and the meeting's tenant."""
    given, _, surname = name.partition(" ")
    person = {"id": member_id, "name": name, "tenantId": tenant, "userRole": role}
    if aad:
        upn = f"{given.lower()}@{tenant}.example"
        person.update(aadObjectId=aad, givenName=given, surname=surname, email=upn, userPrincipalName=upn)
    return person


# The people the harness's activities come from: members of the home tenant.
ROSTER = (account("29:ada", "aad-ada", "Ada Lovelace"), account("29:bob", "aad-bob", "Bob Stone"))


@functools.cache
def signing_key() -> rsa.RSAPrivateKey:
    """The channel service's RSA key, generated once per test process (a 2048-bit key costs ~0.1-0.3 s;
    tests that need a key the bot must refuse make their own)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def creatable(params: dict) -> bool:
    """Whether Teams creates the conversation `createConversation` asks for: a new thread in a
    channel (`isGroup` with the channel's id, 19:…@thread.tacv2, in `channelData`), or a personal
    chat with one member. A bot cannot create a group chat — "You can't create a new group chat or a
    new channel in a team with proactive messaging"
    (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/conversations/send-proactive-messages);
    asked for one, with members or with a group chat's id as the "channel", it answers 400 BadSyntax
    "Incorrect conversation creation parameters"."""
    if not params.get("isGroup"):
        return len(params.get("members") or []) == 1
    channel = ((params.get("channelData") or {}).get("channel") or {}).get("id") or ""
    return channel.endswith(("@thread.tacv2", "@thread.skype"))


@dataclass
class Call:
    method: str
    conversation_id: str
    activity_id: str
    body: Any
    headers: dict = field(default_factory=dict)
    reply_id: str = ""


class FakeConnector:
    """Records activities; `sent()` / `updates()` filter them for assertions."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.uploads: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.counter = 0
        self.refuse_status = (
            0  # answer every POST and PUT with this HTTP status (403: bot removed, 404: gone)
        )
        self.refuse_stream_end = False  # refuse a message that ends a stream (Teams: stream timed out)
        # The Bot Connector refuses an activity over about 28 KB, text, attachments and envelope together
        # (https://learn.microsoft.com/microsoftteams/platform/bots/how-to/format-your-bot-messages)
        self.max_body_bytes = 28_000
        # (method, activity) -> (status, headers) to refuse that call with (a 503, a 429 + Retry-After), or
        # None; (status, headers, body) sends that body instead of the JSON error (a gateway's page; with a
        # larger content-length, a body cut short); status 0 closes the connection without answering
        self.refuse_when: Callable[[str, dict], tuple | None] | None = None
        # (method, activity) -> seconds to sit on that call before answering: a slow Bot Connector, or,
        # past the bot's timeout, one that accepts the connection and never answers; stop() ends the wait
        self.stall: Callable[[str, dict], float] | None = None
        # how many of the next `/openid` requests to take and never answer (a key endpoint that hangs);
        # `abandoned` gets the time.monotonic() at which the client closed each one it gave up on
        self.hang_openid = 0
        self.abandoned: list[float] = []
        self.key_fetches: list[str] = []  # the paths of the OpenID metadata and key set requests answered
        # "/openid" or "/keys" -> the JSON to answer with instead (metadata or a key set of another shape)
        self.published: dict[str, Any] = {}
        self.refused_creates: list[dict] = []  # createConversation bodies refused (a group chat asked for)
        self.members: list[dict] = [dict(m) for m in ROSTER]  # the members (`account`) of the team, a chat
        self.rosters: dict[str, list[dict]] = {}  # conversation id -> its own members (a shared channel's)
        self.member_lookups: list[tuple[str, str]] = []  # (conversation, member) of each members GET
        # (status, body) the members route answers instead (a 500, a 403 for a bot removed), or None;
        # and seconds it sits on a lookup first (past the bot's timeout: one that never answers)
        self.member_refusal: tuple[int, dict] | None = None
        self.member_stall_s = 0.0
        self._stopping = threading.Event()
        self.key = signing_key()
        # the channels the signing key is endorsed for; the Bot Framework's endorses every channel an
        # Azure Bot may have on (Web Chat and Direct Line too), and botframework-connector refuses a
        # token for an activity of a channel its key does not endorse
        self.endorsements: tuple[str, ...] = ("msteams",)
        self.kid = "fake-key-1"
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def openid_url(self) -> str:
        return f"{self.url}/openid"

    def start(self) -> FakeConnector:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # --- assertions helpers ---------------------------------------------------------------------
    def sent(self, conversation_id: str | None = None) -> list[dict]:
        """Activities the bot created (new messages, replies, typing), oldest first."""
        with self.lock:
            return [
                c.body
                for c in self.calls
                if c.method == "POST" and conversation_id in (None, c.conversation_id)
            ]

    def id_of(self, body: dict) -> str:
        """The activity id the fake gave to a message the bot posted."""
        with self.lock:
            return next(c.reply_id for c in self.calls if c.method == "POST" and c.body is body)

    def updates(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method == "PUT"]

    @staticmethod
    def valid_range(header: str, length: int) -> bool:
        """OneDrive's upload session takes `bytes <first>-<last>/<total>` covering the bytes sent."""
        found = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", header.strip())
        if not found:
            return False
        first, last, total = map(int, found.groups())
        return first <= last < total and last - first + 1 == length

    def token(self, *, app_id: str, service_url: str, ttl_s: int = 600, **claims: Any) -> str:
        """A channel-issued JWT as Teams would send it, signed by this fake's key."""
        now = int(time.time())
        payload = {
            "iss": CHANNEL_ISSUER,
            "aud": app_id,
            "serviceurl": service_url,
            "nbf": now - 5,
            "exp": now + ttl_s,
            **claims,
        }
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def _jwks(self) -> dict:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "endorsements": list(self.endorsements)}]}

    def _record(self, method: str, path: str, body: Any, headers: dict) -> dict:
        parts = [urllib.parse.unquote(p) for p in path.split("?")[0].split("/")]
        # /v3/conversations/{conversation}/activities[/{activity}]
        conversation = parts[3] if len(parts) > 3 else ""
        activity = parts[5] if len(parts) > 5 else ""
        with self.lock:
            self.counter += 1
            reply_id = activity if method == "PUT" else f"act-{self.counter}"
            self.calls.append(Call(method, conversation, activity, body, headers, reply_id))
            return {"id": reply_id}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("content-length", 0)))

            def do_GET(self) -> None:
                if member := re.fullmatch(r"/v3/conversations/([^/?]+)/members/([^/?]+)", self.path):
                    self._member(*(urllib.parse.unquote(part) for part in member.groups()))
                    return
                if self.path == "/openid" and fake.hang_openid > 0:
                    fake.hang_openid -= 1
                    self._hold()
                    return
                if self.path in ("/openid", "/keys"):
                    with fake.lock:
                        fake.key_fetches.append(self.path)
                if self.path in fake.published:
                    self._reply(200, fake.published[self.path])
                elif self.path == "/openid":
                    self._reply(200, {"issuer": CHANNEL_ISSUER, "jwks_uri": f"{fake.url}/keys"})
                elif self.path == "/keys":
                    self._reply(200, fake._jwks())
                else:
                    self._reply(404, {"error": "not found"})

            def _member(self, conversation: str, member: str) -> None:
                """GET /v3/conversations/{conversation}/members/{member}: the member, by either id."""
                with fake.lock:
                    fake.member_lookups.append((conversation, member))
                if fake.member_stall_s > 0:
                    fake._stopping.wait(fake.member_stall_s)
                if fake.member_refusal is not None:
                    self._reply(*fake.member_refusal)
                    return
                if ";messageid=" in conversation:  # a thread is no conversation to the members route
                    error = {"code": "ThreadNotFound", "message": "Thread not found"}
                    self._reply(404, {"error": error})
                    return
                roster = fake.rosters.get(conversation, fake.members)
                found = [m for m in roster if member in (m.get("id"), m.get("aadObjectId"))]
                if found:
                    self._reply(200, found[0])
                else:
                    error = {
                        "code": "MemberNotFoundInConversation",
                        "message": "Member not found in conversation",
                    }
                    self._reply(404, {"error": error})

            def _hold(self) -> None:
                """Never answer: wait until the client closes the connection (noted) or the fake stops."""
                self.close_connection = True
                self.connection.settimeout(POLL_S)
                while not fake._stopping.is_set():
                    try:
                        if not self.connection.recv(1):
                            fake.abandoned.append(time.monotonic())
                            return
                    except TimeoutError:
                        continue
                    except OSError:
                        return

            def _held_or_refused(self, method: str, body: dict) -> bool:
                """Sit on the call for `stall`'s seconds; True when `refuse_when` refused it (answered)."""
                if fake.stall is not None and (seconds := fake.stall(method, body)) > 0:
                    fake._stopping.wait(seconds)
                refusal = fake.refuse_when(method, body) if fake.refuse_when is not None else None
                if refusal is None:
                    return False
                status, headers, *body = refusal
                self.close_connection = True
                if not status:
                    return True  # the connection closes with nothing sent back
                data = body[0] if body else None
                if data is None:
                    data = json.dumps({"error": {"code": "Throttled", "message": f"HTTP {status}"}}).encode()
                headers = {"content-type": "application/json", "content-length": str(len(data)), **headers}
                self.send_response(status)
                for name, value in headers.items():
                    if value is not None:  # None: that header is left out
                        self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                return True

            def do_POST(self) -> None:
                raw = self._body()
                if len(raw) > fake.max_body_bytes:
                    error = {"code": "MessageSizeTooBig", "message": "Message size too big"}
                    self._reply(413, {"error": error})
                    return
                body = json.loads(raw or b"{}")
                if self._held_or_refused("POST", body):
                    return
                if fake.refuse_status:
                    error = {
                        "code": "ConversationNotFound",
                        "message": "The bot is not part of the conversation",
                    }
                    self._reply(fake.refuse_status, {"error": error})
                    return
                if self.path.rstrip("/") == "/v3/conversations" and not creatable(body):
                    # as the Bot Connector answers a request to create a group chat
                    with fake.lock:
                        fake.refused_creates.append(body)
                    error = {"code": "BadSyntax", "message": "Incorrect conversation creation parameters"}
                    self._reply(400, {"error": error})
                    return
                entities = body.get("entities") or []
                if fake.refuse_stream_end and any(e.get("streamType") == "final" for e in entities):
                    error = {  # what Teams answers once a stream has run past two minutes
                        "code": "ContentStreamNotAllowed",
                        "message": "Content stream finished due to exceeded streaming time.",
                    }
                    self._reply(403, {"error": error})
                    return
                self._reply(200, fake._record("POST", self.path, body, dict(self.headers)))

            def do_PUT(self) -> None:
                raw = self._body()
                if self.path.startswith("/upload/"):
                    if not fake.valid_range(self.headers.get("Content-Range", ""), len(raw)):
                        self._reply(
                            400, {"error": {"code": "invalidRange", "message": "Invalid Content-Range"}}
                        )
                        return
                    with fake.lock:
                        fake.uploads[urllib.parse.unquote(self.path[len("/upload/") :])] = raw
                    self._reply(201, {"id": "uploaded"})
                    return
                if len(raw) > fake.max_body_bytes:  # an update is an activity too
                    error = {"code": "MessageSizeTooBig", "message": "Message size too big"}
                    self._reply(413, {"error": error})
                    return
                body = json.loads(raw or b"{}")
                if self._held_or_refused("PUT", body):
                    return
                if fake.refuse_status:  # an edit in a conversation the bot left is refused too
                    error = {
                        "code": "BotNotInConversationRoster",
                        "message": "The bot is not part of the roster",
                    }
                    self._reply(fake.refuse_status, {"error": error})
                    return
                self._reply(200, fake._record("PUT", self.path, body, dict(self.headers)))

        return Handler
