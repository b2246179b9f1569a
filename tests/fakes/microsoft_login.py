"""A fake Microsoft identity platform (login.microsoftonline.com) on loopback, over HTTPS as msal insists.

It serves what msal asks of a login endpoint when a bot signs in with its app id and password (the OAuth
client-credentials grant): the tenant's OpenID configuration, then a token. It records every request, so
a test can count sign-ins, and refuses a wrong secret as Microsoft does (HTTP 401, `invalid_client`).

The certificate is self-signed for 127.0.0.1 and written to `ca_file`; `requests` (msal's HTTP client)
trusts it through REQUESTS_CA_BUNDLE, which the test sets.
https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.fakes.loopback import LoopbackServer

TENANT = "botframework.com"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (the certificate is its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "login-cert.pem", directory / "login-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


class FakeLogin:
    """`requests`: (method, path, form) of every request; `tokens`: the access tokens handed out."""

    def __init__(self, directory: Path, *, client_id: str, client_secret: str) -> None:
        self.client_id, self.client_secret = client_id, client_secret
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.tokens: list[str] = []
        self.lock = threading.Lock()
        self.ca_file, key_file = self_signed(directory)
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, key_file)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def login_url(self) -> str:
        """The authority the bot signs in at (what Bot Framework calls ToChannelFromBotLoginUrl)."""
        return f"https://127.0.0.1:{self.server.server_address[1]}/{TENANT}"

    def start(self) -> FakeLogin:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def token_requests(self) -> list[dict[str, str]]:
        with self.lock:
            return [form for method, path, form in self.requests if path.endswith("/oauth2/v2.0/token")]

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            return 401, {
                "error": "invalid_client",
                "error_description": "AADSTS7000215: Invalid client secret.",
            }
        with self.lock:
            token = f"fake-access-token-{len(self.tokens) + 1}"
            self.tokens.append(token)
        return 200, {
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": token,
        }

    def _configuration(self) -> dict[str, Any]:
        base = self.login_url
        return {
            "issuer": f"{base}/v2.0",
            "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
            "token_endpoint": f"{base}/oauth2/v2.0/token",
            "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with fake.lock:
                    fake.requests.append(("GET", self.path, {}))
                if self.path.split("?")[0].endswith("/v2.0/.well-known/openid-configuration"):
                    self._reply(200, fake._configuration())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(parse_qsl(self.rfile.read(length).decode()))
                with fake.lock:
                    fake.requests.append(("POST", self.path, form))
                if self.path.split("?")[0].endswith("/oauth2/v2.0/token"):
                    self._reply(*fake._token(form))
                else:
                    self._reply(404, {"error": "not_found"})

        return Handler
