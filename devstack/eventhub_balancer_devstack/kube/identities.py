"""Who sends a request to the local API server: bearer tokens mapped to Kubernetes users.

Admission policies decide by ``request.userInfo``, so a pod must be able to present the identity
a cluster gives it. A real cluster mounts a bound service-account token, a JWT whose
``kubernetes.io`` claims name the namespace, service account and pod; the API server turns it
into the user ``system:serviceaccount:NS:SA`` with the pod's name and uid in ``extra``. The local
server accepts the same claims in an unsigned JWT (``pod_token``): no key to manage, and the same
user comes out. Any other token is the local administrator (``system:masters``), as the dummy
token of the default kubeconfig always was; no token is ``system:anonymous``.

The TokenRequest API (``POST .../serviceaccounts/NAME/token``) mints the same kind of JWT
for a ServiceAccount alone (`service_account_token`): with the audiences and expiry asked,
as the operator asks for one to exchange at Microsoft Entra ID (``spec.serviceAccountName``).
Presented back to this server, it is that ServiceAccount, with no pod claims.

kubectl never sends a bearer token over plain HTTP, so a kubeconfig for a pod also carries the
same identity as impersonation (``as``, ``as-user-extra``), which kubectl sends as
``Impersonate-*`` headers. The local server honours impersonation from anyone (it has no RBAC;
it is a test double, not a security boundary) and completes a service account's groups as a
real server does.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

#: The issuer of the tokens the local server mints; other issuers are not pod identities.
ISSUER = "ehb-local"

#: Keys of ``userInfo.extra`` a real API server sets from a bound token's pod claims.
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"

#: The user of every request with a token that is not a pod identity (the default kubeconfig).
ADMIN_USERNAME = "ehb-local-admin"

#: TokenRequest bounds as a real API server has them: no token shorter than 10 minutes, an
#: hour when none is asked, and the API server itself as the audience when none is named.
TOKEN_MIN_SECONDS = 600
TOKEN_DEFAULT_SECONDS = 3600
DEFAULT_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


class UserInfo(TypedDict):
    """``request.userInfo`` as admission sees it (authentication.k8s.io/v1 UserInfo)."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PodIdentity:
    """A pod's service-account identity, as a bound token carries it."""

    namespace: str
    service_account: str
    pod_name: str
    pod_uid: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def _b64(data: Mapping[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def pod_token(identity: PodIdentity) -> str:
    """An unsigned JWT with a bound service-account token's claims, for the local server only."""
    claims = {
        "iss": ISSUER,
        "sub": identity.username,
        "kubernetes.io": {
            "namespace": identity.namespace,
            "serviceaccount": {"name": identity.service_account},
            "pod": {"name": identity.pod_name, "uid": identity.pod_uid},
        },
    }
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."


def service_account_token(
    *,
    namespace: str,
    name: str,
    uid: str,
    audiences: Iterable[str],
    issued_at: int,
    expiration_seconds: int,
) -> str:
    """An unsigned JWT with a TokenRequest's claims for a ServiceAccount (no pod bound)."""
    claims = {
        "iss": ISSUER,
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "aud": list(audiences),
        "iat": issued_at,
        "nbf": issued_at,
        "exp": issued_at + expiration_seconds,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
    }
    return f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(claims)}."


def token_claims(token: str) -> Mapping[str, Any] | None:
    """The claims of a token this server minted; None for any other."""
    return _claims(token)


def _claims(token: str) -> Mapping[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except ValueError:
        return None
    return claims if isinstance(claims, dict) and claims.get("iss") == ISSUER else None


def pod_identity(token: str) -> PodIdentity | None:
    """The pod identity a token presents, or None if it is not one minted by ``pod_token``."""
    claims = _claims(token)
    k8s = claims.get("kubernetes.io") if claims else None
    if not isinstance(k8s, dict):
        return None
    pod, account = k8s.get("pod") or {}, k8s.get("serviceaccount") or {}
    if not (k8s.get("namespace") and account.get("name") and pod.get("name")):
        return None
    return PodIdentity(
        namespace=str(k8s["namespace"]),
        service_account=str(account["name"]),
        pod_name=str(pod["name"]),
        pod_uid=str(pod.get("uid") or ""),
    )


def _service_account_groups(username: str) -> list[str]:
    namespace = username.split(":")[2] if username.count(":") == 3 else ""
    return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]


def user_of(authorization: str | None, impersonation: Iterable[tuple[str, str]] = ()) -> UserInfo:
    """The user of a request: its ``Authorization`` header, or whom it impersonates.

    ``impersonation`` is every request header as (name, value) pairs, repeated names included
    (``Impersonate-Group`` comes once per group); only the ``Impersonate-*`` ones count.
    """
    impersonated = _impersonated(impersonation)
    if impersonated is not None:
        return impersonated
    return _authenticated(authorization)


def _impersonated(headers: Iterable[tuple[str, str]]) -> UserInfo | None:
    username = None
    uid = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}
    for name, value in headers:
        lowered = name.lower()
        if lowered == "impersonate-user":
            username = value
        elif lowered == "impersonate-uid":
            uid = value
        elif lowered == "impersonate-group":
            groups.append(value)
        elif lowered.startswith("impersonate-extra-"):
            key = urllib.parse.unquote(lowered.removeprefix("impersonate-extra-"))
            extra.setdefault(key, []).append(value)
    if username is None:
        return None
    if username.startswith("system:serviceaccount:"):
        groups += [g for g in _service_account_groups(username) if g not in groups]
    if "system:authenticated" not in groups and username != "system:anonymous":
        groups.append("system:authenticated")
    return {"username": username, "uid": uid, "groups": groups, "extra": extra}


def _authenticated(authorization: str | None) -> UserInfo:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return {
            "username": "system:anonymous",
            "uid": "",
            "groups": ["system:unauthenticated"],
            "extra": {},
        }
    identity = pod_identity(token.strip())
    account = _service_account_of(token.strip()) if identity is None else None
    if account is not None:
        return {
            "username": account,
            "uid": "",
            "groups": [*_service_account_groups(account), "system:authenticated"],
            "extra": {},
        }
    if identity is None:
        return {
            "username": ADMIN_USERNAME,
            "uid": "",
            "groups": ["system:masters", "system:authenticated"],
            "extra": {},
        }
    return {
        "username": identity.username,
        "uid": "",
        "groups": [*_service_account_groups(identity.username), "system:authenticated"],
        "extra": {POD_NAME_KEY: [identity.pod_name], POD_UID_KEY: [identity.pod_uid]},
    }


def _service_account_of(token: str) -> str | None:
    """The user of a TokenRequest's token (a ServiceAccount, no pod), else None."""
    claims = _claims(token)
    k8s = claims.get("kubernetes.io") if claims else None
    if not isinstance(k8s, dict):
        return None
    account = k8s.get("serviceaccount") or {}
    if not (k8s.get("namespace") and isinstance(account, dict) and account.get("name")):
        return None
    return f"system:serviceaccount:{k8s['namespace']}:{account['name']}"


def kubeconfig_user(identity: PodIdentity) -> dict[str, object]:
    """A kubeconfig ``user`` entry for a pod: its token, and the same identity impersonated."""
    return {
        "token": pod_token(identity),
        "as": identity.username,
        "as-user-extra": {POD_NAME_KEY: [identity.pod_name], POD_UID_KEY: [identity.pod_uid]},
    }
