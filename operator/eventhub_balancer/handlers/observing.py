"""The reading half of a cycle: the partition list, the pods and ConfigMaps, the checkpoints.

Kept apart from `cycles` so that the orchestration reads as a list of steps, and from
`writing` because reads may fail soft (a fault becomes a condition and a backoff in `Memory`)
where writes may not.

Faults never shrink the assignment: when Event Hubs cannot be asked, the cycle plans over the
last known partition list (the cache, else the partitions in status.epochs), so pod failures
are still handled, and Event Hubs is retried with exponential backoff.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping

from eventhub_balancer import errors
from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import conditions, configmaps, podstates, specs
from eventhub_balancer.handlers import assignments, memories, ports

logger = logging.getLogger(__name__)

#: The longest backoff between attempts to reach Event Hubs or the checkpoint store.
MAX_BACKOFF_SECONDS = 300.0
#: How often the checkpoint store is probed when nothing needs its epochs (for the condition).
CHECKPOINT_PROBE_SECONDS = 60.0

#: Failures of the Kubernetes API itself (not of what a spec points at): no condition can
#: describe them, since the status cannot be written either; the whole cycle is retried.
KUBE_API_ERRORS = (errors.Conflict, errors.ApiUnavailable)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cluster:
    """The consumer's pods and assignment ConfigMaps as the Kubernetes API lists them."""

    pods: dict[str, podstates.PodState]
    pod_annotations: Mapping[str, Mapping[str, str]]
    maps: list[assignments.StoredMap]


def _reason(error: errors.EventHubBalancerError, *, misconfigured: str, unreachable: str) -> str:
    """The error's own reason, or for the generic classes one that names the dependency."""
    if error.reason == errors.ConfigurationError.reason:
        return misconfigured
    if error.reason == errors.TransientError.reason:
        return unreachable
    return error.reason


def _backoff(previous: float, base: float) -> float:
    return min(MAX_BACKOFF_SECONDS, max(base, previous * 2))


async def _secret(kube: ports.KubePort, namespace: str, creds: specs.Credentials) -> str | None:
    if creds.secret_ref is None:
        return None
    return await kube.read_secret_key(
        namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
    )


async def read_cluster(
    *, kube: ports.KubePort, namespace: str, name: str, spec: specs.ConsumerSpec
) -> Cluster:
    """The pods that spec.selector matches and the ConfigMaps labelled for this consumer."""
    pod_bodies, map_bodies = await asyncio.gather(
        kube.list_pods(namespace=namespace, label_selector=spec.selector.to_query()),
        kube.list_configmaps(
            namespace=namespace, label_selector=configmaps.consumer_selector(name)
        ),
    )
    pod_bodies = [
        p
        for p in pod_bodies
        if spec.selector.matches((p.get("metadata") or {}).get("labels") or {})
    ]
    pods = {s.name: s for s in (podstates.pod_state(p) for p in pod_bodies) if s.name}
    pod_annotations = {
        str((p.get("metadata") or {}).get("name")): (p.get("metadata") or {}).get("annotations")
        or {}
        for p in pod_bodies
    }
    maps = [
        m
        for m in (assignments.stored_map(b) for b in map_bodies)
        if m.parsed.consumer in (name, "")  # "" : corrupt, still ours by its label
    ]
    return Cluster(pods=pods, pod_annotations=pod_annotations, maps=maps)


async def read_partitions(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    spec: specs.ConsumerSpec,
    memory: memories.Memory,
    previous: specs.StatusBody,
    wall: float,
) -> tuple[conditions.Condition, tuple[models.PartitionId, ...] | None]:
    """The EventHubReachable verdict and the partition ids (the last known ones on a fault)."""
    key = f"{namespace}/{name}"
    cached = hubs.cached(key)
    where = f"Event Hub {spec.event_hub_name!r} in {spec.fully_qualified_namespace}"
    if wall < memory.hub_retry_at and memory.hub_fault is not None:
        # Backing off: reuse the last verdict and the last list.
        return memory.hub_fault, _ids(cached)
    try:
        connection_string = await _secret(kube, namespace, spec.event_hub_credentials)
        ids, _fresh = await hubs.partitions(
            consumer=key,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            now=wall,
        )
    except KUBE_API_ERRORS:
        raise  # the Kubernetes API itself failed: the whole cycle retries
    except (errors.ConfigurationError, errors.TransientError) as e:
        reason = _reason(
            e, misconfigured="EventHubMisconfigured", unreachable="EventHubUnreachable"
        )
        memory.hub_backoff = _backoff(memory.hub_backoff, float(spec.balancing.interval_seconds))
        memory.hub_retry_at = wall + memory.hub_backoff
        fallback = "the last known partition list" if cached else "the partitions already assigned"
        # No retry delay in the message: it changes every attempt, the status must not.
        message = f"{e} (keeping the current assignment over {fallback}; retrying with backoff)"
        memory.hub_fault = conditions.Condition(
            type=conditions.EVENTHUB_REACHABLE, status="False", reason=reason, message=message
        )
        logger.warning("%s: %s", key, message)
        return memory.hub_fault, _ids(cached)
    memory.hub_fault = None
    memory.hub_backoff = 0.0
    memory.hub_retry_at = 0.0
    return (
        conditions.Condition(
            type=conditions.EVENTHUB_REACHABLE,
            status="True",
            reason="PartitionsListed",
            message=f"{where} has {len(ids)} partitions",
        ),
        tuple(models.PartitionId(i) for i in ids),
    )


def _ids(cached: tuple[str, ...] | None) -> tuple[models.PartitionId, ...] | None:
    return tuple(models.PartitionId(i) for i in cached) if cached else None


async def read_checkpoints(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    spec: specs.ConsumerSpec,
    memory: memories.Memory,
    wall: float,
    needed: bool,
) -> conditions.Condition:
    """The CheckpointStoreReachable verdict; refreshes the stored epochs and sequences."""
    due = wall - memory.store_checked_at >= CHECKPOINT_PROBE_SECONDS
    if (not needed and not due) or wall < memory.store_retry_at:
        if memory.store_condition is not None:
            return memory.store_condition
        if wall < memory.store_retry_at:
            return conditions.Condition(
                type=conditions.CHECKPOINT_STORE_REACHABLE,
                status="Unknown",
                reason="NotChecked",
                message="the checkpoint store has not been read yet",
            )
    container = spec.checkpoint_container
    try:
        connection_string = await _secret(kube, namespace, spec.checkpoint_credentials)
        stored = await hubs.checkpoints(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            container_name=container,
            connection_string=connection_string,
            account_url=spec.checkpoint_account_url or None,
        )
    except KUBE_API_ERRORS:
        raise
    except (errors.ConfigurationError, errors.TransientError) as e:
        memory.store_backoff = _backoff(
            memory.store_backoff, float(spec.balancing.interval_seconds)
        )
        memory.store_retry_at = wall + memory.store_backoff
        reason = _reason(
            e,
            misconfigured="CheckpointStoreMisconfigured",
            unreachable="CheckpointStoreUnreachable",
        )
        memory.store_condition = conditions.Condition(
            type=conditions.CHECKPOINT_STORE_REACHABLE,
            status="False",
            reason=reason,
            message=f"{e} (retrying with backoff)",
        )
        return memory.store_condition
    memory.store_backoff = 0.0
    memory.store_retry_at = 0.0
    memory.store_checked_at = wall
    memory.stored_epochs = {p: epoch for p, (epoch, _seq) in stored.items()}
    memory.stored_sequences = {p: seq for p, (_epoch, seq) in stored.items()}
    memory.store_condition = conditions.Condition(
        type=conditions.CHECKPOINT_STORE_REACHABLE,
        status="True",
        reason="CheckpointsListed",
        message=f"container {container!r} is readable",
    )
    return memory.store_condition


async def read_lag(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    spec: specs.ConsumerSpec,
    memory: memories.Memory,
    partitions: tuple[models.PartitionId, ...],
    namespace: str,
) -> dict[models.PartitionId, int]:
    """Events not yet checkpointed per partition, for weighting "lag"; empty otherwise."""
    if spec.balancing.weighting != "lag" or memory.hub_fault is not None:
        return {}
    try:
        connection_string = await _secret(kube, namespace, spec.event_hub_credentials)
        last = await hubs.last_sequence_numbers(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            partitions=list(partitions),
        )
    except (errors.ConfigurationError, errors.TransientError) as e:
        logger.warning("lag unavailable, weighting by count this cycle: %s", e)
        return {}
    return {
        models.PartitionId(p): max(0, seq - memory.stored_sequences.get(p, -1))
        for p, seq in last.items()
    }
