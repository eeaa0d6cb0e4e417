"""kopf's side of the operator: its settings and the registry of its handlers.

`build_registry` wires one `registering.Operator` into kopf: the daemon per EventHubConsumer
(`registering.run_daemon`), the four indexes the rosters start from, and the three watch
handlers that offer every event to the rosters (`registering.Operator.observed`). Every one is
a coroutine: kopf runs a plain function in a thread of its executor, where an event would
change a roster under a cycle reading it and its wake-up would not wake the loop. kopf
reconnects a watch that has been silent for `WATCH_INACTIVITY_SECONDS`, so a stalled stream is
noticed within seconds.

kopf's bookkeeping stays out of the status: progress and diff-base go to annotations with our
prefix, kopf posts no Events of its own (ours have specific reasons), and the registry is
built per operator instance, so that two operators (peering tests) can share a process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from typing import Any

import kopf

from eventhub_balancer.contracts import configmaps, labelselectors, namespacepatterns, specs
from eventhub_balancer.handlers import eventposts, registering
from eventhub_balancer.handlers.cache import shelves
from eventhub_balancer.reconciling import conflicts

#: A watch stream silent this long is reconnected (resuming where it was, or re-listing on a
#: 410): a stalled stream costs seconds, not kopf's default 70 s. A quiet healthy stream
#: between the API server's bookmarks (about one a minute) costs one reconnection each time.
WATCH_INACTIVITY_SECONDS = 10.0
#: When the operator stops (or pauses for a peer, or the CR goes), a daemon whose cycle is in
#: flight gets this long to finish it before kopf cancels it: a cycle takes milliseconds, and one
#: waiting on a dependency ends within its calls' own 10 s bound. Cancelling is safe too (the
#: writes are ordered for a crash at any point), but it makes kopf log a warning per daemon:
#: 635 of 1,000 consumers at the end of a bench run without this, 159 with it (an operator
#: short of CPU has more cycles in flight than it can finish in 5 s).
CYCLE_FINISH_SECONDS = 5.0
#: How long kopf waits, in line, for a daemon told to stop (its consumer deleted) before it
#: comes back to it at the end of `CYCLE_FINISH_SECONDS`. kopf's own wait is a few turns of the
#: loop: a consumer deleted mid-cycle (a namespace being deleted takes its pods with it, and
#: their deletion wakes a cycle) kept its finalizer 5 s after a cycle of 0.1 s had ended, and
#: its namespace Terminating longer still. A cycle ends within this; one that waits on a
#: dependency is cancelled as before, 2 s later (kopf waits this long twice before its
#: backoff); other objects' handling does not wait meanwhile.
DAEMON_EXIT_WAIT_SECONDS = 1.0
#: How long a replica's peering entry stands after its last keep-alive (kopf renews it 5 to
#: 10 s before that). A replica that stops cleanly removes its entry, but one that is killed
#: (an OOM kill, a lost node) leaves it, and its standby stays paused until it expires: with
#: kopf's default of 60 s, a pod that died meanwhile kept its partitions, unprocessed, for
#: about a minute. At 15 s the standby acts within 15 s of the kill, for one peering patch
#: per replica every 5 to 10 s instead of every 50 to 55 s; the margin a clock running ahead
#: on another node has, 5 s or more, is kopf's and the same at any lifetime.
PEERING_LIFETIME_SECONDS = 15
#: After a login that could not take the operator's credentials (a token file gone or empty,
#: an exec plugin that failed), kopf asks again after 1 s, then 2, 4 and 8, then every
#: `LOGIN_RETRY_MAX_SECONDS`: one line each, while its watches wait for the credentials.
LOGIN_RETRY_MAX_SECONDS = 15.0
#: The ConfigMaps the operator watches: those it writes (the API server filters the rest out).
CONFIGMAPS_SELECTOR = configmaps.MANAGED_SELECTOR
#: The names of kopf's indexes (the rosters start from them: `cache.tracking.Following`).
INDEXES = {
    shelves.CONSUMERS: "ehb_consumers",
    shelves.PODS: "ehb_pods",
    shelves.CONFIGMAPS: "ehb_configmaps",
    shelves.PEERS: "ehb_peers",
}


def configure(
    settings: kopf.OperatorSettings,
    *,
    peering_name: str | None,
    standalone: bool,
    clusterwide: bool,
    priority: int,
    pod_scope: labelselectors.Selector | None = None,
    namespaces: Collection[str] = (),
) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=specs.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=specs.GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{specs.GROUP}/finalizer"
    settings.posting.enabled = False
    settings.background.instant_exit_timeout = DAEMON_EXIT_WAIT_SECONDS
    settings.peering.standalone = standalone
    settings.peering.clusterwide = clusterwide
    settings.peering.priority = priority
    settings.peering.mandatory = not standalone
    settings.peering.lifetime = PEERING_LIFETIME_SECONDS
    if peering_name:
        settings.peering.name = peering_name
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = WATCH_INACTIVITY_SECONDS
    # Only the assignment ConfigMaps, filtered by the API server: the handlers' own label
    # filter is kopf's, applied after every ConfigMap of the namespaces served (cluster-wide
    # by default) was listed and streamed to the operator, megabytes of dashboards and
    # settings included. A ConfigMap that loses the label leaves the watch as a deletion,
    # with the labels it had (as it leaves the index under kopf's own filter).
    settings.watching.label_selectors["", "v1", "configmaps"] = CONFIGMAPS_SELECTOR
    # The pods: every pod of the namespaces served, unless the install says which
    # (``--pod-selector``). kopf lists each kind whole at start, and a pod of another workload
    # is mostly a spec the operator never reads: 5,000 of them took it past 1 GB
    # (docs/benchmarks.md, "In a namespace shared with other workloads").
    if pod_scope is not None and pod_scope.to_query():
        settings.watching.label_selectors["", "v1", "pods"] = pod_scope.to_query()
    settings.networking.request_timeout = 30
    # Served namespaces all named exactly: nothing to discover. kopf would otherwise list and
    # watch every namespace to match them, which a namespaced install is not granted (the
    # chart gives it no cluster-wide read): each start waited out kopf's retries of the 403,
    # about a minute, before it fell back to the names. Patterns still need that listing.
    if not clusterwide and namespaces and not any(map(namespacepatterns.is_pattern, namespaces)):
        settings.scanning.disabled = True


def kopf_connection(info: registering.ConnectionPort) -> kopf.ConnectionInfo:
    """What kopf's login is given: the operator's own client's way to the API server, so that
    kopf's watches and patches are made as the same identity as its reads and writes."""
    return kopf.ConnectionInfo(
        server=info.server,
        ca_path=info.ca_path,
        insecure=info.insecure,
        scheme=info.scheme,
        token=info.token,
        certificate_path=info.certificate_path,
        private_key_path=info.private_key_path,
    )


def login_failure(error: BaseException, delay: float) -> str:
    """One line for a login that could not take the operator's credentials: the error, where
    the credentials come from, and when kopf asks again."""
    cause = str(error).strip().splitlines()
    said = f"{type(error).__name__}: {cause[0]}" if cause else type(error).__name__
    return (
        f"cannot take the operator's Kubernetes credentials ({said}): in a pod, check its "
        "ServiceAccount token (automountServiceAccountToken, the projected token volume); "
        "with a kubeconfig, its user's token or exec plugin (`kubectl auth whoami` with the "
        f"same kubeconfig). The watches wait; the login is tried again in {delay:g} s"
    )


def build_registry(runtime: registering.Operator) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    if runtime.connection is not None:
        connection = runtime.connection

        @kopf.on.login(registry=registry, id="login")
        def login(retry: int = 0, **_: Any) -> kopf.ConnectionInfo:
            # ``retry``: kopf's count of this login's failed attempts, 0 at each new login.
            try:
                return kopf_connection(connection())
            except Exception as e:
                # Any error of the client's credential loaders: kopf would log its traceback
                # at every attempt, naming neither the credentials nor what to check.
                delay = min(2.0**retry, LOGIN_RETRY_MAX_SECONDS)
                raise kopf.TemporaryError(login_failure(e, delay), delay=delay) from e

    @kopf.daemon(
        specs.GROUP,
        specs.VERSION,
        specs.PLURAL,
        registry=registry,
        cancellation_backoff=CYCLE_FINISH_SECONDS,
        cancellation_timeout=10.0,
        id="balance",
    )
    async def balance(**kwargs: Any) -> None:
        runtime.following.attach({kind: kwargs[index] for kind, index in INDEXES.items()})
        exiting = asyncio.ensure_future(note_exit(kwargs["stopped"], runtime.events))
        try:
            await registering.run_daemon(
                runtime,
                namespace=kwargs["namespace"],
                name=kwargs["name"],
                spec=kwargs["spec"],
                stopped=kwargs["stopped"],
            )
        finally:
            exiting.cancel()

    # Every handler below is a coroutine function: kopf runs a plain function in a thread of
    # its executor, where the rosters would change under a cycle reading them and a wake-up
    # (an asyncio.Event set off the loop's thread) would wait for the loop's next other wake.
    # The indexes: the bodies the watch streams delivered, filed for the cycles' lookups.
    @kopf.index(
        specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry, id=INDEXES[shelves.CONSUMERS]
    )
    async def index_consumer(**kwargs: Any) -> dict[Any, Any]:
        return {shelves.consumer_key(kwargs["namespace"], kwargs["name"]): kept(kwargs["body"])}

    @kopf.index(
        specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry, id=INDEXES[shelves.PEERS]
    )
    async def index_peer(**kwargs: Any) -> dict[Any, Any]:
        return peer_entry(kwargs["namespace"], kwargs["name"], kwargs["body"])

    @kopf.index("", "v1", "pods", registry=registry, id=INDEXES[shelves.PODS])
    async def index_pod(**kwargs: Any) -> dict[Any, Any]:
        body = kept(kwargs["body"], keep=shelves.kept_pod)
        keys = shelves.pod_keys(kwargs["namespace"], kwargs["labels"])
        return {key: body for key in keys}  # one object under every key

    @kopf.index(
        "",
        "v1",
        "configmaps",
        registry=registry,
        id=INDEXES[shelves.CONFIGMAPS],
        labels={configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY},
    )
    async def index_configmap(**kwargs: Any) -> dict[Any, Any]:
        key = shelves.configmap_key(kwargs["namespace"], kwargs["labels"])
        return {} if key is None else {key: kept(kwargs["body"])}

    @kopf.on.event(specs.GROUP, specs.VERSION, specs.PLURAL, registry=registry)
    async def consumer_changed(**kwargs: Any) -> None:
        body = kept(kwargs["body"])
        runtime.observed(shelves.CONSUMERS, body, kwargs["type"])
        key = (kwargs["namespace"], kwargs["name"])
        if kwargs["type"] == "DELETED":
            runtime.consumer_deleted(key, uid=(body.get("metadata") or {}).get("uid"))
        else:
            generation = (body.get("metadata") or {}).get("generation")
            runtime.consumer_changed(key, generation=generation)

    @kopf.on.event("", "v1", "pods", registry=registry)
    async def pod_changed(**kwargs: Any) -> None:
        runtime.observed(shelves.PODS, kept(kwargs["body"], keep=shelves.kept_pod), kwargs["type"])

    @kopf.on.event(
        "",
        "v1",
        "configmaps",
        registry=registry,
        labels={configmaps.LABEL_MANAGED_BY: configmaps.MANAGED_BY},
    )
    async def configmap_changed(**kwargs: Any) -> None:
        runtime.observed(shelves.CONFIGMAPS, kept(kwargs["body"]), kwargs["type"])

    return registry


async def note_exit(stopped: kopf.DaemonStopped, events: eventposts.Poster) -> None:
    """Tell ``events`` when kopf stops this daemon for the operator's exit: the Events' stop
    limit counts from then, beside the daemons' own (a SIGTERM behind an API server that
    hangs waited 6 s for the cycles in flight, then 5 s more for the Events)."""
    await stopped.wait()
    if stopped.reason is not None and kopf.DaemonStoppingReason.OPERATOR_EXITING in stopped.reason:
        events.stopping(now=asyncio.get_running_loop().time())


def kept(
    body: Mapping[str, Any], *, keep: Callable[[shelves.Body], shelves.Body] = shelves.kept
) -> dict[str, Any]:
    """A plain dict of kopf's body (its view resolves every key it is asked for, and the
    rosters ask a few keys of every event), as the cache keeps it (`shelves.kept`,
    `shelves.kept_pod`)."""
    trimmed = keep(dict(body))
    return trimmed if isinstance(trimmed, dict) else dict(trimmed)


def peer_entry(namespace: str, name: str, body: Mapping[str, Any]) -> dict[Any, Any]:
    """The peers index's entry of one EventHubConsumer: its summary, parsed once per watch
    event rather than once per other consumer's cycle."""
    return {shelves.peer_key(namespace): conflicts.peer(body, namespace=namespace, name=name)}
