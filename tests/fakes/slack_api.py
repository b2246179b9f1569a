"""A fake Slack Web API, served over real HTTP on loopback, recording every call.

The real `slack_sdk` clients (and Bolt's) talk to it through `base_url` (`DATATHREAD_SLACK_API_URL`).
It answers the methods datathread uses with real-shaped responses, including the two-step external
file upload (`files.getUploadURLExternal` hands out an upload URL on this same server and keeps the
image's alt text, `alt_texts`, refusing more than Slack takes), and a channel's
history of what was posted into it (`conversations.history`, metadata included when asked for).
`apps.connections.open` hands out `connections_url` (a fake Socket Mode server's, once attached).
Switches let a test refuse streaming (`refuse_streaming`), fail any method (`fail_methods`) or the calls
a predicate picks (`refuse`), refuse calls with HTTP 429 (`rate_limited`, or a workspace's shared
Tier limit as a token bucket: `buckets`, refusals in `throttled`), or every
message into one channel (`refused_in`), answer it with an HTTP error (`http_errors`), take it and
never answer (`silent`), or close the connection without an answer (`dropped`).

Files people share (`share`) are served as Slack serves them: at `url_private_download` on this server,
to a request with a bot token (`Bearer xoxb-…`; `bot_token` names the one it takes), and described by
`files.info`. Without the token, or with `files_read` off (an app installed without the `files:read`
scope), the answer is Slack's sign-in page (HTML, HTTP 200). Switches per file id: a redirect
(`file_redirects`), an HTTP error (`file_errors`), a body without its length (`unsized_files`, streamed;
`served` counts what was sent), headers and then silence (`stalled_files`), or the whole file after a
wait (`slow_files`, seconds). Every fetch is recorded in
`downloads` with the token it carried. API answers carry the token's scopes in `x-oauth-scopes`
(`scopes`; None: no such header), as Slack's do, and a chat.*, assistant.threads.* or users.info call
whose scope is not among them is refused with `missing_scope`, naming the scope it `needed`.

Each thread's status is kept as Slack documents it (`status_of`,
https://docs.slack.dev/reference/methods/assistant.threads.setStatus): set by
`assistant.threads.setStatus`, cleared by an empty one, and "automatically cleared when the app sends
a reply" — a message posted into the thread (`chat.postMessage`, `chat.startStream`); nothing else
(a stream's appends and end, `chat.update`) clears it. Its two-minute timeout is not modelled.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, quote

from tests.fakes.loopback import LoopbackServer

POLL_S = 0.02  # serve_forever's shutdown check: stop() returns within this, not 0.5 s

BOT_USER_ID = "UBOT"
BOT_ID = "BBOT"
TEAM_ID = "T0001"
# What the app's manifest asks for: the scopes Slack lists in `x-oauth-scopes` for its bot token.
MANIFEST_SCOPES = (
    "app_mentions:read,assistant:write,channels:history,chat:write,commands,files:read,files:write,"
    "groups:history,im:history,mpim:history,users:read"
)
# A method's scope, by the start of its name: Slack refuses a token without it with `missing_scope` and
# the scope it `needed` (https://docs.slack.dev/apis/web-api/#errors). Only the methods tests lose.
NEEDED_SCOPES = (
    ("chat.", "chat:write"),
    ("assistant.threads.", "assistant:write"),
    ("users.info", "users:read"),
)
SIGN_IN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"
ALT_TXT_LIMIT = 1000  # files.getUploadURLExternal: "alt_txt_too_large" past 1000 characters


@dataclass
class Call:
    """One Web API call: the method name and its arguments (JSON or form), decoded."""

    method: str
    args: dict
    token: str = ""
    at: float = field(default_factory=time.monotonic)


class FakeSlackAPI:
    """Records calls in `calls`; `uploads` maps file id → uploaded bytes, `alt_texts` → its alt text."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.uploads: dict[str, bytes] = {}
        self.alt_texts: dict[str, str] = {}  # file id → the alt text its upload was given (`alt_txt`)
        self.posted: dict[str, list[dict]] = {}  # channel → its messages as conversations.history gives them
        self.statuses: dict[tuple[str, str], str] = {}  # (channel, thread_ts) → the status it shows now
        self.refuse_streaming = False
        self.fail_methods: dict[str, str] = {}
        # Refuse the calls this picks (method, arguments → Slack's error code, or the fields of its error
        # answer: `error`, `response_metadata`…; None to answer).
        self.refuse: Callable[[str, dict], str | dict | None] | None = None
        # channel → the error every chat.* call into it gets (a channel that refuses the bot); a DM to a
        # user (the user's id as the channel) is another channel, taken unless listed here too
        self.refused_in: dict[str, str] = {}
        self.latency_s: dict[str, float] = {}  # method → seconds before it answers (a slow Slack)
        # method → which of its calls (1, 2, …) are refused with HTTP 429 and Retry-After: 1
        self.rate_limited: dict[str, set[int]] = {}
        # method → (calls a second, burst): a workspace's Tier limit, one bucket every caller shares; a
        # call that finds it empty is refused with HTTP 429 and the Retry-After until it holds a call
        self.buckets: dict[str, tuple[float, float]] = {}
        self._levels: dict[str, tuple[float, float]] = {}  # method → (calls in its bucket, when)
        self.throttled: list[Call] = []  # each call a bucket refused
        # method (or a response_url's path, "/response/…") → the HTTP error status it answers, in text
        self.http_errors: dict[str, int] = {}
        self.silent: set[str] = set()  # methods taken and never answered (until `stop`)
        self.dropped: dict[str, float] = {}  # method → seconds after which its connection closes, unanswered
        self._stopping = threading.Event()
        self._seen: dict[str, int] = {}
        self.user_tz = "America/Los_Angeles"  # users.info's `tz` for everyone
        self.connections_url = ""  # apps.connections.open's WebSocket URL (tests/fakes/slack_socket_mode.py)
        self.scopes: str | None = MANIFEST_SCOPES
        self.shared: dict[str, tuple[dict, bytes]] = {}  # file id → (its full file object, its bytes)
        self.downloads: list[Call] = []  # each fetch of a shared file: its path and the token it carried
        self.bot_token: str | None = None  # the one token files are served to (None: any `xoxb-` token)
        self.files_read = True
        self.file_redirects: dict[str, str] = {}  # file id → the Location its fetch is sent to (HTTP 302)
        self.file_errors: dict[str, int] = {}  # file id → the HTTP error status its fetch answers
        self.unsized_files: set[str] = set()  # served without content-length, in chunks
        self.stalled_files: set[str] = set()  # headers and a few bytes, then nothing (until `stop`)
        self.slow_files: dict[str, float] = {}  # file id → seconds before its fetch is answered
        self.served: dict[str, int] = {}  # file id → bytes written to the connection
        self.lock = threading.Lock()
        self._ts = itertools.count(1)
        self._files = itertools.count(1)
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self) -> FakeSlackAPI:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # a silent method's handler lets go of its connection
        self.server.shutdown()
        self.server.server_close()

    def of(self, method: str) -> list[Call]:
        """Every recorded call of one method, in order."""
        with self.lock:
            return [c for c in self.calls if c.method == method]

    def shown(self) -> list[str]:
        """What people see, one string per message: a stream's appended text joined as Slack shows it
        (the answer arrives in pieces while Claude writes it), every other chat.* call as its arguments
        (text, blocks, a stream's task updates) in JSON."""
        with self.lock:
            calls = list(self.calls)
        streams: dict[str, str] = {}
        out = []
        for call in calls:
            if call.method == "chat.appendStream" and call.args.get("markdown_text"):
                ts = str(call.args.get("ts"))
                streams[ts] = streams.get(ts, "") + call.args["markdown_text"]
            elif call.method.startswith("chat."):
                out.append(json.dumps(call.args))
        return out + list(streams.values())

    def status_of(self, channel: str, thread_ts: str) -> str:
        """What the thread's status shows now ("" for none), as Slack keeps it (see the module's doc)."""
        with self.lock:
            return self.statuses.get((channel, thread_ts), "")

    def methods(self) -> list[str]:
        with self.lock:
            return [c.method for c in self.calls]

    def reset(self) -> None:
        """As new for the next test of a module sharing this fake: what it recorded (`clear`) and every
        behaviour a test set (refusals, latency, rate limits, scopes), so none leaks into the next."""
        self.clear()
        with self.lock:
            self.refuse, self.refuse_streaming, self.scopes = None, False, MANIFEST_SCOPES
            for knob in (self.fail_methods, self.refused_in, self.latency_s, self.rate_limited, self.buckets):
                knob.clear()
            for knob in (self.http_errors, self.dropped):
                knob.clear()

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()
            self.uploads.clear()
            self.alt_texts.clear()
            self.posted.clear()
            self.statuses.clear()
            self._seen.clear()
            self.downloads.clear()
            self.served.clear()
            self.throttled.clear()
            self._levels.clear()

    def share(self, name: str, data: bytes, *, mimetype: str = "text/csv", **extra) -> dict:
        """A file someone shared, as Slack keeps it: returns the file object a message event carries
        (https://docs.slack.dev/reference/objects/file-object); `extra` overrides its fields."""
        file_id = f"F{next(self._files):04d}"
        base = self.url.removesuffix("api/")
        where = f"files-pri/{TEAM_ID}-{file_id}"
        obj = {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rsplit(".", 1)[-1] if "." in name else "",
            "size": len(data),
            "mode": "hosted",
            "is_external": False,
            "url_private": f"{base}{where}/{quote(name)}",
            "url_private_download": f"{base}{where}/download/{quote(name)}",
            "permalink": f"https://fake.slack.com/files/U0001/{file_id}/{quote(name)}",
            **extra,
        }
        with self.lock:
            self.shared[file_id] = (obj, data)
        return obj

    def serve_file(self, handler: BaseHTTPRequestHandler, path: str) -> None:
        """A shared file's bytes, to a request with the bot token; Slack's sign-in page otherwise."""
        token = (handler.headers.get("authorization") or "").removeprefix("Bearer ")
        with self.lock:
            self.downloads.append(Call(method=path, args={}, token=token))
        file_id = path.removeprefix("/files-pri/").split("/", 1)[0].rsplit("-", 1)[-1]
        obj, data = self.shared.get(file_id, ({}, b""))
        if file_id in self.slow_files:
            self._stopping.wait(self.slow_files[file_id])
        if file_id in self.file_redirects:
            handler.send_response(302)
            handler.send_header("location", self.file_redirects[file_id])
            handler.send_header("content-length", "0")
            handler.end_headers()
            return
        allowed = token == self.bot_token if self.bot_token else token.startswith("xoxb-")
        if not (allowed and self.files_read):
            return _reply(handler, 200, SIGN_IN_PAGE, "text/html; charset=utf-8")
        if not obj or file_id in self.file_errors:
            return _reply(handler, self.file_errors.get(file_id, 404), b"file_not_found", "text/plain")
        handler.send_response(200)
        handler.send_header("content-type", obj.get("mimetype") or "application/octet-stream")
        if file_id not in self.unsized_files | self.stalled_files:
            handler.send_header("content-length", str(len(data)))
        handler.end_headers()
        if file_id in self.stalled_files:
            handler.wfile.write(data[:10])
            handler.wfile.flush()
            self._stopping.wait(None)
            handler.close_connection = True
            return
        for start in range(0, len(data), 64 * 1024):
            handler.wfile.write(data[start : start + 64 * 1024])
            with self.lock:
                self.served[file_id] = self.served.get(file_id, 0) + len(data[start : start + 64 * 1024])

    def _bucket_wait(self, method: str) -> int:
        """0 when `method`'s bucket (if any) holds a call, which it takes; else the whole seconds
        until it will hold one."""
        if method not in self.buckets:
            return 0
        rate, burst = self.buckets[method]
        with self.lock:
            now = time.monotonic()
            level, at = self._levels.get(method, (burst, now))
            level = min(burst, level + (now - at) * rate)
            taken = level >= 1
            self._levels[method] = (level - 1 if taken else level, now)
        return 0 if taken else int((1 - level) / rate) + 1

    def next_ts(self) -> str:
        return f"1700000{next(self._ts):03d}.000100"

    # --- responses -----------------------------------------------------------------------------
    def respond(self, method: str, args: dict) -> dict:
        needed = next((scope for prefix, scope in NEEDED_SCOPES if method.startswith(prefix)), None)
        if self.scopes is not None and needed and needed not in self.scopes.split(","):
            return {"ok": False, "error": "missing_scope", "needed": needed, "provided": self.scopes}
        if method in self.fail_methods:
            return {"ok": False, "error": self.fail_methods[method]}
        if self.refuse is not None and (error := self.refuse(method, args)):  # a code, or the whole answer
            return {"ok": False, "error": error} if isinstance(error, str) else {"ok": False, **error}
        if method.startswith("chat.") and method.endswith("Stream") and self.refuse_streaming:
            return {"ok": False, "error": "feature_not_enabled"}
        channel = args.get("channel") or args.get("channel_id") or ""
        if method.startswith("chat.") and channel in self.refused_in:
            return {"ok": False, "error": self.refused_in[channel]}
        simple = {
            "auth.test": {
                "url": "https://fake.slack.com/",
                "team": "Fake",
                "user": "datathread",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
            },
            "apps.connections.open": {"url": self.connections_url},
            "chat.postEphemeral": {"message_ts": self.next_ts()},
            "chat.update": {"channel": channel, "ts": args.get("ts"), "text": args.get("text", "")},
            "chat.appendStream": {"channel": channel, "ts": args.get("ts")},
            "chat.stopStream": {"channel": channel, "ts": args.get("ts")},
            "conversations.replies": {"messages": [], "has_more": False},
            "users.info": {
                "user": {
                    "id": args.get("user"),
                    "name": "someone",
                    "real_name": "Some One",
                    "tz": self.user_tz,
                    "team_id": TEAM_ID,  # everyone's workspace: Slack always says it
                }
            },
            "views.publish": {"view": {"id": "V1"}},
            "views.open": {"view": {"id": "V2"}},
        }
        if method in simple:
            return {"ok": True, **simple[method]}
        if method == "assistant.threads.setStatus":
            with self.lock:
                self.statuses[(channel, str(args.get("thread_ts")))] = str(args.get("status") or "")
            return {"ok": True}
        if method in ("chat.postMessage", "chat.startStream"):
            if args.get("thread_ts"):  # the app's reply in the thread: Slack clears its status
                with self.lock:
                    self.statuses.pop((channel, str(args["thread_ts"])), None)
            ts = self.next_ts()
            self._keep(channel, ts, args)
            return {"ok": True, "channel": channel, "ts": ts, "message": {"ts": ts, "text": args.get("text")}}
        if method == "conversations.history":
            return {"ok": True, "messages": self._history(channel, args), "has_more": False}
        if method == "files.getUploadURLExternal":
            alt = args.get("alt_txt")
            if alt is not None and len(alt) > ALT_TXT_LIMIT:  # the whole upload is refused
                return {"ok": False, "error": "alt_txt_too_large"}
            file_id = f"F{next(self._files):04d}"
            if alt is not None:
                with self.lock:
                    self.alt_texts[file_id] = alt
            base = self.url.removesuffix("api/")
            return {"ok": True, "file_id": file_id, "upload_url": f"{base}upload/{file_id}"}
        if method == "files.info":
            obj, _ = self.shared.get(str(args.get("file")), ({}, b""))
            return {"ok": True, "file": obj} if obj else {"ok": False, "error": "file_not_found"}
        if method == "files.completeUploadExternal":
            files = json.loads(args.get("files", "[]"))
            return {"ok": True, "files": [self._file(f) for f in files]}
        return {"ok": True}

    def _file(self, completed: dict) -> dict:
        """A file object as files.completeUploadExternal gives it back: its title, and its alt text when
        the upload had one (https://docs.slack.dev/reference/objects/file-object)."""
        file = {"id": completed["id"], "title": completed.get("title", "")}
        with self.lock:
            alt = self.alt_texts.get(completed["id"])
        return {**file, "alt_txt": alt} if alt is not None else file

    def _keep(self, channel: str, ts: str, args: dict) -> None:
        message = {"type": "message", "ts": ts, "text": args.get("text", ""), "bot_id": BOT_ID}
        message.update({k: args[k] for k in ("thread_ts", "metadata") if args.get(k)})
        with self.lock:
            self.posted.setdefault(channel, []).append(message)

    def _history(self, channel: str, args: dict) -> list[dict]:
        """The channel's top-level messages after `oldest`, newest first; metadata only on request
        (https://docs.slack.dev/reference/methods/conversations.history)."""
        oldest = float(args.get("oldest") or 0)
        with self.lock:
            kept = list(self.posted.get(channel, []))
        with_metadata = str(args.get("include_all_metadata")).lower() in ("1", "true")
        return [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
            for m in reversed(kept)
            if float(m["ts"]) > oldest and m.get("thread_ts", m["ts"]) == m["ts"]
        ][: int(args.get("limit") or 100)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                if fake.scopes is not None and ctype == "application/json":
                    self.send_header("x-oauth-scopes", fake.scopes)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.startswith("/files-pri/"):
                    fake.serve_file(self, self.path.split("?", 1)[0])
                    return
                self.do_POST()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0) or 0)
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                if path.startswith("/upload/"):
                    with fake.lock:
                        fake.uploads[path.rsplit("/", 1)[1]] = raw
                    self._send(200, f"OK - {len(raw)}".encode(), "text/plain")
                    return
                method = path.removeprefix("/api/")
                args = _decode(raw, self.headers.get("content-type", ""), self.path)
                token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                if fake.latency_s.get(method):
                    time.sleep(fake.latency_s[method])
                with fake.lock:
                    fake._seen[method] = n = fake._seen.get(method, 0) + 1
                wait = fake._bucket_wait(method)
                if wait:
                    with fake.lock:
                        fake.throttled.append(Call(method=method, args=args, token=token))
                if wait or n in fake.rate_limited.get(method, ()):  # refused: Slack never took it
                    body = json.dumps({"ok": False, "error": "ratelimited"}).encode()
                    self.send_response(429)
                    self.send_header("retry-after", str(wait or 1))
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                with fake.lock:
                    fake.calls.append(Call(method=method, args=args, token=token))
                if method in fake.silent or method in fake.dropped:  # taken; no answer ever comes
                    fake._stopping.wait(None if method in fake.silent else fake.dropped[method])
                    self.close_connection = True
                    return
                if method in fake.http_errors:  # taken, and failed inside Slack
                    self._send(fake.http_errors[method], b"internal_error", "text/plain")
                    return
                self._send(200, json.dumps(fake.respond(method, args)).encode())

        return Handler


def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str) -> None:
    handler.send_response(status)
    handler.send_header("content-type", ctype)
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _decode(raw: bytes, content_type: str, path: str) -> dict:
    args: dict = dict(parse_qsl(path.split("?", 1)[1])) if "?" in path else {}
    if "application/json" in content_type and raw:
        args.update(json.loads(raw))
    elif raw:
        args.update(dict(parse_qsl(raw.decode())))
    for key in ("blocks", "chunks", "view", "prompts"):  # form-encoded JSON fields
        if isinstance(args.get(key), str):
            with contextlib.suppress(ValueError):
                args[key] = json.loads(args[key])
    return args
