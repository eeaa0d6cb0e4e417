"""A tenant's own Azure identity for the operator's reads: ``spec.serviceAccountName``.

Without it, a consumer that says ``workloadIdentity: {}`` is read with the operator's own
identity, which an admin lends only to listed namespaces (`eventhubs.IdentityPolicy`). With
it, the operator acts as the ServiceAccount of the consumer's own namespace, as Flux does for
its objects: it asks the Kubernetes API for a token of that ServiceAccount (TokenRequest,
audience ``api://AzureADTokenExchange``, `TOKEN_SECONDS`) and exchanges it at Microsoft Entra
ID for the identity named by the ServiceAccount's ``azure.workload.identity/client-id``
annotation, exactly as the workload identity webhook's pods do with their projected token.
So a tenant reaches only what an identity that trusts its own ServiceAccount may reach.

A ServiceAccount lends its identity only when it opts in: the label `OPT_IN_LABEL` set to
`OPT_IN_VALUE`, which whoever may change the ServiceAccount sets (in the default roles, those
who may also run pods as it). Without it, someone who may only write EventHubConsumers would
borrow an identity they could not use themselves. The install's admission policy
(``eventhub-balancer-token-requests``) makes the API server refuse the operator a token of a
ServiceAccount without the label, whatever the operator's code does; the check here says so
first, as a condition naming the label.

Why ``ClientAssertionCredential`` rather than ``WorkloadIdentityCredential``: the latter is
the same exchange (it subclasses the former) but reads the token from a file; the operator
serves many tenants, and writing their tokens to disk would leave credentials in files to
protect and clean up. The assertion callable returns the token kept in memory here.

Tokens are kept per ServiceAccount (at most `MAX_SERVICE_ACCOUNTS`, least recently used
first out) and renewed once half their lifetime has passed, so a credential built from one
holds a token with minutes left, far more than an exchange takes. A renewal refused (the
opt-in withdrawn, the ServiceAccount deleted) drops the token: no credential built earlier is
handed it again. Every problem (no such
ServiceAccount, no annotation, a TokenRequest the operator may not make) is an
`errors.TenantIdentityUnavailable` naming what to change, raised before any client exists.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from azure.core.credentials_async import AsyncTokenCredential

from eventhub_balancer import errors

logger = logging.getLogger(__name__)

#: The audience Microsoft Entra ID accepts for a federated credential's token exchange.
AUDIENCE = "api://AzureADTokenExchange"
#: The lifetime asked of a token: the shortest the API server grants (10 minutes).
TOKEN_SECONDS = 600
#: A token is renewed once this share of its lifetime has passed (5 of 10 minutes).
RENEW_FRACTION = 0.5
#: The least lifetime counted for a token whose expiry is sooner (a clock behind the API
#: server's): every use must not become a TokenRequest.
MIN_LIFETIME_SECONDS = 60.0
#: ServiceAccounts whose tokens are kept; beyond, the least recently used is dropped (and
#: asked again when next needed): one per consumer is the most a cluster of tenants needs.
MAX_SERVICE_ACCOUNTS = 1024
#: The annotations of the Azure workload identity webhook, read from the ServiceAccount.
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
TENANT_ID_ANNOTATION = "azure.workload.identity/tenant-id"
#: The ServiceAccount's opt-in: a label (not an annotation) so that the admission policy can
#: select the ServiceAccounts without it.
OPT_IN_LABEL = "eventhub-balancer.dev/token-requests"
OPT_IN_VALUE = "allowed"
#: How a namespace opts in, for the messages: the operator reads ServiceAccounts and Secrets
#: and requests tokens only where the install binds this ClusterRole to it.
TENANT_OPT_IN = (
    "a RoleBinding there to the ClusterRole eventhub-balancer-tenant: chart value "
    "tenantNamespaces, or kubectl create rolebinding as docs/install.md shows"
)

_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
#: A tenant is a GUID or a domain name (contoso.onmicrosoft.com), as azure-identity allows.
_TENANT = re.compile(r"^[A-Za-z0-9.-]{1,253}$")


class TokenSource(Protocol):
    """What the cache needs of the Kubernetes API (`kubeapi.KubeAPI` satisfies it)."""

    async def read_service_account(self, *, namespace: str, name: str) -> Mapping[str, Any]: ...

    async def request_service_account_token(
        self, *, namespace: str, name: str, audience: str, expiration_seconds: int
    ) -> Mapping[str, Any]: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class TenantIdentity:
    """One ServiceAccount's Azure identity, ready to build a credential from."""

    namespace: str
    service_account: str
    client_id: str
    tenant_id: str
    #: the ServiceAccount's current token (renewed in place by the cache): the assertion
    assertion: Callable[[], str] = dataclasses.field(repr=False, compare=False)
    #: options for the credential's own pipeline (a test's CA bundle: ``connection_verify``)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies the identity, never the token: a change of it is a new client."""
        return (self.namespace, self.service_account, self.client_id, self.tenant_id)

    def credential(self) -> AsyncTokenCredential:
        """A credential that exchanges the ServiceAccount's token for the client id's."""
        from azure.identity.aio import ClientAssertionCredential  # heavy: only when used

        return ClientAssertionCredential(
            self.tenant_id, self.client_id, self.assertion, **dict(self.options)
        )


@dataclasses.dataclass
class _Entry:
    identity: TenantIdentity
    token: str
    #: loop time after which the token is renewed before use
    renew_at: float


def _missing(namespace: str, name: str) -> errors.ServiceAccountNotFound:
    """The consumer names a ServiceAccount its namespace lacks."""
    return errors.ServiceAccountNotFound(
        namespace=namespace,
        service_account=name,
        problem="does not exist: create it (annotated "
        f"{CLIENT_ID_ANNOTATION}) or set spec.serviceAccountName to one that does",
    )


class TenantIdentities:
    """Tokens of the consumers' ServiceAccounts, requested, kept and renewed (bounded)."""

    def __init__(
        self,
        source: TokenSource,
        *,
        default_tenant_id: str | None = None,
        credential_options: Mapping[str, Any] | None = None,
        max_service_accounts: int = MAX_SERVICE_ACCOUNTS,
    ) -> None:
        self.source = source
        #: the operator's AZURE_TENANT_ID: the tenant of a ServiceAccount that names none
        self.default_tenant_id = default_tenant_id or None
        self.credential_options = dict(credential_options or {})
        self.max_service_accounts = max_service_accounts
        self._entries: collections.OrderedDict[tuple[str, str], _Entry] = collections.OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        #: TokenRequests made, for tests and metrics
        self.requested = 0

    def forget(self, *, namespace: str, service_account: str) -> None:
        """Read the ServiceAccount and request a token afresh next time (the identity failed)."""
        self._entries.pop((namespace, service_account), None)

    async def identity(self, *, namespace: str, service_account: str) -> TenantIdentity:
        """The ServiceAccount's identity with a token that has at least half its life left."""
        key = (namespace, service_account)
        if key not in self._locks and len(self._locks) >= self.max_service_accounts:
            self._prune_locks()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            now = asyncio.get_running_loop().time()
            entry = self._entries.get(key)
            if entry is None or now >= entry.renew_at:
                try:
                    entry = await self._renew(namespace, service_account, now=now)
                except errors.TenantIdentityUnavailable:
                    # Refused (the opt-in withdrawn, the ServiceAccount gone...): the token
                    # kept from before is no longer handed to anyone (`_current`).
                    self._entries.pop(key, None)
                    raise
            self._entries[key] = entry
            self._entries.move_to_end(key)
            self._trim()
            return entry.identity

    def _trim(self) -> None:
        while len(self._entries) > self.max_service_accounts:
            old, _ = self._entries.popitem(last=False)
            lock = self._locks.get(old)
            if lock is not None and not lock.locked():
                del self._locks[old]

    def _prune_locks(self) -> None:
        """Drop the idle locks of ServiceAccounts no longer kept (their lookups failed, or
        they were dropped): a tenant naming ever new ones must not grow the operator."""
        for key in [k for k, lock in self._locks.items() if not lock.locked()]:
            if key not in self._entries:
                del self._locks[key]

    def _current(self, key: tuple[str, str]) -> Callable[[], str]:
        def assertion() -> str:
            # Only a kept token is handed out: one whose renewal was refused, or forgotten,
            # is not (a credential built earlier would go on exchanging it until it expired).
            # A consumer still admitted has its ServiceAccount read again at its next cycle.
            entry = self._entries.get(key)
            if entry is None:
                raise errors.TenantIdentityUnavailable(
                    namespace=key[0],
                    service_account=key[1],
                    problem="has no token kept: it is read again, and its opt-in checked, "
                    "at the consumer's next cycle",
                )
            return entry.token

        return assertion

    async def _renew(self, namespace: str, name: str, *, now: float) -> _Entry:
        account = await self._read(namespace, name)
        labels = (account.get("metadata") or {}).get("labels") or {}
        if labels.get(OPT_IN_LABEL) != OPT_IN_VALUE:
            raise errors.ServiceAccountNotOptedIn(
                namespace=namespace,
                service_account=name,
                problem=f"has not opted in to lending its identity: whoever may change it "
                f"labels it {OPT_IN_LABEL}={OPT_IN_VALUE} (kubectl label serviceaccount {name} "
                f"-n {namespace} {OPT_IN_LABEL}={OPT_IN_VALUE})",
            )
        annotations = (account.get("metadata") or {}).get("annotations") or {}
        client_id = str(annotations.get(CLIENT_ID_ANNOTATION) or "").strip()
        if not _GUID.match(client_id):
            problem = "has no" if not client_id else "has a malformed (not a GUID)"
            raise errors.ServiceAccountNotAnnotated(
                namespace=namespace,
                service_account=name,
                problem=f"{problem} {CLIENT_ID_ANNOTATION} annotation: annotate it with the "
                "client id of the managed identity (or app registration) whose federated "
                f"credential trusts system:serviceaccount:{namespace}:{name}",
            )
        tenant_id = str(annotations.get(TENANT_ID_ANNOTATION) or "").strip()
        if tenant_id and not _TENANT.match(tenant_id):
            raise errors.ServiceAccountNotAnnotated(
                namespace=namespace,
                service_account=name,
                problem=f"has a malformed {TENANT_ID_ANNOTATION} annotation: use the "
                "identity's tenant id (a GUID) or remove the annotation",
            )
        tenant_id = tenant_id or self.default_tenant_id or ""
        if not tenant_id:
            raise errors.ServiceAccountNotAnnotated(
                namespace=namespace,
                service_account=name,
                problem=f"has no {TENANT_ID_ANNOTATION} annotation and the operator has no "
                "AZURE_TENANT_ID: annotate the ServiceAccount with the identity's tenant id",
            )
        token, lifetime = await self._request(namespace, name)
        identity = TenantIdentity(
            namespace=namespace,
            service_account=name,
            client_id=client_id,
            tenant_id=tenant_id,
            assertion=self._current((namespace, name)),
            options=self.credential_options,
        )
        logger.info(
            "token of ServiceAccount %s/%s for client id %s, renewed in %.0f s",
            namespace,
            name,
            client_id,
            lifetime * RENEW_FRACTION,
        )
        return _Entry(identity=identity, token=token, renew_at=now + lifetime * RENEW_FRACTION)

    async def _read(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            return await self.source.read_service_account(namespace=namespace, name=name)
        except errors.NotFound as e:
            raise _missing(namespace, name) from e
        except errors.Forbidden as e:
            raise errors.TokenRequestForbidden(
                namespace=namespace,
                service_account=name,
                problem=f"cannot be read (403): namespace {namespace} has not opted in "
                f"({TENANT_OPT_IN})",
            ) from e

    async def _request(self, namespace: str, name: str) -> tuple[str, float]:
        """A fresh token and how long it lives (seconds, by the API server's expiry)."""
        self.requested += 1
        try:
            status = await self.source.request_service_account_token(
                namespace=namespace,
                name=name,
                audience=AUDIENCE,
                expiration_seconds=TOKEN_SECONDS,
            )
        except errors.NotFound as e:
            raise _missing(namespace, name) from e
        except errors.Forbidden as e:
            raise errors.TokenRequestForbidden(
                namespace=namespace,
                service_account=name,
                problem=f"is refused a token ({e}): either namespace {namespace} has not "
                f"opted in ({TENANT_OPT_IN}), or the admission policy "
                "eventhub-balancer-token-requests refused the request (the API server's "
                "message says why)",
            ) from e
        token = status.get("token")
        if not isinstance(token, str) or not token:
            raise errors.ApiUnavailable(
                f"TokenRequest for ServiceAccount {namespace}/{name}: the answer has no token"
            )
        return token, _lifetime(status.get("expirationTimestamp"))


def _lifetime(expiration: object) -> float:
    """Seconds the token lives: what the API server says, never more than was asked."""
    if not isinstance(expiration, str):
        return float(TOKEN_SECONDS)
    try:
        expires = datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00"))
    except ValueError:
        return float(TOKEN_SECONDS)
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=datetime.UTC)
    left = expires.timestamp() - time.time()
    return max(MIN_LIFETIME_SECONDS, min(float(TOKEN_SECONDS), left))
