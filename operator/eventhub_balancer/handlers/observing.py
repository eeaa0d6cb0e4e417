"""The reading half of a cycle: the CR, the partition list, the pods and ConfigMaps (the
checkpoints: `checkpointreads`), and what reading a dependency a spec points at (Event Hubs,
the checkpoint store) shares.

Everything it reads goes into one `observations.Observation` for `reconciling.deciding`;
what the bodies mean is decided there. Reads may fail soft: a fault of Event Hubs or of the
checkpoint store becomes part of the observation (and of the status), and the next attempt
waits for the backoff kept in the consumer's `memories.Memory`. The readers only read that
record: they return the pacing they leave (`memories.Pacing`), and the cycle keeps it. A
failure of the Kubernetes API itself is raised: the whole cycle is retried.

Both readers of a dependency (here and `checkpointreads`) share the same steps: the value of
its Secret (`secret_value`), the error a connection string that can never work gets
(`malformed`), the fault as the condition shows it (`shown`), the pace of the next attempt
(`paced`), and forgetting a Secret the dependency rejected (`forget`). What they say of a fault
goes through the operator's `dependencylines.DependencyLines`, which says a fault that many
consumers meet together once for them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from eventhub_balancer import errors
from eventhub_balancer.contracts import conditions, connectionstrings, specs
from eventhub_balancer.handlers import cyclefaults, dependencylines, memories, ports
from eventhub_balancer.reconciling import deadlines, observations, reports

logger = logging.getLogger(__name__)

#: A dependency's pacing: Event Hubs' (`memories.Pacing`) or the store's (`StorePacing`).
P = TypeVar("P", bound=memories.Pacing)


async def observe(
    *,
    kube: ports.KubePort,
    hubs: ports.HubPort,
    namespace: str,
    name: str,
    memory: memories.Memory,
    wall: float,
) -> observations.Observation:
    """The CR, the partition list and the cluster; the checkpoints come later (`read_store`).
    A fault is said as for this consumer alone."""
    observation, _pacing = await observe_consumer(
        kube=kube,
        hubs=hubs,
        namespace=namespace,
        name=name,
        memory=memory,
        wall=wall,
        lines=dependencylines.DependencyLines(),
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
    lines: dependencylines.DependencyLines,
) -> tuple[observations.Observation, memories.Pacing]:
    """What costs the same whatever the fleet: the CR, the partition list, the store's state
    and the peers, no pods or ConfigMaps yet (`observe_pods`); with Event Hubs' pacing after
    this read. Its fault is said through ``lines``, the operator's."""
    body = await kube.get_consumer(namespace=namespace, name=name)
    try:
        spec = specs.parse_spec(body.get("spec") or {})
    except errors.InvalidInput as e:
        invalid = observations.Observation(namespace=namespace, name=name, body=body, spec_error=e)
        return invalid, memory.hub
    hub, pacing = await read_partitions(
        kube=kube,
        hubs=hubs,
        namespace=namespace,
        name=name,
        spec=spec,
        memory=memory,
        wall=wall,
        lines=lines,
        failing=failing_count(body),
    )
    store = memory.store
    ahead = store.ahead
    observation = observations.Observation(
        namespace=namespace,
        name=name,
        body=body,
        spec=spec,
        hub=hub,
        store=observations.StoreRead(
            fault=store.fault,
            listed=store.checked_at is not None,
            known_sequences=store.sequences,
            checked_at=store.checked_at,
            ahead_at=(ahead.at if ahead is not None and ahead.key == store_key(spec) else None),
            foreign=store.claims.live,
            gone=store.vanished.gone,
        ),
        # The other consumers come from the watch (kopf's index); a port without one (a test
        # or a tool over the bare API) knows of none, and finds no conflict.
        peers=kube.peers(),
        refused=memory.refused,
    )
    return observation, pacing


def failing_count(body: Mapping[str, Any]) -> int:
    """``status.failingCount`` as the last cycle wrote it; 0 when there is none, or when it is
    not a count (a status edited by hand)."""
    value = (body.get("status") or {}).get(reports.COUNT_FIELD)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


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
    return dataclasses.replace(
        observation,
        pods=tuple(pods),
        configmaps=tuple(maps),
        departures=kube.departures(namespace=namespace, name=name),
    )


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
    lines: dependencylines.DependencyLines,
    failing: int = 0,
) -> tuple[observations.HubRead, memories.Pacing]:
    """The partition ids, and Event Hubs' pacing after this read; on a fault (or while
    backing off from one) the last known ids. ``failing``: how many partitions the status
    says the pods report in trouble (``failingCount``, as the last cycle wrote it)."""
    key = hub_key(namespace, name)
    cached = hubs.cached(key)
    pacing = memory.hub
    # What a failure is found under: a change of it ends the wait at once.
    hub = (spec.fully_qualified_namespace, spec.event_hub_name, spec.consumer_group)
    settings = (*hub, spec.event_hub_credentials, spec.service_account_name)
    # Fewer partitions in trouble than when it last failed: the pods reach Event Hubs again,
    # so it is asked now, not at the end of a backoff of minutes (in the cycle after the one
    # that saw them recover, within the interval).
    waiting = pacing.backoff.waiting(wall, settings=settings) and failing >= pacing.failing
    if pacing.fault is not None and waiting:
        return observations.HubRead(ids=cached or None, fault=pacing.fault), pacing
    refused = None
    try:
        connection_string = await secret_value(kube, namespace, spec.event_hub_credentials)
        refused = malformed(
            namespace,
            spec.event_hub_credentials,
            connection_string,
            functools.partial(
                connectionstrings.eventhub_problem,
                fully_qualified_namespace=spec.fully_qualified_namespace,
            ),
        )
        if refused is not None:
            raise refused
        ids, _fresh = await hubs.partitions(
            consumer=key,
            fully_qualified_namespace=spec.fully_qualified_namespace,
            eventhub_name=spec.event_hub_name,
            connection_string=connection_string,
            client_id=spec.event_hub_credentials.client_id or None,
            now=wall,
            namespace=namespace,
            service_account=spec.service_account_name or None,
            # What the pods receive on: a missing group fails them all (`consumergroups`).
            consumer_group=spec.consumer_group,
        )
    except KUBE_API_ERRORS:
        raise
    except DEPENDENCY_ERRORS as e:
        forget(kube, namespace, spec.event_hub_credentials, e)
        failed = dataclasses.replace(
            pacing,
            backoff=paced(
                pacing.backoff,
                e,
                misconfigured=e is refused,
                settings=settings,
                spec=spec,
                wall=wall,
            ),
            fault=shown(e, namespace, spec.event_hub_credentials),
            failing=failing,
        )
        pacing = told(key, "Event Hubs", pacing, failed, wall=wall, lines=lines)
        # Read again: a listing that succeeded before the consumer-group check failed is kept.
        return observations.HubRead(ids=hubs.cached(key) or None, fault=pacing.fault), pacing
    if pacing.fault is not None:
        msg = "%s: Event Hubs answers again, %d partitions (it failed with %s; %s)"
        args = (key, len(ids), pacing.fault.reason, lasted(pacing, wall=wall))
        lines.answered(key, "Event Hubs", msg, *args, now=wall)
    return observations.HubRead(ids=tuple(ids)), memories.Pacing(backoff=deadlines.Backoff())


def told(
    key: str,
    what: str,
    before: P,
    failed: P,
    *,
    wall: float,
    lines: dependencylines.DependencyLines,
) -> P:
    """``failed`` (``before`` with the fault of one more failed attempt at ``what``) counted
    into its run, and said as the cycles' faults are (`cyclefaults`): a warning when the run
    starts or its reason changes (or, for a fault that is not an outage, its words), a
    reminder at most every `cyclefaults.REMIND_SECONDS`, the attempts in between at DEBUG.
    Each attempt was a warning: a hub that does not exist, asked every 30 s, was 120 lines an
    hour for each consumer that names it. The warnings of consumers that meet the fault
    together are said once for them (``lines``)."""
    fault = failed.fault
    assert fault is not None
    ongoing = before.fault is not None
    run = dataclasses.replace(
        failed,
        since=before.since if ongoing else wall,
        attempts=before.attempts + 1 if ongoing else 1,
    )
    retry = run.backoff.delay
    was = before.fault.reason if before.fault is not None else None
    if ongoing and before.fault != fault and not cyclefaults.is_transient(fault.reason):
        # What is wrong changed within one reason (the Secret made, now its key missing):
        # news, said as a new run's first line; it waited for the 10-minute reminder.
        was = None
    due = cyclefaults.to_say(was, fault.reason, said=before.said, now=wall)
    if due == "new":
        msg = "%s: %s: %s (retrying in %.0f s)"
        lines.failed(key, what, fault.reason, msg, key, what, fault.message, retry, now=wall)
    elif due == "lasting":
        msg = "%s: %s still failing, %s: %s (retrying in %.0f s)"
        args = (key, what, lasted(run, wall=wall), fault.message, retry)
        lines.failed(key, what, fault.reason, msg, *args, now=wall)
    else:
        logger.debug("%s: %s: %s (retrying in %.0f s)", key, what, fault.message, retry)
        return run
    return dataclasses.replace(run, said=wall)


def lasted(run: memories.Pacing, *, wall: float) -> str:
    """How long a run of failed attempts has lasted, as the log says it."""
    return f"{conditions.amount(run.attempts, 'failed attempt')} over {wall - run.since:.0f} s"


def store_key(spec: specs.ConsumerSpec) -> Hashable:
    """What names a consumer's checkpoint blobs and the credentials they are read with: a
    listing made ahead stands only for the very same store, and a failure's backoff too."""
    hub = (spec.fully_qualified_namespace, spec.event_hub_name, spec.consumer_group)
    store = (spec.checkpoint_container, spec.checkpoint_account_url, spec.checkpoint_credentials)
    return (*hub, *store, spec.service_account_name)


#: Failures of the Kubernetes API itself (not of what a spec points at): no condition can
#: describe them, since the status cannot be written either; the whole cycle is retried.
KUBE_API_ERRORS = (errors.Conflict, errors.ApiUnavailable)
#: Failures of a dependency a spec points at: shown in a condition, retried with backoff.
DEPENDENCY_ERRORS = (errors.ConfigurationError, errors.TransientError)
#: Configuration errors that asking again cannot mend until the CR or its Secret changes: a
#: host the install does not allow (a malformed connection string is found before the
#: adapter is asked, by `malformed`). Both wait `deadlines.after_misconfiguration`.
MISCONFIGURED = (errors.EndpointNotAllowed,)


async def secret_value(
    kube: ports.KubePort, namespace: str, creds: specs.Credentials
) -> str | None:
    if creds.secret_ref is None:
        return None
    return await kube.read_secret_key(
        namespace=namespace, name=creds.secret_ref.name, key=creds.secret_ref.key
    )


def malformed(
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


def shown(
    error: errors.EventHubBalancerError, namespace: str, creds: specs.Credentials
) -> observations.Fault:
    """The fault as the condition shows it: a refused host names the Secret it came from."""
    fault = observations.Fault.of(error)
    if isinstance(error, MISCONFIGURED) and creds.secret_ref is not None:
        ref = creds.secret_ref
        where = f"Secret {namespace}/{ref.name}, key {ref.key!r}"
        return dataclasses.replace(fault, message=f"{where}: {fault.message}")
    return fault


def paced(
    backoff: deadlines.Backoff,
    error: Exception,
    *,
    misconfigured: bool,
    settings: Hashable,
    spec: specs.ConsumerSpec,
    wall: float,
) -> deadlines.Backoff:
    if misconfigured or isinstance(error, MISCONFIGURED):
        return deadlines.after_misconfiguration(wall=wall, settings=settings)
    # A hub, group or checkpoint container that does not exist is created outside the
    # cluster, then waited for; a Secret or key too, or the right to read it (one read of the
    # API server).
    missing = isinstance(
        error,
        errors.EventHubNotFound
        | errors.CheckpointContainerNotFound
        | errors.SecretNotFound
        | errors.SecretForbidden,
    )
    return deadlines.after_failure(
        backoff,
        wall=wall,
        base=float(spec.balancing.interval_seconds),
        longest=deadlines.MISSING_BACKOFF_SECONDS if missing else deadlines.MAX_BACKOFF_SECONDS,
        settings=settings,
    )


def forget(
    kube: ports.KubePort, namespace: str, creds: specs.Credentials, error: Exception
) -> None:
    """A dependency rejected what the Secret held (credentials, a wrong endpoint: anything
    but a transient fault): the next attempt reads it again, so a rotated or fixed key is used
    as soon as the backoff allows, without watching Secrets."""
    if creds.secret_ref is not None and isinstance(error, errors.ConfigurationError):
        kube.forget_secret(namespace=namespace, name=creds.secret_ref.name)
