"""``/metrics`` for whom the cluster allows it, over TLS: the guard and the certificate.

The operator's metrics are labelled by namespace, consumer and pod, with backlogs and
partition counts: one tenant must not read another's. So ``ehb operator`` serves them over
HTTPS and answers a request only when its bearer token is a valid Kubernetes token
(TokenReview) of a user allowed ``get`` on the path (SubjectAccessReview):
`accessreviews`. Without a token: 401; allowed nothing: 403; the API server unreachable: 500,
as controller-runtime's metrics filter answers; more reviews under way than `accessreviews`
bounds: 429 at once. ``/healthz`` stays open (the kubelet's probes
carry no token) and says nothing of any tenant.

The certificate is the installer's (``--metrics-cert-dir`` with ``tls.crt`` and ``tls.key``,
e.g. from cert-manager) or, without one, a self-signed one made at start-up and kept in memory
only, as controller-runtime makes one: Prometheus then scrapes with
``insecureSkipVerify``, and the bearer token, not the certificate, is what authenticates.
"""

from __future__ import annotations

import datetime
import logging
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Final

from aiohttp import web

from eventhub_balancer import errors
from eventhub_balancer.adapters import accessreviews

logger = logging.getLogger(__name__)

#: Paths served to anyone: the kubelet probes them without a token.
OPEN_PATHS: Final = frozenset({"/healthz"})
#: Days a self-signed certificate is valid: longer than any operator pod lives.
SELF_SIGNED_DAYS: Final = 365

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guard(
    reviews: accessreviews.AccessReviews, *, open_paths: Collection[str] = OPEN_PATHS
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """An aiohttp middleware: TokenReview then SubjectAccessReview for every path but
    ``open_paths``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        token = accessreviews.bearer(request.headers.get("Authorization"))
        try:
            user = None if token is None else await reviews.user(token)
            if user is None:
                return web.Response(status=401, text="Unauthorized")
            verb = request.method.lower()
            if not await reviews.allowed(user, verb=verb, path=request.path):
                logger.info("metrics: %s may not %s %s", user.name, verb, request.path)
                return web.Response(status=403, text=f"Authorization denied for user {user.name}")
        except accessreviews.Busy as e:
            # A flood (of forged tokens, most likely): one line each would flood the log too.
            logger.debug("metrics: %s", e)
            return web.Response(status=429, text="Too many requests", headers={"Retry-After": "1"})
        except errors.ApiUnavailable as e:
            logger.warning("metrics: cannot review a request: %s", e)
            return web.Response(status=500, text="Authentication failed")
        return await handler(request)

    return middleware


def server_context(cert_dir: str | None) -> ssl.SSLContext:
    """The TLS context of the metrics port: ``cert_dir``'s ``tls.crt``/``tls.key`` (as a
    kubernetes.io/tls Secret mounts them), else a self-signed certificate for this host."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir:
        folder = Path(cert_dir)
        certificate, key = folder / "tls.crt", folder / "tls.key"
        try:
            context.load_cert_chain(certificate, key)
        except (OSError, ssl.SSLError) as e:
            raise errors.InvalidInput(
                "--metrics-cert-dir",
                f"cannot load {certificate} and {key} ({e}): give a folder with tls.crt and "
                "tls.key (a kubernetes.io/tls Secret mounted), or drop the flag for a "
                "self-signed certificate",
            ) from e
        return context
    certificate_pem, key_pem = self_signed(socket.gethostname())
    # ssl loads a chain only from files: they live for the call, in a private folder.
    with tempfile.TemporaryDirectory(prefix="ehb-metrics-") as private:
        paths = Path(private) / "tls.crt", Path(private) / "tls.key"
        paths[0].write_bytes(certificate_pem)
        paths[1].touch(mode=0o600)
        paths[1].write_bytes(key_pem)
        context.load_cert_chain(*paths)
    return context


def self_signed(host: str) -> tuple[bytes, bytes]:
    """A self-signed certificate for ``host`` (and localhost) and its key, in PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host} eventhub-balancer")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(host), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return (
        certificate.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
