"""The EventHubConsumer custom resource as the operator and the pods read it.

The CRD's OpenAPI schema checks shapes and bounds at admission; this module turns an admitted
(or, in tests and on clusters without CEL, a not-quite-admitted) ``spec`` into one frozen
`ConsumerSpec` with the CRD's defaults filled in, and checks what a structural schema cannot
express: the shape of ``startPosition`` (read by ``contracts.startpositions``), exactly one
credentials kind, ``accountUrl`` with workload identity, ``serviceAccountName`` as a
ServiceAccount name, and (in ``contracts.specvalues``) the names and hosts a client must be
able to use. Every problem is an
`errors.InvalidInput` naming the field to change. The selector, a concern of its own (parsed
here, matched against pods and sent to list calls by the handlers), is in
``contracts.labelselectors``; the status's shape, which the operator writes and nobody
validates, in ``contracts.statusbodies``; times as Kubernetes writes them in
``contracts.timestamps``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypedDict, cast

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import (
    failurepolicy,
    labelselectors,
    specvalues,
    startpositions,
    statusbodies,
)

GROUP = "eventhub-balancer.dev"
VERSION = "v1alpha1"
PLURAL = "eventhubconsumers"
KIND = "EventHubConsumer"

#: The spec's selector; callers know it by this module's name as well.
Selector = labelselectors.Selector


class SecretKeyRefBody(TypedDict):
    name: str
    key: str


class WorkloadIdentityBody(TypedDict, total=False):
    """Empty: the pods use their own ServiceAccounts' identities, the operator the one of
    ``spec.serviceAccountName`` (or its own, where an admin lends it)."""


class CredentialsBody(TypedDict, total=False):
    connectionStringSecretRef: SecretKeyRefBody
    workloadIdentity: WorkloadIdentityBody


class EventHubBody(TypedDict, total=False):
    fullyQualifiedNamespace: str
    name: str
    consumerGroup: str
    credentials: CredentialsBody


class CheckpointStoreBody(TypedDict, total=False):
    containerName: str
    accountUrl: str
    credentials: CredentialsBody


class BalancingBody(TypedDict, total=False):
    intervalSeconds: int
    podGraceSeconds: int
    handoffTimeoutSeconds: int
    maxMovesPerCycle: int
    weighting: str
    lagTolerance: float


class SpecBody(TypedDict, total=False):
    eventHub: EventHubBody
    checkpointStore: CheckpointStoreBody
    selector: labelselectors.SelectorBody
    startPosition: startpositions.StartPositionBody
    balancing: BalancingBody
    processing: failurepolicy.ProcessingBody
    serviceAccountName: str


class MetadataBody(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    deletionTimestamp: str


class ConsumerBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: MetadataBody
    spec: SpecBody
    status: statusbodies.StatusBody


# The CRD's defaults, repeated here for specs that bypassed admission (tests, old API servers).
DEFAULT_CONSUMER_GROUP = "$Default"
DEFAULT_INTERVAL_SECONDS = 5
#: The longest cycle period the CRD admits (``spec.balancing.intervalSeconds``).
MAX_INTERVAL_SECONDS = 3600
DEFAULT_POD_GRACE_SECONDS = 20
DEFAULT_HANDOFF_TIMEOUT_SECONDS = 30


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecretKeyRef:
    """A key of a Secret in the consumer's namespace; the value itself never leaves the adapter."""

    name: str
    key: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Credentials:
    """Exactly one of a connection string in a Secret, or workload identity."""

    secret_ref: SecretKeyRef | None = None
    workload_identity: bool = False
    #: always empty: a CR may not choose an identity (kept for the ports' signature)
    client_id: str = ""

    def describe(self) -> dict[str, Any]:
        """The reference, never a secret value: safe for ConfigMaps, status and logs."""
        if self.secret_ref is not None:
            return {
                "connectionStringSecretRef": {
                    "name": self.secret_ref.name,
                    "key": self.secret_ref.key,
                }
            }
        return {"workloadIdentity": {}}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Balancing:
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS
    pod_grace_seconds: int = DEFAULT_POD_GRACE_SECONDS
    handoff_timeout_seconds: int = DEFAULT_HANDOFF_TIMEOUT_SECONDS
    max_moves_per_cycle: int = 0
    weighting: models.Weighting = "count"
    lag_tolerance: float = models.DEFAULT_LAG_TOLERANCE

    def to_options(self) -> models.Options:
        return models.Options(
            pod_grace_seconds=float(self.pod_grace_seconds),
            handoff_timeout_seconds=float(self.handoff_timeout_seconds),
            max_moves_per_cycle=self.max_moves_per_cycle,
            weighting=self.weighting,
            lag_tolerance=self.lag_tolerance,
            lag_settle_seconds=models.LAG_SETTLE_SECONDS,
            lag_floor=models.LAG_FLOOR,
            lag_floor_seconds=models.LAG_FLOOR_SECONDS,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConsumerSpec:
    """One EventHubConsumer's spec, validated, with every default filled in."""

    fully_qualified_namespace: str
    event_hub_name: str
    consumer_group: str
    event_hub_credentials: Credentials
    checkpoint_container: str
    checkpoint_account_url: str  # empty with a connection string
    checkpoint_credentials: Credentials
    selector: labelselectors.Selector
    start_position: startpositions.StartPosition
    balancing: Balancing
    processing: failurepolicy.Processing = dataclasses.field(
        default_factory=failurepolicy.Processing
    )
    #: spec.paused: every partition is released by ordered hand-off and none is assigned,
    #: while the pods stay up (a checkpoint reset needs a consumer that holds nothing)
    paused: bool = False
    #: spec.serviceAccountName: the ServiceAccount of the CR's namespace whose workload
    #: identity the operator uses for ``workloadIdentity`` credentials; empty: its own
    service_account_name: str = ""


def parse_spec(spec: Mapping[str, Any]) -> ConsumerSpec:
    """Validate a CR's ``spec`` and fill in the defaults; raise InvalidInput naming the field."""
    if not isinstance(spec, Mapping):
        raise errors.InvalidInput("spec", "must be an object")
    hub = _mapping(spec, "eventHub", "spec.eventHub", required=True)
    store = _mapping(spec, "checkpointStore", "spec.checkpointStore", required=True)
    fqns = specvalues.fully_qualified_namespace(
        _string(hub, "fullyQualifiedNamespace", "spec.eventHub.fullyQualifiedNamespace"),
        "spec.eventHub.fullyQualifiedNamespace",
    )
    name = specvalues.event_hub_name(
        _string(hub, "name", "spec.eventHub.name"), "spec.eventHub.name"
    )
    group = specvalues.consumer_group(
        _string(
            hub, "consumerGroup", "spec.eventHub.consumerGroup", default=DEFAULT_CONSUMER_GROUP
        ),
        "spec.eventHub.consumerGroup",
    )
    hub_creds = _credentials(hub.get("credentials"), "spec.eventHub.credentials")
    container = specvalues.container_name(
        _string(store, "containerName", "spec.checkpointStore.containerName"),
        "spec.checkpointStore.containerName",
    )
    account_url = _string(store, "accountUrl", "spec.checkpointStore.accountUrl", default="")
    if account_url:
        specvalues.account_url(account_url, "spec.checkpointStore.accountUrl")
    store_creds = _credentials(store.get("credentials"), "spec.checkpointStore.credentials")
    if store_creds.workload_identity and not account_url:
        raise errors.InvalidInput(
            "spec.checkpointStore.accountUrl",
            "is required with workloadIdentity: set the storage account's blob endpoint, "
            "e.g. https://<account>.blob.core.windows.net",
        )
    if store_creds.secret_ref is not None:
        account_url = ""  # ignored with a connection string, says the CRD
    return ConsumerSpec(
        fully_qualified_namespace=fqns,
        event_hub_name=name,
        consumer_group=group,
        event_hub_credentials=hub_creds,
        checkpoint_container=container,
        checkpoint_account_url=account_url,
        checkpoint_credentials=store_creds,
        selector=labelselectors.parse_selector(spec.get("selector"), field="spec.selector"),
        start_position=startpositions.parse_start_position(
            spec.get("startPosition"), field="spec.startPosition"
        ),
        balancing=_balancing(spec.get("balancing")),
        processing=failurepolicy.parse(spec.get("processing")),
        paused=_paused(spec.get("paused", False)),
        service_account_name=_service_account_name(spec.get("serviceAccountName")),
    )


def _service_account_name(raw: object) -> str:
    if raw is None:
        return ""
    return specvalues.object_name(
        raw, "spec.serviceAccountName", "ServiceAccount", "in this namespace"
    )


def _paused(raw: object) -> bool:
    # A string such as "true" or "false" is refused rather than guessed: "false" is truthy.
    if not isinstance(raw, bool):
        raise errors.InvalidInput(
            "spec.paused", f"{raw!r} is not a boolean: use true or false (without quotes)"
        )
    return raw


def _mapping(
    parent: Mapping[str, Any], key: str, field: str, *, required: bool
) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise errors.InvalidInput(field, "is required and must be an object")
    return value


def _string(parent: Mapping[str, Any], key: str, field: str, *, default: str | None = None) -> str:
    value = parent.get(key, default)
    if value is None:
        raise errors.InvalidInput(field, "is required")
    if not isinstance(value, str) or (default is None and not value):
        raise errors.InvalidInput(field, "must be a non-empty string")
    return value


def _credentials(value: Any, field: str) -> Credentials:
    if not isinstance(value, Mapping):
        raise errors.InvalidInput(
            field, "is required: set connectionStringSecretRef {name, key} or workloadIdentity {}"
        )
    kinds = [k for k in ("connectionStringSecretRef", "workloadIdentity") if k in value]
    if len(kinds) != 1 or len(value) != 1:
        raise errors.InvalidInput(
            field, "set exactly one of connectionStringSecretRef or workloadIdentity"
        )
    if kinds[0] == "connectionStringSecretRef":
        ref = _mapping(
            value, "connectionStringSecretRef", f"{field}.connectionStringSecretRef", required=True
        )
        name, key = (
            f"{field}.connectionStringSecretRef.name",
            f"{field}.connectionStringSecretRef.key",
        )
        return Credentials(
            secret_ref=SecretKeyRef(
                name=specvalues.object_name(
                    _string(ref, "name", name), name, "Secret", "in this namespace"
                ),
                key=specvalues.secret_key(_string(ref, "key", key), key),
            )
        )
    identity = value.get("workloadIdentity") or {}
    if not isinstance(identity, Mapping):
        raise errors.InvalidInput(f"{field}.workloadIdentity", "must be an object")
    if identity:
        # A resource's author must not choose which identity the operator uses.
        raise errors.InvalidInput(
            f"{field}.workloadIdentity.{next(iter(identity))}",
            "is not supported: remove it; the operator authenticates with its own "
            "ServiceAccount's identity and each pod with its ServiceAccount's",
        )
    return Credentials(workload_identity=True)


def _balancing(value: Any) -> Balancing:
    field = "spec.balancing"
    if value is None:
        return Balancing()
    if not isinstance(value, Mapping):
        raise errors.InvalidInput(field, "must be an object")

    def integer(key: str, default: int, low: int, high: int | None) -> int:
        raw = value.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise errors.InvalidInput(f"{field}.{key}", "must be an integer")
        if raw < low or (high is not None and raw > high):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            raise errors.InvalidInput(f"{field}.{key}", f"{raw} is out of range: use {bound}")
        return raw

    weighting = value.get("weighting", "count")
    if weighting not in models.WEIGHTINGS:
        raise errors.InvalidInput(f"{field}.weighting", f"{weighting!r}: use count or lag")
    tolerance = value.get("lagTolerance", models.DEFAULT_LAG_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        raise errors.InvalidInput(f"{field}.lagTolerance", "must be a number")
    if not 0 <= tolerance <= 10:
        raise errors.InvalidInput(
            f"{field}.lagTolerance", f"{tolerance} is out of range: use between 0 and 10"
        )
    return Balancing(
        interval_seconds=integer(
            "intervalSeconds", DEFAULT_INTERVAL_SECONDS, 1, MAX_INTERVAL_SECONDS
        ),
        pod_grace_seconds=integer("podGraceSeconds", DEFAULT_POD_GRACE_SECONDS, 0, 86400),
        handoff_timeout_seconds=integer(
            "handoffTimeoutSeconds", DEFAULT_HANDOFF_TIMEOUT_SECONDS, 0, 3600
        ),
        max_moves_per_cycle=integer("maxMovesPerCycle", 0, 0, None),
        weighting=cast(models.Weighting, weighting),
        lag_tolerance=float(tolerance),
    )
