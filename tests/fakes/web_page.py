"""A loopback HTTP server that answers every request with a web page and 200 OK: a corporate proxy's
login or a captive portal standing where an API was expected (S3, BigQuery, Slack)."""

from __future__ import annotations

import http.server
import threading

PAGE = b"<html><head><title>Login</title></head><body>Corporate proxy login</body></html>"


class _Page(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(PAGE)

    do_GET = do_HEAD = do_POST = do_PUT = _answer

    def log_message(self, *args) -> None:
        pass


class WebPage:
    def __init__(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> WebPage:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
