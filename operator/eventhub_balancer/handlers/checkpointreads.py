"""The checkpoint store's half of a cycle's reads: the blobs' epochs and sequence numbers
when a decision needs them (or the store's probe is due), listed ahead by a cycle that starts
hand-offs for the one that completes them (`read_ahead`), and the hub's last sequence numbers
for weighting by lag. The probe also lists the SDK's ownership blobs, to tell a processor left
running on the consumer group (`foreignclaims`, entered once a claim was found). A fault of
the store becomes part of the observation, paced by the backoff kept in the consumer's
`memories.Memory`: the readers here return the store's pacing after their read
(`memories.StorePacing`), and the cycle keeps it. A failure of the Kubernetes API itself is
raised."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import connectionstrings, startpositions, storeaddresses
from eventhub_balancer.handlers import (
    backlogs,
    dependencylines,
    foreignclaims,
    memories,
    observing,
    ports,
)
from eventhub_balancer.reconciling import (
    coordinates,
    deadlines,
    decisions,
    lostblobs,
    observations,
)

logger = logging.getLogger(__name__)


async def read_checkpoints(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    decision: decisions.Decision,
    store: memories.StorePacing,
    wall: float,
    lines: dependencylines.DependencyLines,
    backlog: backlogs.Budget | None = None,
) -> tuple[observations.Observation | None, memories.StorePacing]:
    """``observation`` with the checkpoint blobs (and the last sequence numbers when the
    decision weighs by lag, or beside the store's probe while ``backlog`` allows), for a
    second decision, None when the store was not asked; and the store's pacing after."""
    # The backlog behind ehb_recommended_replicas is read beside the store's probe, but never
    # by a cycle that gives partitions out (it would wait on a call per partition) and not on
    # the first probe (every consumer's first cycle, all at once after an operator start).
    backlog_probe = (
        store.checked_at is not None
        and deadlines.probe_due(store.checked_at, wall=wall)
        and not decision.needs_checkpoints
    )
    read, store = await read_store(
        kube=kube,
        hubs=hubs,
        observation=observation,
        store=store,
        wall=wall,
        needed=decision.needs_checkpoints,
        lines=lines,
        failing=sum(decision.figures.troubled.values()) if decision.figures else None,
    )
    if read is not None:
        # A listing made ahead that this read left (it did not need it) still stands.
        ahead_at = observation.store.ahead_at if store.ahead is not None else None
        read = dataclasses.replace(read, ahead_at=ahead_at)
    known = read or observation.store
    last = None
    # Weighting "lag" needs the hub's end every time it plans; otherwise it is read beside the
    # store's probe (once a minute, not whenever a move needs the blobs: that is one call per
    # partition), so that the backlog behind ehb_recommended_replicas is known whatever the
    # weighting.
    backlog_due = (
        backlog_probe
        and read is not None
        and read.listed
        and observation.hub.fault is None
        and (
            backlog is None or backlog.take(len(decision.partitions), tenant=observation.namespace)
        )
    )
    if (decision.needs_last_sequences or backlog_due) and (
        known.checkpoints is not None or known.known_sequences is not None
    ):
        last, store = await read_last_sequences(
            kube=kube,
            hubs=hubs,
            observation=observation,
            partitions=decision.partitions,
            store=store,
        )
    if read is None and last is None:
        return None, store
    rates: Mapping[models.PartitionId, float] = {}
    if last is not None:
        # Each partition's own traffic, from the ends of an earlier read: the seconds of it a
        # pod that keeps up has in flight are no lag to weigh (`models.LAG_FLOOR_SECONDS`).
        spec = observation.spec
        assert spec is not None, "only a valid spec names an Event Hub"
        hub = (spec.fully_qualified_namespace, spec.event_hub_name)
        rates = store.traffic.rates(last, key=hub, wall=wall)
        store = dataclasses.replace(store, traffic=store.traffic.after(last, key=hub, wall=wall))
    return dataclasses.replace(observation, store=known, last_sequences=last, rates=rates), store


async def read_store(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    store: memories.StorePacing,
    wall: float,
    needed: bool,
    lines: dependencylines.DependencyLines,
    failing: int | None = None,
) -> tuple[observations.StoreRead | None, memories.StorePacing]:
    """The checkpoint blobs when a decision ``needed`` them or the probe is due, None when
    not asked (not needed, or backing off from a failure); and the store's pacing after. Its
    fault is said through ``lines``, the operator's. ``failing``: how many partitions the
    pods report in trouble (`statuses.Figures.troubled`); None: not known."""
    spec = observation.spec
    assert spec is not None, "only a valid spec names a checkpoint store"
    # What a failure is found under (the account, the credentials, the container and the
    # blobs' names): a change of it ends the wait at once.
    settings = observing.store_key(spec)
    ahead = store.ahead
    if needed and ahead is not None:
        # Taken once, by the first read that needs the blobs; a read that does not (a cycle
        # woken by another pod's event meanwhile) leaves it for the one that will.
        store = dataclasses.replace(store, ahead=None)
        if ahead.key == settings and deadlines.ahead_stands(ahead.at, wall=wall):
            read = observations.StoreRead(
                checkpoints=ahead.checkpoints,
                listed=True,
                known_sequences=known_sequences(store, settings),
                checked_at=store.checked_at,
                foreign=store.claims.live,
                gone=store.vanished.gone,
            )
            return read, store
    # A store the spec names now that is not the one last read (its container, account or
    # credentials edited) is read at once, not at the old one's next probe: meanwhile its
    # condition said of a container that does not exist that it was readable.
    due = deadlines.probe_due(store.checked_at, wall=wall) or (
        store.checked_at is not None and store.sequences_key != settings
    )
    # Fewer partitions reported in trouble than when the store last failed: some were fenced
    # or checkpointed again, so the store answers the pods. It is asked now, not at the end of a
    # backoff of minutes while its condition said it was unreachable.
    recovered = failing is not None and failing < store.failing
    if (store.backoff.waiting(wall, settings=settings) and not recovered) or not (needed or due):
        return None, store
    key = observing.hub_key(observation.namespace, observation.name)
    malformed = None
    try:
        connection_string = await observing.secret_value(
            kube, observation.namespace, spec.checkpoint_credentials
        )
        malformed = observing.malformed(
            observation.namespace,
            spec.checkpoint_credentials,
            connection_string,
            connectionstrings.blob_problem,
        )
        if malformed is not None:
            raise malformed
        address = storeaddresses.StoreAddress.of_spec(
            spec,
            connection_string=connection_string,
            consumer_namespace=observation.namespace,
            consumer=key,
        )
        stored = await hubs.checkpoints(address)
        # The probe's one more request: the SDK's ownership blobs (`foreignclaims`).
        claims = await hubs.ownership_claims(address) if due else None
    except observing.KUBE_API_ERRORS:
        raise
    except observing.DEPENDENCY_ERRORS as e:
        observing.forget(kube, observation.namespace, spec.checkpoint_credentials, e)
        failed = dataclasses.replace(
            store,
            backoff=observing.paced(
                store.backoff,
                e,
                misconfigured=e is malformed,
                settings=settings,
                spec=spec,
                wall=wall,
            ),
            fault=observing.shown(e, observation.namespace, spec.checkpoint_credentials),
            # Those of a store the spec no longer names: weighting "lag" plans by count.
            sequences=known_sequences(store, settings),
            failing=store.failing if failing is None else failing,
        )
        store = observing.told(key, "checkpoint store", store, failed, wall=wall, lines=lines)
        assert store.fault is not None
        read = observations.StoreRead(
            fault=store.fault,
            listed=False,
            known_sequences=known_sequences(store, settings),
            checked_at=store.checked_at,
            foreign=store.claims.live,
            gone=store.vanished.gone,
        )
        return read, store
    if store.fault is not None:
        msg = "%s: the checkpoint store answers again (it failed with %s; %s)"
        args = (key, store.fault.reason, observing.lasted(store, wall=wall))
        lines.answered(key, "the checkpoint store", msg, *args, now=wall)
    store = dataclasses.replace(
        store,
        backoff=deadlines.Backoff(),
        fault=None,
        failing=0,
        checked_at=wall,
        sequences={p: sequence for p, (_epoch, sequence) in stored.items()},
        sequences_key=settings,
        vanished=store.vanished.after(
            stored,
            key=settings,
            given=said_lost(observation) if store.vanished.key is None else (),
        ),
    )
    if claims or (claims is not None and store.claims.etags):
        store = foreignclaims.watched(store, claims, key=key, spec=spec, where=settings)
    read = observations.StoreRead(
        checkpoints=stored,
        listed=True,
        known_sequences=known_sequences(store, settings),
        checked_at=wall,
        foreign=store.claims.live,
        gone=store.vanished.gone,
    )
    return read, store


def known_sequences(store: memories.StorePacing, key: Hashable) -> Mapping[str, int] | None:
    """The store's last checkpoint sequence numbers when they were read from the store
    ``key``: those of a store the spec no longer names (another hub, group or container) are
    no backlog of this one."""
    return store.sequences if store.sequences_key == key else None


def said_lost(observation: observations.Observation) -> frozenset[str]:
    """The partitions whose blobs the status says are lost (`lostblobs.said`), for a restarted
    operator's first listing: none when some ConfigMap names other coordinates than the spec
    (edited while the operator was away), since what the status said was of those."""
    assert observation.spec is not None, "only a valid spec names a checkpoint store"
    wanted = coordinates.of_spec(observation.spec)
    for body in observation.configmaps:
        old = coordinates.of_map(observations.stored_map(body))
        if old is not None and coordinates.differences(old, wanted):
            return frozenset()
    return lostblobs.said(observation.status)


async def read_ahead(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    store: memories.StorePacing,
    wall: float,
    lines: dependencylines.DependencyLines,
) -> memories.StorePacing:
    """List the blobs after a cycle that started hand-offs, for the cycle that completes
    them (`deadlines.lists_ahead` says when); the store's pacing after, with the listing.

    That cycle, woken by the old owners' releases, gives the partitions out and needs the
    blobs' epochs as floors: listed here, while the pods write their final checkpoints, they
    are not listed again on its way (`read_store` takes them, once, within
    `deadlines.AHEAD_SECONDS`). A floor read a moment early is as good as one read then:
    between the two only the owners this operator recorded write the blobs, at epochs its
    record holds, which are floors too. Anyone else's higher epoch would make the next
    owner's fence fail (the blob's conditional write), and its report of a lost partition get
    it a higher epoch: a retry, never two owners. A failed listing is paced and shown as any
    other; the cycle never fails for it."""
    if observation.spec is None:
        return store
    # A listing of its own: one made ahead before must not pass for this one's, younger.
    store = dataclasses.replace(store, ahead=None)
    try:
        read, store = await read_store(
            kube=kube,
            hubs=hubs,
            observation=observation,
            store=store,
            wall=wall,
            needed=True,
            lines=lines,
        )
    except observing.KUBE_API_ERRORS as e:
        logger.debug("the checkpoint blobs were not listed ahead: %s", e)
        return store
    if read is None or read.checkpoints is None:
        return store
    ahead = memories.StoreAhead(
        key=observing.store_key(observation.spec), at=wall, checkpoints=read.checkpoints
    )
    return dataclasses.replace(store, ahead=ahead)


async def read_last_sequences(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    observation: observations.Observation,
    partitions: Sequence[str],
    store: memories.StorePacing,
) -> tuple[Mapping[str, startpositions.PartitionBounds] | None, memories.StorePacing]:
    """The last enqueued sequence number per partition, with where the events it holds
    begin (weighting "lag", the backlog); None on a fault,
    which only costs this cycle its lag weighting. With ``store`` as it records the fault: a
    fault is warned of when it starts or changes, and its end said once."""
    spec = observation.spec
    assert spec is not None, "only a valid spec names an Event Hub"
    key = observing.hub_key(observation.namespace, observation.name)
    try:
        connection_string = await observing.secret_value(
            kube, observation.namespace, spec.event_hub_credentials
        )
        last = await hubs.last_sequence_numbers(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            partitions=list(partitions),
            namespace=observation.namespace,
            service_account=spec.service_account_name or None,
        )
    except observing.DEPENDENCY_ERRORS as e:
        observing.forget(kube, observation.namespace, spec.event_hub_credentials, e)
        if str(e) != store.ends_fault:
            logger.warning(
                "%s: the hub's last sequence numbers cannot be read (%s): no lag to weigh "
                "partitions by (weighting: lag plans by count meanwhile) and no backlog "
                "for the recommended replicas, until they can",
                key,
                e,
            )
        return None, dataclasses.replace(store, ends_fault=str(e))
    if store.ends_fault is not None:
        logger.info("%s: the hub's last sequence numbers are read again", key)
        store = dataclasses.replace(store, ends_fault=None)
    return last, store
