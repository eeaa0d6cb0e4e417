"""Whose identity an admin's command acts with: the one the EventHubConsumer declares.

``ehb checkpoints list|export|import|reset NAME`` and ``ehb deadletters list|show|replay NAME``
read a tenant's EventHubConsumer and act on the hub and the checkpoint store it names. Whoever
runs them usually holds wide rights (an admin's ``DefaultAzureCredential`` reaches every
tenant's storage and hubs), and the CR is the tenant's: acting with the runner's rights where
the CR points would make the command a confused deputy (a tenant names another tenant's
account or hub and waits for an admin to read, reset or replay into it). So each service a
command touches (the checkpoint store; the Event Hub where it reads partition ids or sends)
is reached with the identity the CR declares for it, as the operator reaches it:

- ``connectionStringSecretRef``: the Secret's connection string, read with the runner's
  Kubernetes rights in the CR's namespace;
- ``spec.serviceAccountName``: that ServiceAccount's federated identity, through a
  TokenRequest made with the runner's Kubernetes rights (`adapters.tenantidentities`, with the
  same opt-in label and annotations the operator requires);
- ``workloadIdentity`` alone (the operator's own identity, in a namespace an admin lends it
  to): the runner's own identity only when the runner says so (``--use-my-identity``) and the
  service's host is bound to the CR's namespace (``--bind-location NS=HOST`` or
  ``EHB_LOCATION_BINDINGS``, as the operator's own bindings say whose a host is).

A credential the runner passes for a named consumer (``ehb deadletters``' ``--connection-string``,
``--account-url``, ``--eventhub-connection-string`` and their variables) is the runner's as
well: it is used only for a host bound to the CR's namespace. Every refusal names the flag and
the binding that would allow it, and comes before any credential exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from eventhub_balancer.contracts import connectionstrings, endpoints, specs
from eventhub_balancer.reconciling import conflicts

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential

    from eventhub_balancer.adapters import tenantidentities

#: The runner's own identity, named explicitly.
USE_MY_IDENTITY = "--use-my-identity"
#: The hosts bound to namespaces, as ``NS=HOST`` items separated by commas (the operator's
#: ``--bind-location`` flags, or the chart's ``locationBindings``).
ENV_LOCATION_BINDINGS = "EHB_LOCATION_BINDINGS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--use-my-identity`` and ``--bind-location``, for a command that acts on a consumer."""
    acting = parser.add_argument_group(
        "whose identity acts (the one the EventHubConsumer declares)"
    )
    acting.add_argument(
        USE_MY_IDENTITY,
        action="store_true",
        help="act with your own Azure identity (DefaultAzureCredential) where the "
        "EventHubConsumer declares workload identity without spec.serviceAccountName; only "
        "for hosts bound to its namespace (--bind-location)",
    )
    acting.add_argument(
        "--bind-location",
        action="append",
        default=[],
        metavar="NS=HOST",
        help="a host that belongs to namespace NS, as the operator's --bind-location says "
        f"(repeatable; env {ENV_LOCATION_BINDINGS}, comma-separated)",
    )


def bindings(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> conflicts.Bindings:
    """The bindings from the flags, else the environment; none by default."""
    flagged = list(getattr(args, "bind_location", None) or [])
    if flagged:
        return conflicts.Bindings.parse(flagged, field="--bind-location")
    listed = [item for item in env.get(ENV_LOCATION_BINDINGS, "").split(",") if item.strip()]
    return conflicts.Bindings.parse(listed, field=ENV_LOCATION_BINDINGS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Service:
    """One service of a consumer as its CR declares it."""

    #: "checkpoint store" or "Event Hub", for messages
    what: str
    #: where the CR declares it: spec.checkpointStore or spec.eventHub
    field: str
    credentials: specs.Credentials
    #: the host the CR names for it (normalised by `endpoints.host`)
    host: str
    #: the account URL a token would go to (the checkpoint store's), else None
    account_url: str | None = None


def checkpoint_store(spec: specs.ConsumerSpec) -> Service:
    return Service(
        what="checkpoint store",
        field="spec.checkpointStore",
        credentials=spec.checkpoint_credentials,
        host=endpoints.host(spec.checkpoint_account_url),
        account_url=spec.checkpoint_account_url or None,
    )


def event_hub(spec: specs.ConsumerSpec) -> Service:
    return Service(
        what="Event Hub",
        field="spec.eventHub",
        credentials=spec.event_hub_credentials,
        host=endpoints.host(spec.fully_qualified_namespace),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunnerCredential:
    """A credential the runner gave for a named consumer (a flag or a variable)."""

    #: the flag or variable it came from
    source: str
    connection_string: str | None = dataclasses.field(default=None, repr=False)
    #: ``--account-url``: the runner's own identity at this URL
    account_url: str | None = None

    def host(self, *, blob: bool) -> str:
        """The host the SDK will dial with it (as the allow-list reads it)."""
        if self.connection_string is None:
            return endpoints.host(self.account_url or "")
        field = self.source
        fields = endpoints.connection_string_fields(self.connection_string, field=field)
        if blob:
            urls = endpoints.blob_urls(fields)
            return endpoints.host(urls[0]) if urls else ""
        return endpoints.host(fields.get("endpoint") or fields.get("hostname") or "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Acting:
    """How a command reaches one service of a consumer: exactly one of a connection string,
    a ServiceAccount's identity, or the runner's own identity. Never logged."""

    #: what it acts as, for messages: a Secret, a ServiceAccount, a flag
    source: str
    connection_string: str | None = dataclasses.field(default=None, repr=False)
    identity: tenantidentities.TenantIdentity | None = None
    #: the runner's own DefaultAzureCredential (allowed by a flag and a binding)
    own: bool = False
    #: the account URL a token goes to (the checkpoint store without a connection string)
    account_url: str | None = None

    def credential(self) -> AsyncTokenCredential | None:
        """A new credential for a token (None for a connection string): the ServiceAccount's,
        or the runner's own, built here so that no client falls back to one by omission."""
        if self.connection_string is not None:
            return None
        if self.identity is not None:
            return self.identity.credential()
        assert self.own, "an Acting without a connection string or identity is the runner's"
        from azure.identity.aio import DefaultAzureCredential  # heavy: only when used

        return DefaultAzureCredential()


def tenant_identities(api: Any) -> tenantidentities.TenantIdentities:
    """The ServiceAccounts' tokens, requested with the runner's Kubernetes rights; the tenant
    of a ServiceAccount without a tenant-id annotation is ``AZURE_TENANT_ID``'s."""
    from eventhub_balancer.adapters import tenantidentities

    return tenantidentities.TenantIdentities(
        api, default_tenant_id=os.environ.get("AZURE_TENANT_ID")
    )


async def resolve(
    api: Any,
    args: argparse.Namespace,
    *,
    consumer: str,
    namespace: str,
    spec: specs.ConsumerSpec,
    service: Service,
    runner: RunnerCredential | None = None,
) -> Acting:
    """How ``service`` of EventHubConsumer ``namespace/consumer`` is reached (module doc).

    Raises `errors.IdentityRefused` naming the flag and binding that would allow the runner's
    own credentials, `errors.TenantIdentityUnavailable` for a ServiceAccount that cannot lend
    its identity, `errors.SecretNotFound`; nothing is built before that.
    """
    from eventhub_balancer import errors

    title = f"EventHubConsumer {namespace}/{consumer}"
    if runner is not None:
        host = runner.host(blob=service.field == "spec.checkpointStore")
        _require_bound(
            args,
            host=host,
            namespace=namespace,
            flag=runner.source,
            title=title,
            service=service,
            own=runner.connection_string is None,
        )
        return Acting(
            source=runner.source,
            connection_string=runner.connection_string,
            own=runner.connection_string is None,
            account_url=runner.account_url,
        )
    ref = service.credentials.secret_ref
    if ref is not None:
        value = await api.read_secret_key(namespace=namespace, name=ref.name, key=ref.key)
        problem = (
            connectionstrings.blob_problem(value)
            if service.field == "spec.checkpointStore"
            else connectionstrings.eventhub_problem(value, spec.fully_qualified_namespace)
        )
        source = f"Secret {namespace}/{ref.name}, key {ref.key!r}"
        if problem is not None:
            raise errors.InvalidInput(source, problem)
        return Acting(source=source, connection_string=value)
    if spec.service_account_name:
        identity = await tenant_identities(api).identity(
            namespace=namespace, service_account=spec.service_account_name
        )
        return Acting(
            source=f"ServiceAccount {namespace}/{spec.service_account_name}",
            identity=identity,
            account_url=service.account_url,
        )
    _require_bound(
        args,
        host=service.host,
        namespace=namespace,
        flag=USE_MY_IDENTITY,
        title=title,
        service=service,
        own=True,
    )
    return Acting(
        source=f"your own identity ({USE_MY_IDENTITY})", own=True, account_url=service.account_url
    )


def _require_bound(
    args: argparse.Namespace,
    *,
    host: str,
    namespace: str,
    flag: str,
    title: str,
    service: Service,
    own: bool,
) -> None:
    """Refuse the runner's credentials unless named by flag and ``host`` is bound to
    ``namespace``."""
    from eventhub_balancer import errors

    binding = f"--bind-location {namespace}={host or 'HOST'} (or {ENV_LOCATION_BINDINGS})"
    declared = (
        f"{title} declares workload identity for the {service.what} without "
        "spec.serviceAccountName (the operator's own identity)"
    )
    way_out = (
        f"set spec.serviceAccountName (a ServiceAccount of {namespace} with its own workload "
        f"identity) or {service.field}.credentials.connectionStringSecretRef on the CR"
    )
    if flag == USE_MY_IDENTITY and not getattr(args, "use_my_identity", False):
        raise errors.IdentityRefused(
            f"{service.field}: {declared}, so this command would act with your own Azure "
            f"identity, which a tenant's CR could point at another tenant's {service.what}: "
            f"refused. Either {way_out}, or, if {host or 'its host'} belongs to namespace "
            f"{namespace}, run again with {USE_MY_IDENTITY} {binding}"
        )
    owner = bindings(args).owner(host) if host else None
    if owner == namespace:
        return
    bound = "is bound to another namespace" if owner else "is bound to no namespace"
    whose = "your own identity" if own else "your credential"
    raise errors.IdentityRefused(
        f"{flag}: {whose} would act on {title}'s {service.what} at {host or '(no host)'}, "
        f"which {bound}: refused, since a tenant's CR could name another tenant's host. If it "
        f"belongs to namespace {namespace}, give {binding} as the operator's bindings say; or "
        f"drop {flag} and act with the credentials the CR declares"
        + (f" ({way_out})" if flag == USE_MY_IDENTITY else "")
    )
