"""The kopf side: which events start a cycle, and kopf's settings. Thin on purpose.

Every EventHubConsumer gets one daemon that runs `cycles.run_cycle` whenever it is woken and
at least every ``spec.balancing.intervalSeconds`` (the safety net), sooner when the last
decision names a deadline (a hand-off timeout, a grace period). Pod events (add, delete,
readiness) and ConfigMap events (a pod's acknowledgement) wake the daemons of the consumers
they concern at once; wake-ups within `DEBOUNCE_SECONDS` are folded into one cycle. Which
consumers a pod or a spec change concerns is routed from what the daemon kept of its last
decision (`Route`: the generation and the pods it saw), not from the readers' state.

The same watch streams feed kopf's indexes of EventHubConsumers, pods and assignment
ConfigMaps; the cycles read from them through `caching.CachedKube` (`Operator.cache`), so a
steady state makes no API request. The event handlers tell the cache each event's type, from
which it notices kopf listing again after a watch error.

kopf's bookkeeping stays out of the status: progress and diff-base go to annotations with our
prefix, kopf posts no Events of its own (ours have specific reasons), and the registry is
built per operator instance, so that two operators (peering tests) can share a process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import kopf

from eventhub_balancer import errors
from eventhub_balancer.contracts import configmaps, specs
from eventhub_balancer.handlers import caching, cycles, indexkeys, memories, ports
from eventhub_balancer.handlers.metrics import Metrics
from eventhub_balancer.reconciling import conflicts

logger = logging.getLogger(__name__)

#: Wake-ups this close together become one cycle (a rollout changes many pods at once).
DEBOUNCE_SECONDS = 0.05
#: The names of kopf's indexes (`caching` serves the cycle's reads from them).
INDEXES = {
    indexkeys.CONSUMERS: "ehb_consumers",
    indexkeys.PODS: "ehb_pods",
    indexkeys.CONFIGMAPS: "ehb_configmaps",
    indexkeys.PEERS: "ehb_peers",
}
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
    def token(self) -> str | None: ...
    @property
    def certificate_path(self) -> str | None: ...
    @property
    def private_key_path(self) -> str | None: ...


Key = tuple[str, str]  # (namespace, name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Route:
    """What the daemon kept of a consumer's last decision, to route wake-ups to it."""

    generation: int
    pods: frozenset[str]  # the pods it concerns (matched, or named by its ConfigMaps)


@dataclasses.dataclass
class Operator:
    """Everything the handlers share in one operator instance: the ports, the metrics, and
    per consumer its daemon's wake-up, memory, route and heartbeat. The cycles read through
    ``cache`` (the watch streams), the rest through ``kube``."""

    kube: ports.KubePort
    hubs: ports.HubPort
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    connection: Callable[[], ConnectionPort] | None = None
    clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC)
    debounce: float = DEBOUNCE_SECONDS
    #: write the informational pod annotation (needs patch on pods: off unless installed so)
    annotate_pods: bool = False
    wakes: dict[Key, asyncio.Event] = dataclasses.field(default_factory=dict)
    memories: dict[Key, memories.Memory] = dataclasses.field(default_factory=dict)
    routes: dict[Key, Route] = dataclasses.field(default_factory=dict)
    selectors: dict[Key, specs.Selector] = dataclasses.field(default_factory=dict)
    heartbeats: dict[Key, float] = dataclasses.field(default_factory=dict)
    intervals: dict[Key, float] = dataclasses.field(default_factory=dict)
    cycles_run: int = 0
    cache: caching.CachedKube = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.cache = caching.CachedKube(self.kube)

    def wake(self, key: Key, *, told: bool = False) -> None:
        """An event concerns the consumer: its next cycle reads and decides (`caching.touch`),
        and starts now; ``told``: its reader's feed was told what changed."""
        self.cache.touch(*key, told=told)
        event = self.wakes.get(key)
        if event is not None:
            event.set()

    def consumer_changed(self, key: Key, *, generation: int | None) -> None:
        """A spec change (a new generation) re-plans now, not at the next tick."""
        route = self.routes.get(key)
        if route is None or generation != route.generation:
            self.wake(key)

    def consumer_deleted(self, key: Key) -> None:
        """Another consumer may have been refused (`Conflict`) for overlapping this one: every
        other consumer looks again now, not at its next interval (deletions are rare)."""
        for other in list(self.wakes):
            if other != key:
                self.wake(other)

    def pod_changed(self, *, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        """Wake the consumers whose selector matches the pod, or whose last decision saw it
        (a pod relabelled away still owns partitions until the next cycle moves them), and
        tell their readers to read it again."""
        for key, selector in list(self.selectors.items()):
            route = self.routes.get(key)
            if key[0] == namespace and (
                selector.matches(labels) or (route is not None and name in route.pods)
            ):
                self.cache.feeds.note(key, kind=indexkeys.PODS, object_name=name)
                self.wake(key, told=True)

    def stuck(self, *, now: float) -> list[Key]:
        """Daemons whose loop has not come round for far longer than their interval."""
        return [
            key
            for key, beat in self.heartbeats.items()
            if now - beat > max(120.0, 10 * self.intervals.get(key, 5.0))
        ]


def configure(
    settings: kopf.OperatorSettings,
    *,
    peering_name: str | None,
    standalone: bool,
    clusterwide: bool,
    priority: int,
) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=specs.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=specs.GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{specs.GROUP}/finalizer"
    settings.posting.enabled = False
    settings.peering.standalone = standalone
    settings.peering.clusterwide = clusterwide
    settings.peering.priority = priority
    settings.peering.mandatory = not standalone
    if peering_name:
        settings.peering.name = peering_name
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 30


def build_registry(runtime: Operator) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    if runtime.connection is not None:
        connection = runtime.connection

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            info = connection()
            return kopf.ConnectionInfo(
                server=info.server,
                ca_path=info.ca_path,
                insecure=info.insecure,
                token=info.token,
                certificate_path=info.certificate_path,
                private_key_path=info.private_key_path,
            )

    @kopf.daemon(
        specs.GROUP,
        specs.VERSION,
        specs.PLURAL,
        registry=registry,
        cancellation_timeout=10.0,
        id="balance",
    )
    async def balance(**kwargs: Any) -> None:
        runtime.cache.attach({kind: kwargs[index] for kind, index in INDEXES.items()})
        await run_daemon(
            runtime,
            namespace=kwargs["namespace"],
            name=kwargs["name"],
            spec=kwargs["spec"],
            stopped=kwargs["stopped"],
        )

    # The indexes: the bodies the watch streams delivered, filed for the cycles' lookups.
    @kopf.index(
        specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry, id=INDEXES[indexkeys.CONSUMERS]
    )
    def index_consumer(**kwargs: Any) -> dict[Any, Any]:
        return {indexkeys.consumer_key(kwargs["namespace"], kwargs["name"]): dict(kwargs["body"])}

    @kopf.index(
        specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry, id=INDEXES[indexkeys.PEERS]
    )
    def index_peer(**kwargs: Any) -> dict[Any, Any]:
        return peer_entry(kwargs["namespace"], kwargs["name"], kwargs["body"])

    @kopf.index("", "v1", "pods", registry=registry, id=INDEXES[indexkeys.PODS])
    def index_pod(**kwargs: Any) -> dict[Any, Any]:
        body = dict(kwargs["body"])
        keys = indexkeys.pod_keys(kwargs["namespace"], kwargs["labels"], kwargs["name"])
        return {key: body for key in keys}  # one object under every key

    @kopf.index(
        "",
        "v1",
        "configmaps",
        registry=registry,
        id=INDEXES[indexkeys.CONFIGMAPS],
        labels={configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY},
    )
    def index_configmap(**kwargs: Any) -> dict[Any, Any]:
        keys = indexkeys.configmap_keys(kwargs["namespace"], kwargs["labels"], kwargs["name"])
        body = dict(kwargs["body"])  # one object under every key: a reader compares identities
        return {key: body for key in keys}

    @kopf.on.event(specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry)
    def consumer_changed(**kwargs: Any) -> None:
        runtime.cache.observed(indexkeys.CONSUMERS, kwargs["type"])
        generation = (kwargs["body"].get("metadata") or {}).get("generation")
        key = (kwargs["namespace"], kwargs["name"])
        if kwargs["type"] == "DELETED":
            runtime.consumer_deleted(key)
        else:
            runtime.consumer_changed(key, generation=generation)

    @kopf.on.event("", "v1", "pods", registry=registry)
    def pod_changed(**kwargs: Any) -> None:
        runtime.cache.observed(indexkeys.PODS, kwargs["type"])
        runtime.pod_changed(
            namespace=kwargs["namespace"], name=kwargs["name"], labels=kwargs["labels"]
        )

    @kopf.on.event(
        "",
        "v1",
        "configmaps",
        registry=registry,
        labels={configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY},
    )
    def configmap_changed(**kwargs: Any) -> None:
        runtime.cache.observed(indexkeys.CONFIGMAPS, kwargs["type"])
        namespace, body = kwargs["namespace"], kwargs["body"]
        # Every reader of the namespace looks again: the event does not show a label it lost.
        runtime.cache.feeds.note_all(
            namespace, kind=indexkeys.CONFIGMAPS, object_name=kwargs["name"]
        )
        consumer = (body.get("data") or {}).get(configmaps.KEY_CONSUMER)
        if consumer:
            runtime.wake((namespace, consumer), told=True)
        # The consumer its label points at reads it too (a corrupt one is repaired by it).
        label = (body.get("metadata", {}).get("labels") or {}).get(configmaps.LABEL_CONSUMER)
        for key in list(runtime.wakes):
            if key[0] == namespace and configmaps.label_value(key[1]) == label:
                if consumer:
                    runtime.cache.touch(*key, told=True)
                else:
                    runtime.wake(key, told=True)

    return registry


def peer_entry(namespace: str, name: str, body: Mapping[str, Any]) -> dict[Any, Any]:
    """The peers index's entry of one EventHubConsumer: its summary, parsed once per watch
    event rather than once per other consumer's cycle."""
    return {indexkeys.peer_key(namespace): conflicts.peer(body, namespace=namespace, name=name)}


async def run_daemon(
    runtime: Operator, *, namespace: str, name: str, spec: Any, stopped: Any
) -> None:
    """The per-consumer loop: cycle, then sleep until woken, a deadline or the interval."""
    key = (namespace, name)
    wake = runtime.wakes.setdefault(key, asyncio.Event())
    memory = runtime.memories.setdefault(key, memories.Memory())
    retry = 0.0
    stop_waiter = asyncio.ensure_future(stopped.wait())
    try:
        while not stopped:
            try:
                parsed = specs.parse_spec(spec)
                runtime.selectors[key] = parsed.selector
                interval = float(parsed.balancing.interval_seconds)
            except errors.InvalidInput:
                interval = float(specs.DEFAULT_INTERVAL_SECONDS)
            runtime.intervals[key] = interval
            wake.clear()
            delay = interval
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                result = await cycles.run_cycle(
                    kube=runtime.cache,
                    hubs=runtime.hubs,
                    namespace=namespace,
                    name=name,
                    memory=memory,
                    now=runtime.clock(),
                    metrics=runtime.metrics,
                    annotate_pods=runtime.annotate_pods,
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
                retry = 0.0
                route = runtime.routes.get(key)
                runtime.routes[key] = Route(
                    generation=decision.generation,
                    # An invalid spec reads no pods: keep routing the ones seen before.
                    pods=route.pods
                    if decision.spec_error is not None and route is not None
                    else decision.pods,
                )
                if decision.next_in is not None:
                    delay = min(delay, decision.next_in)
            except errors.EventHubBalancerError as e:
                runtime.metrics.cycles.labels(namespace, name, e.reason).inc()
                if isinstance(e, errors.NotFound) and await _consumer_gone(
                    runtime.kube, namespace=namespace, name=name
                ):
                    return  # the EventHubConsumer is gone; kopf stops us anyway
                # Anything else that vanished mid-cycle (a ConfigMap garbage-collected with its
                # pod) is read afresh by the next cycle: retry soon, never stop balancing.
                retry = min(MAX_RETRY_SECONDS, max(RETRY_SECONDS, retry * 2))
                delay = retry
                logger.warning(
                    "%s/%s: cycle failed (%s), retrying in %.1f s", namespace, name, e, delay
                )
            # The loop's clock is time.monotonic (running.py's /healthz compares with it).
            runtime.heartbeats[key] = loop.time()
            wake_waiter = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait(
                    {wake_waiter, stop_waiter}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                wake_waiter.cancel()
            if wake.is_set() and not stopped:
                await asyncio.sleep(runtime.debounce)
    finally:
        stop_waiter.cancel()
        runtime.wakes.pop(key, None)
        runtime.selectors.pop(key, None)
        runtime.heartbeats.pop(key, None)
        runtime.memories.pop(key, None)
        runtime.routes.pop(key, None)
        runtime.cache.forget(namespace=namespace, name=name)
        runtime.metrics.forget(namespace=namespace, consumer=name)


async def _consumer_gone(kube: ports.KubePort, *, namespace: str, name: str) -> bool:
    """Whether the EventHubConsumer itself is gone (not merely an object a cycle touched)."""
    try:
        await kube.get_consumer(namespace=namespace, name=name)
    except errors.NotFound:
        return True
    except errors.EventHubBalancerError:
        return False
    return False
