"""Who may reach which Azure endpoint with which identity: checked once, before any client.

Every call the operator makes to Event Hubs or a checkpoint store on a consumer's behalf
passes `Admission.admit` first, in this order:

1. the identity: with no connection string and no ServiceAccount of its own, a consumer would
   use the operator's own Azure identity (DefaultAzureCredential), which is lent only to the
   Kubernetes namespaces the install lists (`IdentityPolicy`), so that a tenant cannot name
   another tenant's hub or store and read its partitions or epochs through it;
2. the endpoint: the host the SDK will dial is one the install allows
   (`contracts.endpoints.EndpointPolicy`);
3. the tenant's identity: a consumer that names a ServiceAccount (``spec.serviceAccountName``)
   and no connection string acts as that ServiceAccount (`tenantidentities`).

Credentials come in as values (a connection string read from a Secret by the caller) or as
workload identity; they are never logged, and error messages describe the namespace, not the
string.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch

from eventhub_balancer import errors
from eventhub_balancer.adapters import tenantidentities
from eventhub_balancer.contracts import endpoints

#: Where credentials may go when the caller says nothing: the public cloud, and the local
#: emulators on loopback (tests, the local stack). ``ehb operator`` always passes the policy
#: of its flags, whose default allows no development endpoint.
DEFAULT_ENDPOINTS = endpoints.EndpointPolicy(allow_development=True)
#: The spec fields a refusal of the operator's identity names.
EVENTHUB_CREDENTIALS = "spec.eventHub.credentials"
CHECKPOINT_CREDENTIALS = "spec.checkpointStore.credentials"


class Service(enum.Enum):
    """What a call reaches: the endpoint check and the refused field differ."""

    EVENTHUB = EVENTHUB_CREDENTIALS
    CHECKPOINTS = CHECKPOINT_CREDENTIALS


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdentityPolicy:
    """The Kubernetes namespaces whose consumers may use the operator's own Azure identity
    (``ehb operator --identity-namespace``, glob patterns as for ``--namespace``)."""

    #: None: every namespace (tests and the local stack, where the identity is nobody's);
    #: ``ehb operator`` always passes its list, by default empty: none
    namespaces: tuple[str, ...] | None = None

    def allows(self, namespace: str | None) -> bool:
        if self.namespaces is None:
            return True
        if not namespace:
            return False  # nobody says who asks: never lend the identity
        return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in self.namespaces)

    def check(
        self,
        *,
        namespace: str | None,
        field: str,
        connection_string: str | None,
        service_account: str | None = None,
    ) -> None:
        """Raise `errors.IdentityNotAllowed` when a consumer of ``namespace`` would use the
        operator's identity (no connection string and no ServiceAccount of its own) and may
        not."""
        if connection_string is None and not service_account and not self.allows(namespace):
            raise errors.IdentityNotAllowed(field=field, namespace=namespace or "")


#: Every namespace may use the operator's identity: what the tests and the local stack get.
ANY_NAMESPACE = IdentityPolicy()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Admission:
    """The three checks of one operator (`admissions`), and the identities they hand out."""

    endpoints: endpoints.EndpointPolicy = DEFAULT_ENDPOINTS
    identities: IdentityPolicy = ANY_NAMESPACE
    #: the consumers' own ServiceAccounts' identities; None: this process cannot act as them
    #: (a consumer naming one gets a condition saying so)
    tenant_identities: tenantidentities.TenantIdentities | None = None

    async def admit(
        self,
        service: Service,
        *,
        namespace: str | None,
        connection_string: str | None,
        service_account: str | None,
        fully_qualified_namespace: str = "",
        account_url: str | None = None,
    ) -> tenantidentities.TenantIdentity | None:
        """Raise the error that names what to change when the call may not go out; else the
        consumer's own identity to call as (None: a connection string, or the operator's
        identity, lent to ``namespace``). ``fully_qualified_namespace`` is the hub's host,
        ``account_url`` the checkpoint store's."""
        self.identities.check(
            namespace=namespace,
            field=service.value,
            connection_string=connection_string,
            service_account=service_account,
        )
        if service is Service.EVENTHUB:
            self.endpoints.check_eventhub(
                fully_qualified_namespace=fully_qualified_namespace,
                connection_string=connection_string,
            )
        else:
            self.endpoints.check_blob(account_url=account_url, connection_string=connection_string)
        if connection_string is not None or not service_account:
            return None
        if self.tenant_identities is None or not namespace:
            raise errors.TenantIdentityUnavailable(
                namespace=namespace or "",
                service_account=service_account,
                problem="cannot be used: this operator was started without access to "
                "ServiceAccount tokens (ehb operator builds it; a tool or test may not)",
            )
        return await self.tenant_identities.identity(
            namespace=namespace, service_account=service_account
        )

    def rejected(self, identity: tenantidentities.TenantIdentity | None, error: Exception) -> None:
        """A call as ``identity`` failed with ``error``: a rejected identity is looked up
        afresh next time (its annotation may be fixed)."""
        if (
            identity is not None
            and self.tenant_identities is not None
            and isinstance(error, errors.ConfigurationError)
        ):
            self.tenant_identities.forget(
                namespace=identity.namespace, service_account=identity.service_account
            )
