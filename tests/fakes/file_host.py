"""A loopback web server standing in for OneDrive/SharePoint behind a Teams `downloadUrl`: it serves
what a test puts at a path (bytes, a refusal, a redirect, a page, an endless or stalled body) and
records every request with its headers, so a test can see what the bot sent and whether it came at all.

With `tls=True` it speaks https as `localhost`, with a certificate from a CA made for the test
(`trust()` is an SSL context that trusts it), for the checks that only https URLs reach.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.fakes.loopback import LoopbackServer


@dataclass
class Served:
    """What one path answers. `endless`: after `body`, bytes for ever (no Content-Length), one chunk
    every `drip_s`; `stall_s`: seconds to sit on the request before answering (stop() ends it)."""

    body: bytes = b""
    status: int = 200
    content_type: str = "application/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)
    endless: bool = False
    drip_s: float = 0.0
    stall_s: float = 0.0
    length: int | None = None  # a Content-Length to claim instead of the body's


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


class FileHost:
    def __init__(self, *, tls: bool = False) -> None:
        self.routes: dict[str, Served] = {}
        self.seen: list[Seen] = []
        self.sent_bytes = 0  # body bytes written, endless ones included
        self.lock = threading.Lock()
        self._stopping = threading.Event()
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.tls = tls
        self.ca_pem = b""
        if tls:
            context, self.ca_pem = _server_context()
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02})
        self.thread.daemon = True

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"https://localhost:{port}" if self.tls else f"http://127.0.0.1:{port}"

    def serve(self, path: str, served: Served | bytes) -> str:
        """Answer `path` with `served`; its full URL."""
        self.routes[path] = served if isinstance(served, Served) else Served(served)
        return f"{self.url}{path}"

    def trust(self) -> ssl.SSLContext:
        """A client context that trusts this host's test CA (and nothing else)."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def start(self) -> FileHost:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # no Content-Length: the body ends when the connection does

            def log_message(self, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                with host.lock:
                    host.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}))
                served = host.routes.get(path) or Served(b"not found", status=404, content_type="text/plain")
                if served.stall_s:
                    host._stopping.wait(served.stall_s)
                self.send_response(served.status)
                self.send_header("Content-Type", served.content_type)
                if not served.endless:
                    length = len(served.body) if served.length is None else served.length
                    self.send_header("Content-Length", str(length))
                for name, value in served.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self._write(served.body)
                while served.endless and not host._stopping.is_set():
                    self._write(b"x" * 65536)
                    if served.drip_s:
                        host._stopping.wait(served.drip_s)

            def _write(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                with host.lock:
                    host.sent_bytes += len(data)

        return Handler


def _server_context() -> tuple[ssl.SSLContext, bytes]:
    """A server context for `localhost` / 127.0.0.1 signed by a fresh CA, and that CA's PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "datathread test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(*[False] * 5, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    chain = leaf.public_bytes(pem) + ca.public_bytes(pem)
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    with tempfile.TemporaryDirectory() as folder:  # ssl loads a chain from files only
        (Path(folder) / "chain.pem").write_bytes(chain)
        (Path(folder) / "key.pem").write_bytes(key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(Path(folder) / "chain.pem", Path(folder) / "key.pem")
    return context, ca.public_bytes(pem)
