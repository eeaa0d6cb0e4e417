"""The reading half of a cycle: the CR, the partition list, the pods, ConfigMaps, checkpoints.

Everything it reads goes into one `observations.Observation` for `reconciling.deciding`;
what the bodies mean is decided there. Reads may fail soft: a fault of Event Hubs or of the
checkpoint store becomes part of the observation (and of the status), and the next attempt
waits for the backoff kept in `memories.Memory`, the only thing these readers change. A
failure of the Kubernetes API itself is raised: the whole cycle is retried.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence

from eventhub_balancer import errors
from eventhub_balancer.contracts import connectionstrings, specs
from eventhub_balancer.handlers import backlogs, memories, ports
from eventhub_balancer.reconciling import deciding, observations, retries

logger = logging.getLogger(__name__)

#: Failures of the Kubernetes API itself (not of what a spec points at): no condition can
#: describe them, since the status cannot be written either; the whole cycle is retried.
KUBE_API_ERRORS = (errors.Conflict, errors.ApiUnavailable)
#: Failures of a dependency a spec points at: shown in a condition, retried with backoff.
DEPENDENCY_ERRORS = (errors.ConfigurationError, errors.TransientError)
#: How old a listing of the blobs made ahead (`read_ahead`) may be and still stand for the
#: listing a cycle that gives partitions out makes: a release comes within this in practice.
AHEAD_SECONDS = 10.0
#: Configuration errors that asking again cannot mend until the CR or its Secret changes: a
#: host the install does not allow (a malformed connection string is found before the
#: adapter is asked, by `_malformed`). Both wait `retries.after_misconfiguration`.
MISCONFIGURED = (errors.EndpointNotAllowed,)


async def observe(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    wall: float,
) -> observations.Observation:
    """The CR, the partition list and the cluster; the checkpoints come later (`read_store`)."""
    observation = await observe_consumer(
        kube=kube, hubs=hubs, namespace=namespace, name=name, memory=memory, wall=wall
    )
    if observation.spec is None:
        return observation
    return await observe_pods(kube=kube, observation=observation)


async def observe_consumer(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    wall: float,
) -> observations.Observation:
    """What costs the same whatever the fleet: the CR, the partition list, the store's state
    and the peers; no pods or ConfigMaps yet (`observe_pods`)."""
    body = await kube.get_consumer(namespace=namespace, name=name)
    try:
        spec = specs.parse_spec(body.get("spec") or {})
    except errors.InvalidInput as e:
        return observations.Observation(namespace=namespace, name=name, body=body, spec_error=e)
    hub = await read_partitions(
        kube=kube, hubs=hubs, namespace=namespace, name=name, spec=spec, memory=memory, wall=wall
    )
    return observations.Observation(
        namespace=namespace,
        name=name,
        body=body,
        spec=spec,
        hub=hub,
        store=observations.StoreRead(
            fault=memory.store_fault,
            listed=memory.store_checked_at is not None,
            known_sequences=memory.store_sequences,
        ),
        # The other consumers come from the watch (kopf's index); a port without one (a test
        # or a tool over the bare API) knows of none, and finds no conflict.
        peers=kube.peers(),
    )


async def observe_pods(
    *, kube: ports.KubePort, observation: observations.Observation
) -> observations.Observation:
    """``observation`` with the pods its selector matches and the consumer's ConfigMaps, as
    the port lists them now. Reading them costs the decision little: the cache behind the port
    hands out the same body objects until an event replaces them, and the decision's carry
    reads again only what is new (`fleets.advance`)."""
    assert observation.spec is not None, "only a valid spec selects pods"
    namespace, name, selector = observation.namespace, observation.name, observation.spec.selector
    pods, maps = await asyncio.gather(
        kube.select_pods(namespace=namespace, selector=selector),
        kube.consumer_configmaps(namespace=namespace, consumer=name),
    )
    return dataclasses.replace(observation, pods=tuple(pods), configmaps=tuple(maps))


async def _secret(kube: ports.KubePort, namespace: str, creds: specs.Credentials) -> str | None:
    if creds.secret_ref is None:
        return None
    return await kube.read_secret_key(
        namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
    )


def _malformed(
    namespace: str,
    creds: specs.Credentials,
    connection_string: str | None,
    problem_of: Callable[[str], str | None],
) -> errors.ConfigurationError | None:
    """The error to show for a connection string that can never work: which Secret, what is
    wrong and what to give (never the value); None when its shape is right."""
    problem = None if connection_string is None else problem_of(connection_string)
    if problem is None or creds.secret_ref is None:
        return None
    ref = creds.secret_ref
    return errors.ConfigurationError(f"Secret {namespace}/{ref.name}, key {ref.key!r}, {problem}")


def _shown(
    error: errors.EventHubBalancerError, namespace: str, creds: specs.Credentials
) -> observations.Fault:
    """The fault as the condition shows it: a refused host names the Secret it came from."""
    fault = observations.Fault.of(error)
    if isinstance(error, MISCONFIGURED) and creds.secret_ref is not None:
        ref = creds.secret_ref
        where = f"Secret {namespace}/{ref.name}, key {ref.key!r}"
        return dataclasses.replace(fault, message=f"{where}: {fault.message}")
    return fault


def _paced(
    backoff: retries.Backoff,
    error: Exception,
    *,
    misconfigured: bool,
    settings: Hashable,
    spec: specs.ConsumerSpec,
    wall: float,
) -> retries.Backoff:
    if misconfigured or isinstance(error, MISCONFIGURED):
        return retries.after_misconfiguration(wall=wall, settings=settings)
    return retries.after_failure(backoff, wall=wall, base=float(spec.balancing.interval_seconds))


def _forget(
    kube: ports.KubePort, namespace: str, creds: specs.Credentials, error: Exception
) -> None:
    """A dependency rejected what the Secret held (credentials, a wrong endpoint: anything
    but a transient fault): the next attempt reads it again, so a rotated or fixed key is used
    as soon as the backoff allows, without watching Secrets."""
    if creds.secret_ref is not None and isinstance(error, errors.ConfigurationError):
        kube.forget_secret(namespace=namespace, name=creds.secret_ref.name)


def hub_key(namespace: str, name: str) -> str:
    """What the Event Hubs side keeps a consumer's partition list under."""
    return f"{namespace}/{name}"


async def read_partitions(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    spec: specs.ConsumerSpec,
    memory: memories.Memory,
    wall: float,
) -> observations.HubRead:
    """The partition ids; on a fault (or while backing off from one) the last known ones."""
    key = hub_key(namespace, name)
    cached = hubs.cached(key)
    # What a configuration error is found under: a change of it ends the wait at once.
    settings = (
        spec.fully_qualified_namespace,
        spec.event_hub_credentials,
        spec.service_account_name,
    )
    if memory.hub_fault is not None and memory.hub.waiting(wall, settings=settings):
        return observations.HubRead(ids=cached or None, fault=memory.hub_fault)
    malformed = None
    try:
        connection_string = await _secret(kube, namespace, spec.event_hub_credentials)
        malformed = _malformed(
            namespace,
            spec.event_hub_credentials,
            connection_string,
            connectionstrings.eventhub_problem,
        )
        if malformed is not None:
            raise malformed
        ids, _fresh = await hubs.partitions(
            consumer=key,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            now=wall,
            namespace=namespace,
            service_account=spec.service_account_name or None,
        )
    except KUBE_API_ERRORS:
        raise
    except DEPENDENCY_ERRORS as e:
        _forget(kube, namespace, spec.event_hub_credentials, e)
        memory.hub = _paced(
            memory.hub,
            e,
            misconfigured=e is malformed,
            settings=settings,
            spec=spec,
            wall=wall,
        )
        memory.hub_fault = _shown(e, namespace, spec.event_hub_credentials)
        logger.warning(
            "%s: Event Hubs: %s (retrying in %.0f s)",
            key,
            memory.hub_fault.message,
            memory.hub.delay,
        )
        return observations.HubRead(ids=cached or None, fault=memory.hub_fault)
    memory.hub, memory.hub_fault = retries.Backoff(), None
    return observations.HubRead(ids=tuple(ids))


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
        if ahead.key == store_key(spec) and 0 <= wall - ahead.at <= AHEAD_SECONDS:
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
        connection_string = await _secret(kube, observation.namespace, spec.checkpoint_credentials)
        malformed = _malformed(
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
    except KUBE_API_ERRORS:
        raise
    except DEPENDENCY_ERRORS as e:
        _forget(kube, observation.namespace, spec.checkpoint_credentials, e)
        memory.store = _paced(
            memory.store,
            e,
            misconfigured=e is malformed,
            settings=settings,
            spec=spec,
            wall=wall,
        )
        memory.store_fault = _shown(e, observation.namespace, spec.checkpoint_credentials)
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
    except KUBE_API_ERRORS as e:
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
        connection_string = await _secret(kube, observation.namespace, spec.event_hub_credentials)
        return await hubs.last_sequence_numbers(
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            partitions=list(partitions),
            namespace=observation.namespace,
            service_account=spec.service_account_name or None,
        )
    except DEPENDENCY_ERRORS as e:
        _forget(kube, observation.namespace, spec.event_hub_credentials, e)
        logger.warning("lag unavailable, weighting by count this cycle: %s", e)
        return None
