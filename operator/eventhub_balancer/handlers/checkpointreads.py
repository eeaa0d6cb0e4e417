"""The checkpoint store's half of a cycle's reads: the blobs' epochs and sequence numbers
when a decision needs them (or the store's probe is due), listed ahead by a cycle that starts
hand-offs for the one that completes them (`read_ahead`), and the hub's last sequence numbers
for weighting by lag. A fault of the store becomes part of the observation, paced by the
backoff kept in `memories.Memory`; a failure of the Kubernetes API itself is raised."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence

from eventhub_balancer.contracts import connectionstrings, specs
from eventhub_balancer.handlers import backlogs, dependencies, memories, ports
from eventhub_balancer.reconciling import deciding, observations, retries

logger = logging.getLogger(__name__)

#: How old a listing of the blobs made ahead (`read_ahead`) may be and still stand for the
#: listing a cycle that gives partitions out makes: a release comes within this in practice.
AHEAD_SECONDS = 10.0


async def read_checkpoints(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    decision: deciding.Decision,
    memory: memories.Memory,
    wall: float,
    backlog: backlogs.Budget | None = None,
) -> observations.Observation | None:
    """``observation`` with the checkpoint blobs (and the last sequence numbers when the
    decision weighs by lag, or beside the store's probe while ``backlog`` allows), for a
    second decision; None when the store was not asked."""
    # The backlog behind ehb_recommended_replicas is read beside the store's probe, but never
    # by a cycle that gives partitions out (it would wait on a call per partition) and not on
    # the first probe (every consumer's first cycle, all at once after an operator start).
    backlog_probe = (
        memory.store_checked_at is not None
        and retries.probe_due(memory.store_checked_at, wall=wall)
        and not decision.needs_checkpoints
    )
    store = await read_store(
        kube=kube,
        hubs=hubs,
        observation=observation,
        memory=memory,
        wall=wall,
        needed=decision.needs_checkpoints,
    )
    known = store or observation.store
    last = None
    # Weighting "lag" needs the hub's end every time it plans; otherwise it is read beside the
    # store's probe (once a minute, not whenever a move needs the blobs: that is one call per
    # partition), so that the backlog behind ehb_recommended_replicas is known whatever the
    # weighting.
    backlog_due = (
        backlog_probe
        and store is not None
        and store.listed
        and observation.hub.fault is None
        and (backlog is None or backlog.take(len(decision.partitions)))
    )
    if (decision.needs_last_sequences or backlog_due) and (
        known.checkpoints is not None or known.known_sequences is not None
    ):
        last = await read_last_sequences(
            kube=kube, hubs=hubs, observation=observation, partitions=decision.partitions
        )
    if store is None and last is None:
        return None
    return dataclasses.replace(observation, store=known, last_sequences=last)


async def read_store(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    memory: memories.Memory,
    wall: float,
    needed: bool,
) -> observations.StoreRead | None:
    """The checkpoint blobs when a decision ``needed`` them or the probe is due; None when
    not asked (not needed, or backing off from a failure)."""
    spec = observation.spec
    assert spec is not None, "only a valid spec names a checkpoint store"
    ahead = memory.store_ahead
    if needed and ahead is not None:
        # Taken once, by the first read that needs the blobs; a read that does not (a cycle
        # woken by another pod's event meanwhile) leaves it for the one that will.
        memory.store_ahead = None
        if ahead.key == store_key(spec) and stands(ahead, wall=wall):
            return observations.StoreRead(
                checkpoints=ahead.checkpoints, listed=True, known_sequences=memory.store_sequences
            )
    due = retries.probe_due(memory.store_checked_at, wall=wall)
    # What a configuration error is found under: a change of it ends the wait at once.
    settings = (
        spec.checkpoint_account_url,
        spec.checkpoint_credentials,
        spec.service_account_name,
    )
    if memory.store.waiting(wall, settings=settings) or not (needed or due):
        return None
    malformed = None
    try:
        connection_string = await dependencies.secret_value(
            kube, observation.namespace, spec.checkpoint_credentials
        )
        malformed = dependencies.malformed(
            observation.namespace,
            spec.checkpoint_credentials,
            connection_string,
            connectionstrings.blob_problem,
        )
        if malformed is not None:
            raise malformed
        stored = await hubs.checkpoints(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            consumer_group=spec.consumer_group,
            container_name=spec.checkpoint_container,
            connection_string=connection_string,
            account_url=spec.checkpoint_account_url or None,
            namespace=observation.namespace,
            service_account=spec.service_account_name or None,
        )
    except dependencies.KUBE_API_ERRORS:
        raise
    except dependencies.DEPENDENCY_ERRORS as e:
        dependencies.forget(kube, observation.namespace, spec.checkpoint_credentials, e)
        memory.store = dependencies.paced(
            memory.store,
            e,
            misconfigured=e is malformed,
            settings=settings,
            spec=spec,
            wall=wall,
        )
        memory.store_fault = dependencies.shown(
            e, observation.namespace, spec.checkpoint_credentials
        )
        return observations.StoreRead(
            fault=memory.store_fault, listed=False, known_sequences=memory.store_sequences
        )
    memory.store, memory.store_fault, memory.store_checked_at = retries.Backoff(), None, wall
    memory.store_sequences = {p: sequence for p, (_epoch, sequence) in stored.items()}
    return observations.StoreRead(
        checkpoints=stored, listed=True, known_sequences=memory.store_sequences
    )


def store_key(spec: specs.ConsumerSpec) -> Hashable:
    """What names a consumer's checkpoint blobs and the credentials they are read with: a
    listing made ahead stands only for the very same store."""
    return (
        spec.fully_qualified_namespace,
        spec.event_hub_name,
        spec.consumer_group,
        spec.checkpoint_container,
        spec.checkpoint_account_url,
        spec.checkpoint_credentials,
        spec.service_account_name,
    )


def stands(ahead: memories.StoreAhead | None, *, wall: float) -> bool:
    """Whether a listing made ahead stands for a read at ``wall`` (`AHEAD_SECONDS`)."""
    return ahead is not None and 0 <= wall - ahead.at <= AHEAD_SECONDS


async def read_ahead(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    memory: memories.Memory,
    wall: float,
) -> None:
    """List the blobs after a cycle that started hand-offs, for the cycle that completes them.

    That cycle, woken by the old owners' releases, gives the partitions out and needs the
    blobs' epochs as floors: listed here, while the pods write their final checkpoints, they
    are not listed again on its way (`read_store` takes them, once, within `AHEAD_SECONDS`).
    A floor read a moment early is as good as one read then: between the two only the owners
    this operator recorded write the blobs, at epochs its record holds, which are floors too.
    Anyone else's higher epoch would make the next owner's fence fail (the blob's conditional
    write), and its report of a lost partition get it a higher epoch: a retry, never two
    owners. A failed listing is paced and shown as any other; the cycle never fails for it."""
    if observation.spec is None:
        return
    # A listing of its own: one made ahead before must not pass for this one's, younger.
    memory.store_ahead = None
    try:
        stored = await read_store(
            kube=kube,
            hubs=hubs,
            observation=observation,
            memory=memory,
            wall=wall,
            needed=True,
        )
    except dependencies.KUBE_API_ERRORS as e:
        logger.debug("the checkpoint blobs were not listed ahead: %s", e)
        return
    if stored is not None and stored.checkpoints is not None:
        memory.store_ahead = memories.StoreAhead(
            key=store_key(observation.spec), at=wall, checkpoints=stored.checkpoints
        )


async def read_last_sequences(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    partitions: Sequence[str],
) -> Mapping[str, int] | None:
    """The last enqueued sequence number per partition (weighting "lag"); None on a fault,
    which only costs this cycle its lag weighting."""
    spec = observation.spec
    assert spec is not None, "only a valid spec names an Event Hub"
    try:
        connection_string = await dependencies.secret_value(
            kube, observation.namespace, spec.event_hub_credentials
        )
        return await hubs.last_sequence_numbers(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            partitions=list(partitions),
            namespace=observation.namespace,
            service_account=spec.service_account_name or None,
        )
    except dependencies.DEPENDENCY_ERRORS as e:
        dependencies.forget(kube, observation.namespace, spec.event_hub_credentials, e)
        logger.warning("lag unavailable, weighting by count this cycle: %s", e)
        return None
