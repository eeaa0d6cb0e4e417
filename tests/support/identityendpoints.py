"""Fake identity endpoints on 127.0.0.1, in threads: who asked for a token, and as whom.

`TokenEndpoint` answers every request with an access token and records it. As a managed
identity endpoint (App Service's protocol: ``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER``) it
plays an admin's own identity, which ``DefaultAzureCredential`` reaches; with TLS
(`self_signed`) and ``AZURE_AUTHORITY_HOST`` it plays Microsoft Entra ID's token endpoint,
where a ServiceAccount's token is exchanged. Threads, not the test's event loop: the commands
under test run their own loops while the test waits on them.
"""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import ipaddress
import json
import ssl
import threading
import time
import urllib.parse
from pathlib import Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class Asked:
    """One request for a token."""

    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    headers: dict[str, str]


#: Paths no credential asks a token at: the readiness and liveness probes of the suite's
#: processes, which may poll a port after it was freed and given to this listener.
STRAY_PATHS = frozenset({"/readyz", "/healthz", "/metrics"})


class TokenEndpoint:
    """An HTTP(S) listener that hands out ``token`` to whoever asks, and records each ask.

    With ``refuse`` it records the ask and answers 400 instead: the caller's credential fails
    at once, so a test that only needs to know who asked does not wait on what comes after."""

    def __init__(
        self, *, token: str, certificate: tuple[Path, Path] | None = None, refuse: bool = False
    ) -> None:
        self.asked: list[Asked] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                if parsed.path in STRAY_PATHS:
                    # Not a token request: a probe of another test's process whose port this
                    # listener was given after it (seen in CI: GET /readyz from a scenario's
                    # readiness poll, under pytest -n 2). Refused, and not counted as an ask.
                    self.send_error(404)
                    return
                endpoint.asked.append(
                    Asked(
                        method=self.command,
                        path=parsed.path,
                        query=dict(urllib.parse.parse_qsl(parsed.query)),
                        form=dict(urllib.parse.parse_qsl(body)),
                        headers={k.lower(): v for k, v in self.headers.items()},
                    )
                )
                answer = json.dumps(
                    {"error": "invalid_request", "error_description": "refused by the test"}
                    if refuse
                    else {
                        "access_token": token,
                        "expires_in": 3600,
                        "expires_on": int(time.time()) + 3600,
                        "token_type": "Bearer",
                        "resource": endpoint.asked[-1].query.get("resource", ""),
                    }
                ).encode()
                self.send_response(400 if refuse else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = _answer  # the names http.server dispatches to
            do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if certificate is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*certificate)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake identity endpoint")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "endpoint.pem", directory / "endpoint.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
