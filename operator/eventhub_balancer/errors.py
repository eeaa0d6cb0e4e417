"""The project's one error hierarchy.

Adapters wrap the SDKs' exceptions into these (``raise ... from e``); only the kopf handlers
turn them into conditions, Events and retries, and only the CLI turns them into exit codes.
Every message says what happened and, for a user's mistake, what to change.

Every class carries a ``reason``: the CamelCase word that a condition or a Kubernetes Event
shows for it (API conventions want specific reasons, not ``Error``). It is a class attribute,
so the handlers read ``error.reason`` without knowing which adapter raised it. The generic
classes (`ConfigurationError`, `TransientError`) have generic reasons that the caller may
replace with one naming what it was talking to (``EventHubMisconfigured``).
"""

from typing import ClassVar


class EventHubBalancerError(Exception):
    """The base of every error this project raises on purpose."""

    reason: ClassVar[str] = "Failed"
    #: the operator's ConfigMap whose write failed with it (`handlers.writing`); None: none
    configmap: str | None = None
    #: the message without what changes from one attempt to the next (the attempts made, the
    #: seconds spent), as a status shows it; None: the message as it is
    steady: str | None = None


class InvalidInput(EventHubBalancerError, ValueError):
    """Input from a user (a scenario, a CR, a flag) is wrong; the message names the field."""

    reason: ClassVar[str] = "InvalidInput"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ConfigurationError(EventHubBalancerError):
    """The environment or a referenced object is missing or wrong (a Secret, a pod name)."""

    reason: ClassVar[str] = "Misconfigured"


class TransientError(EventHubBalancerError):
    """A dependency failed in a way that may pass: retry later with backoff."""

    reason: ClassVar[str] = "Unavailable"


class EventHubUnreachable(TransientError):
    """Event Hubs could not be reached or refused the request."""

    reason: ClassVar[str] = "EventHubUnreachable"


class CheckpointStoreUnreachable(TransientError):
    """Blob Storage could not be reached, or the retry budget ran out."""

    reason: ClassVar[str] = "CheckpointStoreUnreachable"
    #: the failure without the operation it was met in (a partition's blob, its sequence
    #: number), as every partition meets an outage alike; None: only the message says it
    cause: str | None = None


class CheckpointStoreRefused(ConfigurationError):
    """The checkpoint store refuses this client: its credentials, or what they may do. Every
    partition meets it alike, so ``cause`` says it without the one operation it was met in
    (a partition's blob and sequence number), as each partition's report carries it."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class OwnershipLost(EventHubBalancerError):
    """A higher epoch owns the partition now: stop processing it, never retry blindly."""

    reason: ClassVar[str] = "OwnershipLost"

    def __init__(
        self, partition: str, our_epoch: int, their_epoch: int | None, owner: str = ""
    ) -> None:
        """``their_epoch`` None: not known (Event Hubs' detach of a stolen link names none)."""
        who = f" by {owner}" if owner else ""
        theirs = "a higher epoch" if their_epoch is None else f"epoch {their_epoch}"
        super().__init__(
            f"partition {partition}: ownership lost, {theirs}{who} supersedes our epoch {our_epoch}"
        )
        self.partition = partition
        self.our_epoch = our_epoch
        self.their_epoch = their_epoch
        self.owner = owner


# --- Event Hubs (raised by adapters.eventhubs) ---


class EventHubNotFound(ConfigurationError):
    """The namespace answered but has no such Event Hub (or consumer group)."""

    reason: ClassVar[str] = "EventHubNotFound"


class CheckpointContainerNotFound(ConfigurationError):
    """The storage account answered but has no such checkpoint container (deleted, or never
    created): every partition of the consumer fails with it until it is created. Its reason
    stays ``Misconfigured``, as the operator's conditions show it."""


class ConsumerGroupNotFound(EventHubNotFound):
    """The Event Hub exists, but not the consumer group the spec names: nobody can receive
    until it is created (Azure creates none on demand) or the spec names another."""

    reason: ClassVar[str] = "ConsumerGroupNotFound"


class EventHubAuthenticationFailed(ConfigurationError):
    """Event Hubs rejected the credentials."""

    reason: ClassVar[str] = "EventHubAuthenticationFailed"


# --- the Kubernetes API (raised by adapters.kubeapi) ---


class ApiUnavailable(TransientError):
    """The Kubernetes API could not be reached or answered 5xx/429: retry later."""

    reason: ClassVar[str] = "ApiUnavailable"


class ApiThrottled(ApiUnavailable):
    """The Kubernetes API server refused the request for its load (429: API Priority and
    Fairness; or 503 with a ``Retry-After``: a server or a proxy shedding load); it asked to be
    asked again after ``retry_after`` seconds (None: it did not say).
    Its reason stays ``ApiUnavailable``, as the conditions and metrics have always said it."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Conflict(TransientError):
    """The object changed since it was read (409): re-read and re-plan."""

    reason: ClassVar[str] = "Conflict"


class NotFound(ConfigurationError):
    """The object does not exist (404)."""

    reason: ClassVar[str] = "NotFound"


class ResourceGone(NotFound):
    """A resource the operator watches stopped being served while it ran (its watch answered
    404): a CRD deleted, kopf's peering CRD or the EventHubConsumer's."""

    reason: ClassVar[str] = "ResourceGone"


class Forbidden(ConfigurationError):
    """The operator's ServiceAccount may not do this (403): its RBAC needs a rule."""

    reason: ClassVar[str] = "Forbidden"


class SecretForbidden(Forbidden):
    """A Secret the spec names that the operator may not read: its namespace has not lent it
    the tenant ClusterRole (or lost the RoleBinding with the namespace). Someone binds it and
    waits, as for a Secret that does not exist: it is asked again as often."""


class NamespaceTerminating(Forbidden):
    """A create refused because its namespace is being deleted (kube-apiserver's 403 with
    the cause ``NamespaceTerminating``): what it would have made goes with the namespace, and
    there is no right to grant."""

    reason: ClassVar[str] = "NamespaceTerminating"


class QuotaExceeded(Forbidden):
    """A create refused by a ResourceQuota of its namespace (403 ``exceeded quota``): there is
    no right to grant; the quota, or what uses it up, is to change."""

    reason: ClassVar[str] = "QuotaExceeded"


class AdmissionDenied(Forbidden):
    """A write refused by an admission webhook or a ValidatingAdmissionPolicy (403, its
    message quoted): there is no right to grant; the policy is to let the write through."""

    reason: ClassVar[str] = "AdmissionDenied"


class LabelsRewritten(ConfigurationError):
    """The API server stored one of the operator's ConfigMaps with other labels than it wrote:
    a mutating admission policy or webhook rewrites them, and neither the operator's watch nor
    the pod's finds the ConfigMap any more."""

    reason: ClassVar[str] = "LabelsRewritten"


class ApiRejected(ConfigurationError):
    """The API server refused the body (400/422): a bug or a schema the cluster does not know."""

    reason: ClassVar[str] = "ApiRejected"


class SecretNotFound(ConfigurationError):
    """A Secret (or a key in it) that the spec references is missing."""

    reason: ClassVar[str] = "SecretNotFound"

    def __init__(self, *, namespace: str, name: str, key: str, missing_key: bool) -> None:
        what = (
            f"Secret {namespace}/{name} has no key {key!r}: add the connection string under "
            "that key"
            if missing_key
            else f"Secret {namespace}/{name} not found: create it with the connection string "
            f"under key {key!r}"
        )
        super().__init__(f"{what}, or fix the connectionStringSecretRef in the spec that names it")
        self.namespace = namespace
        self.name = name
        self.key = key
        self.missing_key = missing_key


class EndpointNotAllowed(ConfigurationError):
    """A spec (or an assignment) points at a host outside the install's allowed DNS suffixes:
    refused before any credential is used, so no token goes to a host the installer did not
    allow."""

    reason: ClassVar[str] = "EndpointNotAllowed"

    def __init__(
        self,
        *,
        field: str,
        host: str,
        allowed: tuple[str, ...],
        setting: str,
        development: bool = False,
    ) -> None:
        """``development``: an emulator refused because development endpoints are not
        allowed, which no DNS suffix would let through (``setting`` allows them)."""
        if development:
            message = (
                f"{field}: host {host!r} is a development endpoint (a local emulator), refused "
                f"unless development endpoints are allowed ({setting})"
            )
        else:
            listed = ", ".join(allowed) if allowed else "none"
            message = (
                f"{field}: host {host!r} is not allowed (allowed DNS suffixes: {listed}); use "
                f"an endpoint under one of them, or have the installer add its suffix ({setting})"
            )
        super().__init__(message)
        self.field = field
        self.host = host


class IdentityNotAllowed(ConfigurationError):
    """A consumer relies on the operator's own Azure identity (workload identity) in a
    namespace the install does not lend it to: refused before any credential exists, so one
    tenant cannot read another's hub or blobs through the operator."""

    reason: ClassVar[str] = "IdentityNotAllowed"

    def __init__(self, *, field: str, namespace: str) -> None:
        super().__init__(
            f"{field}: namespace {namespace!r} may not use the operator's own Azure identity "
            "(it is lent only to the namespaces an admin lists: ehb operator "
            "--identity-namespace, chart value operatorIdentity.namespaces); set "
            f"{field}.connectionStringSecretRef to a Secret of this namespace, or "
            "spec.serviceAccountName to a ServiceAccount of this namespace annotated with its "
            "own workload identity (azure.workload.identity/client-id), or ask an admin to list "
            "the namespace"
        )
        self.field = field
        self.namespace = namespace


class TenantIdentityUnavailable(ConfigurationError):
    """``spec.serviceAccountName`` names a ServiceAccount whose identity the operator cannot
    use: it is missing, lacks its workload-identity annotations, or the operator may not read
    it or request its token. Raised before any Event Hubs or Blob client exists; the message
    names the ServiceAccount and what to change."""

    reason: ClassVar[str] = "ServiceAccountIdentityUnavailable"

    def __init__(self, *, namespace: str, service_account: str, problem: str) -> None:
        super().__init__(
            f"spec.serviceAccountName: ServiceAccount {namespace}/{service_account} {problem}"
        )
        self.namespace = namespace
        self.service_account = service_account


class ServiceAccountNotFound(TenantIdentityUnavailable):
    """The ServiceAccount ``spec.serviceAccountName`` names does not exist (yet)."""

    reason: ClassVar[str] = "ServiceAccountNotFound"


class ServiceAccountNotAnnotated(TenantIdentityUnavailable):
    """The ServiceAccount lacks (or has a malformed) client-id or tenant-id annotation."""

    reason: ClassVar[str] = "ServiceAccountNotAnnotated"


class TokenRequestForbidden(TenantIdentityUnavailable):
    """The operator may not read the ServiceAccount or request its token (403)."""

    reason: ClassVar[str] = "TokenRequestForbidden"


class ServiceAccountNotOptedIn(TenantIdentityUnavailable):
    """The ServiceAccount has not opted in to lending its identity (the label
    ``eventhub-balancer.dev/token-requests: allowed``, which whoever may use the ServiceAccount
    sets): a CR's author alone may not borrow it."""

    reason: ClassVar[str] = "ServiceAccountNotOptedIn"


class IdentityRefused(ConfigurationError):
    """An admin's command would act with a credential the EventHubConsumer does not declare
    (the runner's own identity or connection string) on a host not bound to the CR's
    namespace: refused before any credential exists, naming the flag and the binding that
    would allow it."""

    reason: ClassVar[str] = "IdentityRefused"


class AmbiguousConnectionString(EndpointNotAllowed):
    """A connection string that the SDKs could read differently from the endpoint check
    (a key twice, a key that is not plain ASCII letters, an empty part): refused as a whole,
    since the host that was checked might not be the host the SDK dials."""

    def __init__(self, *, field: str, problem: str) -> None:
        ConfigurationError.__init__(
            self,
            f"{field}: {problem}; write each key once, in plain ASCII letters "
            "(Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=...;"
            "SharedAccessKey=... or AccountName=...;AccountKey=...;EndpointSuffix=...)",
        )
        self.field = field
        self.host = ""
