"""The operator's runtime: which events start a cycle, and the daemon that runs them.

Every EventHubConsumer gets one daemon that runs `cycles.run_cycle` whenever it is woken and
at least every ``spec.balancing.intervalSeconds`` (the safety net), sooner when the last
decision names a deadline (a hand-off timeout, a grace period). Every pod, ConfigMap and CR
event is offered to the consumers' rosters (`Operator.observed`, through
`cache.tracking.Tracking`); the consumers whose roster it changed are woken at once:
membership and routing are the same structure, so a pod relabelled away leaves its consumer
at the event that says so. A wake-up runs a cycle at once, but cycles start at least
`DEBOUNCE_SECONDS` apart: the wake-ups that come sooner are folded into one cycle at that
distance.

Each consumer has one record (`memories.Memory`, in `Operator.consumers`), which its daemon
makes, writes and forgets (`Operator.forget`). The cycles read from the rosters
(`Operator.cache`: the watch handlers reach it through `ports.WatchPort`, the daemons through
`ports.RosterPort`, the cycles through `ports.KubePort`), so a steady cycle makes no API
request. A write refused for a stale read (409) makes the consumer read afresh and retry at
once (`cache.tracking.Following.refresh`). kopf's settings and the registry of handlers that
wires an `Operator` into kopf are `kopfwiring`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, labelselectors, specs
from eventhub_balancer.handlers import (
    backlogs,
    cyclefaults,
    cycles,
    dependencylines,
    eventposts,
    memories,
    observing,
    ports,
    throttles,
)
from eventhub_balancer.handlers.cache import caches, shelves
from eventhub_balancer.handlers.metrics import Metrics
from eventhub_balancer.reconciling import conflicts

logger = logging.getLogger(__name__)

#: Cycles start at least this far apart; the wake-ups in between become one cycle (a rollout
#: changes many pods at once).
DEBOUNCE_SECONDS = 0.05
#: The first retry after a failed cycle (API conflict, API unavailable); doubles up to the max.
RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 60.0


class ConnectionPort(Protocol):
    @property
    def server(self) -> str: ...
    @property
    def ca_path(self) -> str | None: ...
    @property
    def insecure(self) -> bool: ...
    @property
    def scheme(self) -> str | None: ...
    @property
    def token(self) -> str | None: ...
    @property
    def certificate_path(self) -> str | None: ...
    @property
    def private_key_path(self) -> str | None: ...


Key = tuple[str, str]  # (namespace, name)


@dataclasses.dataclass
class Operator:
    """Everything the handlers share in one operator instance: the ports, the metrics, the
    cache, and one record per running consumer (``consumers``: `memories.Memory`, made and
    popped by its daemon). The cycles read through ``view`` (the rosters), the rest through
    ``kube``, the adapter itself."""

    kube: ports.ListingPort
    hubs: ports.HubPort
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    connection: Callable[[], ConnectionPort] | None = None
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    debounce: float = DEBOUNCE_SECONDS
    #: write the informational pod annotation (needs patch on pods: off unless installed so)
    annotate_pods: bool = False
    #: the hosts the install binds to one namespace each (``--bind-location``)
    bindings: conflicts.Bindings = conflicts.UNBOUND
    #: the pods the operator watches at all (``--pod-selector``); None: every pod
    pod_scope: labelselectors.Selector | None = None
    #: the partition ends every consumer's backlog probe may read, shared (`backlogs`)
    backlog: backlogs.Budget = dataclasses.field(default_factory=backlogs.Budget)
    #: each running consumer's record, its daemon's alone (others only set its ``wake``)
    consumers: dict[Key, memories.Memory] = dataclasses.field(default_factory=dict)
    #: the faults of Event Hubs and the store, said once for the consumers meeting them together
    dependency_lines: dependencylines.DependencyLines = dataclasses.field(
        default_factory=dependencylines.DependencyLines
    )
    cycles_run: int = 0
    cache: caches.Cache = dataclasses.field(init=False)
    #: the cache's parts, each through its port
    watch: ports.WatchPort = dataclasses.field(init=False)
    following: ports.RosterPort = dataclasses.field(init=False)
    view: ports.KubePort = dataclasses.field(init=False)
    #: posts the cycles' Kubernetes Events beside them, not inside them (`eventposts`)
    events: eventposts.Poster = dataclasses.field(init=False)
    #: the consumers whose cycles the API server throttled (`throttles`), and which tries next
    throttle: throttles.Throttle = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.cache = caches.Cache(self.kube, wake=self.wake, pod_scope=self.pod_scope)
        self.watch, self.following, self.view = (
            self.cache.watch,
            self.cache.following,
            self.cache.view,
        )
        self.events = eventposts.Poster(self.view, posting=self._count_event)
        self.throttle = throttles.Throttle(self.wake)

    def _count_event(self, body: Mapping[str, Any]) -> None:
        """An Event the poster posts, counted for its consumer while that one runs (a cycle
        counts only the writes it makes itself: `cycles.run_cycle`)."""
        namespace = str((body.get("metadata") or {}).get("namespace", ""))
        consumer = str((body.get("involvedObject") or {}).get("name", ""))
        if (namespace, consumer) in self.consumers:
            self.metrics.count_write(namespace=namespace, consumer=consumer, kind="event")

    def wake(self, key: Key) -> None:
        """Something the consumer's cycle reads changed: its next cycle starts now."""
        memory = self.consumers.get(key)
        if memory is not None:
            memory.wake.set()

    def consumer_changed(self, key: Key, *, generation: int | None) -> None:
        """A spec change (a new generation) re-plans now, not at the next tick."""
        memory = self.consumers.get(key)
        if memory is not None and generation != memory.generation:
            memory.wake.set()

    def consumer_deleted(self, key: Key, *, uid: str | None = None) -> None:
        """Another consumer may have been refused (`Conflict`) for overlapping this one: every
        other consumer looks again now, not at its next interval (deletions are rare). The
        Events still waiting about it (``uid``) are not posted. The deletion is said once: the
        operator's log said nothing of it, and its pods run on with what they hold."""
        logger.info(
            "%s/%s: deleted: its partitions are no longer balanced, and its pods that still "
            "run keep those their ConfigMaps name until they stop (delete or scale down their "
            "workload, or create the EventHubConsumer again)",
            *key,
        )
        if uid:
            self.events.withdraw(uid)
        for other in list(self.consumers):
            if other != key:
                self.wake(other)

    def observed(self, kind: str, body: Mapping[str, Any], event_type: str | None) -> None:
        """A watch event: offered to the rosters; the consumers whose roster changed, and
        after a re-list every consumer (each reads the kind afresh once), are woken."""
        relist = self.watch.observed(kind, event_type)
        changed = self.watch.event(kind, body, event_type)
        if relist:
            changed = list(self.consumers)
        if kind == shelves.CONFIGMAPS:
            named = relabelled_from(body)
            if named is not None and named not in changed:
                changed.append(named)
        for key in changed:
            self.wake(key)

    def stuck(self, *, now: float) -> list[Key]:
        """Daemons whose loop has not come round for far longer than their interval."""
        return [
            key
            for key, memory in self.consumers.items()
            if memory.heartbeat is not None
            and now - memory.heartbeat > max(120.0, 10 * memory.interval)
        ]

    def forget(self, key: Key) -> None:
        """The consumer's daemon stopped: its record goes, and what the cache, the Event Hubs
        side and the metrics keep by its key with it, and the Secret values of its namespace."""
        self.consumers.pop(key, None)
        self.throttle.forget(key)
        namespace, name = key
        self.following.forget(namespace=namespace, name=name)
        self.hubs.forget(observing.hub_key(namespace, name))
        self.metrics.forget(namespace=namespace, consumer=name)
        # Its namespace may be deleted and created again under the same names (and without
        # the RoleBinding that let the operator read its Secrets): values are read afresh.
        self.cache.view.forget_secrets(namespace=namespace)
        if not self.consumers:
            self.cache.relisting.stop()


def relabelled_from(body: Mapping[str, Any]) -> Key | None:
    """The consumer an assignment ConfigMap's data names, when its consumer label names
    another one (or none): that consumer looks too, whatever the label says, and repairs it.
    When the label agrees, the event reaches that consumer's roster, which wakes it only if
    the event changed what it knows: the echo of the operator's own write wakes nobody (it
    cost a cycle after every cycle that wrote, 115 ms of CPU at 1,024 partitions over 512
    pods)."""
    meta = body.get("metadata") or {}
    consumer = (body.get("data") or {}).get(configmaps.KEY_CONSUMER)
    if not consumer or (meta.get("labels") or {}).get(configmaps.LABEL_CONSUMER) == consumer:
        return None
    return str(meta.get("namespace") or ""), str(consumer)


async def run_daemon(
    runtime: Operator, *, namespace: str, name: str, spec: Any, stopped: Any
) -> None:
    """The per-consumer loop: cycle, then sleep until woken, a deadline or the interval. It
    makes the consumer's record (`memories.Memory`) and is its one writer; stopping, it
    forgets the consumer (`Operator.forget`)."""
    key = (namespace, name)
    memory = runtime.consumers.setdefault(key, memories.Memory())
    runtime.cache.relisting.start()
    # What the conditions name as the pods watched: the same for every cycle.
    pod_scope = runtime.pod_scope.to_query() if runtime.pod_scope is not None else ""
    retry = 0.0
    faults = cyclefaults.CycleFaults(namespace, name)
    stop_waiter = asyncio.ensure_future(stopped.wait())
    try:
        while not stopped:
            selector: specs.Selector | None = None
            try:
                parsed = specs.parse_spec(spec)
                selector = parsed.selector
                memory.interval = float(parsed.balancing.interval_seconds)
            except errors.InvalidInput:
                memory.interval = float(specs.DEFAULT_INTERVAL_SECONDS)
            runtime.following.follow(namespace=namespace, name=name, selector=selector)
            memory.wake.clear()
            delay = memory.interval
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                result = await cycles.run_cycle(
                    kube=runtime.view,
                    hubs=runtime.hubs,
                    namespace=namespace,
                    name=name,
                    memory=memory,
                    now=runtime.clock(),
                    metrics=runtime.metrics,
                    annotate_pods=runtime.annotate_pods,
                    bindings=runtime.bindings,
                    pod_scope=pod_scope,
                    backlog=runtime.backlog,
                    events=runtime.events.post,
                    lines=runtime.dependency_lines,
                )
                decision = result.decision
                runtime.cycles_run += 1
                logger.debug(
                    "%s/%s: cycle took %.3f s: %d writes, %d moves",
                    namespace,
                    name,
                    loop.time() - started,
                    result.writes,
                    len(decision.moves),
                )
                runtime.metrics.cycles.labels(namespace, name, "ok").inc()
                faults.succeeded(now=loop.time())
                # Writes accepted after a throttle: the other throttled consumers try now.
                runtime.throttle.succeeded(key, wrote=result.writes > 0)
                retry = 0.0
                memory.generation = decision.generation
                if decision.next_in is not None:
                    delay = min(delay, decision.next_in)
            except errors.EventHubBalancerError as e:
                runtime.metrics.cycles.labels(namespace, name, e.reason).inc()
                if isinstance(e, errors.NotFound) and await _consumer_gone(
                    runtime.kube, namespace=namespace, name=name
                ):
                    return  # the EventHubConsumer is gone; kopf stops us anyway
                stale = isinstance(e, errors.Conflict | errors.NotFound)
                if stale:
                    # A write refused for a stale read (409), or of an object gone since
                    # (404): the consumer is read afresh before it decides again.
                    runtime.following.refresh(namespace=namespace, name=name)
                if stale and retry == 0.0:
                    # The first one is what preconditions are for (kopf's own patch of the CR,
                    # another replica's write): decide again at once, over a fresh read.
                    retry = RETRY_SECONDS / 2
                    delay = runtime.debounce
                    # Ordinary (every consumer's first write after a start meets kopf's own
                    # patch): not worth a line a consumer at INFO. A second one in a row warns.
                    logger.debug("%s/%s: %s; reading afresh and deciding again", namespace, name, e)
                else:
                    # Anything else, or a conflict again: retry soon, never stop balancing.
                    # Never sooner than a throttling server asked (`Retry-After`).
                    asked = e.retry_after if isinstance(e, errors.ApiThrottled) else None
                    retry = min(MAX_RETRY_SECONDS, max(RETRY_SECONDS, retry * 2, asked or 0.0))
                    delay = retry
                    if isinstance(e, errors.ApiThrottled):
                        # One throttled consumer probes at the server's pace (`throttles`).
                        delay = runtime.throttle.refused(
                            key, retry_after=asked, backoff=retry, now=loop.time()
                        )
                    # Said once, reminded at a bounded pace, and its end said (`cyclefaults`).
                    faults.failed(e, retry_in=delay, now=loop.time())
            # The loop's clock is time.monotonic (running.py's /healthz compares with it).
            memory.heartbeat = loop.time()
            wake_waiter = asyncio.ensure_future(memory.wake.wait())
            try:
                await asyncio.wait(
                    {wake_waiter, stop_waiter}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                wake_waiter.cancel()
            if memory.wake.is_set() and not stopped:
                # A wake-up after a quiet spell runs a cycle at once; those that come sooner
                # than `DEBOUNCE_SECONDS` after a cycle started are folded into one cycle at
                # that distance (a rollout's burst of pod changes becomes two cycles, not one
                # a change, and a single change, such as an acknowledgement, waits for nothing).
                pause = min(runtime.debounce, started + runtime.debounce - loop.time())
                if pause > 0:
                    await asyncio.sleep(pause)
    finally:
        stop_waiter.cancel()
        runtime.forget(key)


async def _consumer_gone(kube: ports.ApiPort, *, namespace: str, name: str) -> bool:
    """Whether the EventHubConsumer itself is gone (not merely an object a cycle touched)."""
    try:
        await kube.get_consumer(namespace=namespace, name=name)
    except errors.NotFound:
        return True
    except errors.EventHubBalancerError:
        return False
    return False
