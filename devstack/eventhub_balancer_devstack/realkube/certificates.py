"""The keys and certificates a real control plane needs, made fresh for each start.

A kube-apiserver serves TLS only, authenticates its clients (here: by client certificate, as
a kubeadm cluster's administrator and controller-manager do) and signs the service-account
tokens that TokenRequest hands out. All of it is generated with ``cryptography`` into the
control plane's temporary folder: one CA that signs the serving certificate and the client
certificates, and one RSA key pair for the service-account tokens. Nothing here outlives the
control plane, so the lifetimes are short and the key sizes the common ones.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Long enough for any test run or demo; a control plane is never kept for days.
VALIDITY = datetime.timedelta(days=7)

#: Service-account tokens are RS256-signed, as a cluster's are (kube-apiserver also accepts
#: ECDSA keys, but RSA is what every verifier of issued tokens expects).
SERVICE_ACCOUNT_KEY_BITS = 2048

#: The group that RBAC's bootstrap policy binds to cluster-admin.
ADMIN_GROUP = "system:masters"

#: Who kube-apiserver is to a kubelet (kubeadm's name for it): the only client the local
#: node's log server (`nodelogs`) answers.
KUBELET_CLIENT = "kube-apiserver-kubelet-client"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClientCredentials:
    """A client certificate and its key, as files a kubeconfig can name."""

    certificate: Path
    key: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControlPlaneCredentials:
    """Every file the control plane's processes and its clients are given."""

    ca_certificate: Path
    serving_certificate: Path
    serving_key: Path
    service_account_public_key: Path
    service_account_signing_key: Path
    admin: ClientCredentials
    #: what kube-apiserver presents to a kubelet (``kubectl logs`` goes through it)
    kubelet_client: ClientCredentials


def _name(common_name: str, organisation: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organisation is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organisation))
    return x509.Name(attributes)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def _write_certificate(path: Path, certificate: x509.Certificate) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def _issue(
    *,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    is_ca: bool = False,
    usages: tuple[x509.ObjectIdentifier, ...] = (),
    hosts: tuple[str, ...] = (),
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=not is_ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def serving_certificate(
    folder: Path, *, ca_certificate: Path, name: str, hosts: tuple[str, ...]
) -> ClientCredentials:
    """A serving certificate for ``hosts``, signed by the CA beside ``ca_certificate`` (its
    key is where `generate` wrote it): a kubelet's, which kube-apiserver checks."""
    now = datetime.datetime.now(datetime.UTC)
    ca = x509.load_pem_x509_certificate(ca_certificate.read_bytes())
    signing = serialization.load_pem_private_key(
        ca_certificate.with_suffix(".key").read_bytes(), password=None
    )
    if not isinstance(signing, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca_certificate}: the CA key is not the EC key this module writes")
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = _issue(
        subject=_name(name),
        public_key=key.public_key(),
        issuer=ca.subject,
        issuer_key=signing,
        now=now,
        usages=(ExtendedKeyUsageOID.SERVER_AUTH,),
        hosts=hosts,
    )
    folder.mkdir(parents=True, exist_ok=True)
    return ClientCredentials(
        certificate=_write_certificate(folder / f"{name}.crt", certificate),
        key=_write_key(folder / f"{name}.key", key),
    )


def client_certificate(
    folder: Path,
    *,
    ca_certificate: Path,
    ca_key: Path,
    user: str,
    groups: tuple[str, ...] = (),
    now: datetime.datetime | None = None,
) -> ClientCredentials:
    """A client certificate for ``user`` in ``groups`` (the certificate's O fields)."""
    now = now or datetime.datetime.now(datetime.UTC)
    ca = x509.load_pem_x509_certificate(ca_certificate.read_bytes())
    signing = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    if not isinstance(signing, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca_key}: the CA key is not the EC key this module writes")
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    certificate = _issue(
        subject=x509.Name(attributes),
        public_key=key.public_key(),
        issuer=ca.subject,
        issuer_key=signing,
        now=now,
        usages=(ExtendedKeyUsageOID.CLIENT_AUTH,),
    )
    stem = user.replace(":", "-")
    return ClientCredentials(
        certificate=_write_certificate(folder / f"{stem}.crt", certificate),
        key=_write_key(folder / f"{stem}.key", key),
    )


def generate(
    folder: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
) -> ControlPlaneCredentials:
    """Write a fresh CA, serving certificate, admin client and service-account keys."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("ehb-local-ca")
    ca = _issue(
        subject=ca_name,
        public_key=ca_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        now=now,
        is_ca=True,
    )
    ca_path = _write_certificate(folder / "ca.crt", ca)
    ca_key_path = _write_key(folder / "ca.key", ca_key)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _issue(
        subject=_name("kube-apiserver"),
        public_key=serving_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        now=now,
        usages=(ExtendedKeyUsageOID.SERVER_AUTH,),
        # The in-cluster names too: a client that dials kubernetes.default.svc checks them.
        hosts=(*hosts, "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )

    service_accounts = rsa.generate_private_key(
        public_exponent=65537, key_size=SERVICE_ACCOUNT_KEY_BITS
    )
    public = folder / "service-accounts.pub"
    public.write_bytes(
        service_accounts.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ControlPlaneCredentials(
        ca_certificate=ca_path,
        serving_certificate=_write_certificate(folder / "apiserver.crt", serving),
        serving_key=_write_key(folder / "apiserver.key", serving_key),
        service_account_public_key=public,
        service_account_signing_key=_write_key(folder / "service-accounts.key", service_accounts),
        admin=client_certificate(
            folder,
            ca_certificate=ca_path,
            ca_key=ca_key_path,
            user="ehb-local-admin",
            groups=(ADMIN_GROUP,),
            now=now,
        ),
        kubelet_client=client_certificate(
            folder, ca_certificate=ca_path, ca_key=ca_key_path, user=KUBELET_CLIENT, now=now
        ),
    )


def ca_key_path(credentials: ControlPlaneCredentials) -> Path:
    """Where `generate` put the CA's key (for more client certificates later)."""
    return credentials.ca_certificate.with_suffix(".key")
