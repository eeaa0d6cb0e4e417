"""How fast the operator moves partitions, and what it costs, at the size of a fleet.

The claims the project makes against the SDKs' own balancing (docs/index.md, "Why") are
about time and API load: a pod that joins is balanced within one cycle plus the hand-off, a
deleted pod's partitions are reassigned within 2 s, a steady state costs the API server
nothing. This module measures them with everything real except the pods: the local
Kubernetes API, the Event Hubs emulator and the operator itself (kopf, adapters, handlers),
for one EventHubConsumer or for many on one operator (``consumers``).

The API server, the operator and the consumer doubles run as processes of their own
(`processes`), so that what is measured is the operator's: its CPU time per cycle, its
resident memory, the requests it makes per steady cycle (reads and writes; kopf's watch
streams are long requests renewed every few minutes and not counted). The doubles and this
harness watch the ConfigMaps; nobody polls the API server. Pods are Pod objects whose status
the harness sets; the doubles acknowledge revocations as the consumer runtime does.

Times run from the moment the API server holds the change (the call returned) to the moment
the ConfigMaps, which is what the pods act on, show the result. A joining pod is created
NotReady and turned Ready once the operator wrote its empty ConfigMap, as a real pod's start-up
leaves it time to: the join counts from the readiness. The rounds run on the first consumer;
with several, the others are the fleet around it.

The namespace may hold the pods of other workloads too (``other_pods``, `otherworkloads`),
created before the operator starts, which watches them all unless ``pod_selector`` narrows
its pod watch to the consumer pods (`clusterviews.CONSUMER_PODS`). What they cost shows in the
operator's peak memory and in its first balance, timed from the start of its process.

``stages`` says where a join's, a planned leave's and a deletion's time went, over the rounds
(`stages`: the API server's commit times and the operator's cycle lines). The doubles keep no
checkpoints and open no links: those stages are the consumer benchmark's and `ehb bench
balance`'s, and absent here.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from typing import Any

from eventhub_balancer.contracts import specs
from eventhub_balancer_devstack import clusters
from eventhub_balancer_devstack.benchmarks import (
    benchstacks,
    clusterviews,
    operatorreports,
    otherworkloads,
    processes,
    stagerecords,
    stages,
    watching,
)

logger = logging.getLogger(__name__)

#: The bench's namespace and first EventHubConsumer (and hub).
NAMESPACE = "bench"
CONSUMER = clusters.CONSUMER
#: Parallel calls of the harness's setup (hundreds of pods are created at once).
SETUP_WORKERS = 8
#: After a forced re-list, the operator's LISTs are counted until none came for this long
#: (more than an interval: every consumer has had its cycle).
RELIST_QUIET_SECONDS = 5.0
#: The watches the forced re-list breaks (as `tracking.Tracking` names them).
RELISTED_KINDS = ("pods", "configmaps")


def consumer_name(i: int) -> str:
    return CONSUMER if i == 0 else f"{CONSUMER}-{i}"


def _reachable(cluster: clusterviews.Cluster) -> bool:
    """Every EventHubConsumer has listed its partitions (a steady state has no fault left)."""
    listing: Any = cluster.custom.list_namespaced_custom_object(
        specs.GROUP, specs.VERSION, cluster.namespace, specs.PLURAL
    )
    return all(
        any(
            c.get("type") == "EventHubReachable" and c.get("status") == "True"
            for c in (item.get("status") or {}).get("conditions") or []
        )
        for item in listing.get("items", [])
    )


def _wait_stats(operator: processes.Child, cycles: int, timeout: float) -> dict[str, Any]:
    """The operator's counters once it has run ``cycles`` more cycles and posted every Event
    its cycles handed over (`eventposts`: they are the requests of the cycles before)."""
    start = operator.stats()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = operator.stats()
        if now["cycles"] >= start["cycles"] + cycles and not now["events_pending"]:
            return now
    raise TimeoutError(f"timed out after {timeout} s waiting for {cycles} operator cycles")


def run(settings: operatorreports.Settings) -> operatorreports.Report:
    if settings.pods < 2 or settings.partitions < settings.pods + 1:
        raise ValueError("need at least 2 pods and more partitions than pods + 1")
    ns, p = NAMESPACE, settings.partitions
    names = [consumer_name(i) for i in range(settings.consumers)]
    hubs = [f"{consumer_name(i)}={settings.partitions}" for i in range(settings.consumers)]
    with benchstacks.started(hubs=hubs, kube=settings.kube) as (
        kubeconfig,
        connection_string,
        store,
        server,
    ):
        api = watching.client(kubeconfig)
        cluster = clusterviews.Cluster(api, ns)
        cluster.ensure_namespace()
        view, stopped = clusterviews.View(), threading.Event()
        watcher = threading.Thread(
            target=watching.watch_configmaps, args=(api, ns, stopped, view.on_body), daemon=True
        )
        watcher.start()
        cluster.credentials(hubs=connection_string, store=store)
        members = {f"c-{i}" for i in range(settings.pods)}
        with concurrent.futures.ThreadPoolExecutor(SETUP_WORKERS) as pool:
            for i, name in enumerate(names):
                cluster.consumer(
                    name,
                    app=operatorreports.consumer_app(i),
                    secret="eh",
                    interval=settings.interval_seconds,
                )
            list(pool.map(cluster.other_pod, range(settings.other_pods)))
            list(
                pool.map(
                    lambda job: cluster.pod(job[1], app=job[0]),
                    [
                        (operatorreports.consumer_app(i), f"{n}-{m}")
                        for i, n in enumerate(names)
                        for m in members
                    ],
                )
            )
        other_pod_bytes = cluster.pod_bytes(otherworkloads.name(0)) if settings.other_pods else None
        pods_list_bytes = cluster.pods_list_bytes()
        doubles = processes.Child("doubles", "--kubeconfig", str(kubeconfig), "--namespace", ns)
        selecting = ("--pod-selector", settings.pod_selector) if settings.pod_selector else ()
        started = time.monotonic()
        operator = processes.Child(
            "operator", "--kubeconfig", str(kubeconfig), "--namespace", ns, *selecting
        )
        try:
            for name in names:
                pods = {f"{name}-{m}" for m in members}
                clusters.wait_for(
                    functools.partial(view.balanced_over, name, pods, p),
                    # An operator that watches every pod reads them all before its first cycle.
                    timeout=clusters.WAIT_SECONDS + settings.consumers + settings.other_pods / 200,
                    what=f"initial balance of {name}",
                )
            first_balance_s = time.monotonic() - started
            interval = settings.interval_seconds
            clusters.wait_for(
                lambda: _reachable(cluster),
                timeout=clusters.WAIT_SECONDS + settings.consumers,
                what="every consumer's partitions listed",
                # One LIST of every CR per poll: at 1,000 consumers a poll every 0.5 s kept
                # the API server busier than the operator it measures.
                poll=max(0.5, settings.consumers / 200),
            )
            cycles = settings.steady_cycles * settings.consumers
            # Every consumer's cycle also reads its hub's ends and its blobs once a minute: on
            # 2 cores a thousand consumers take longer than an interval to come round.
            slack = clusters.WAIT_SECONDS + settings.consumers * 0.1
            # Let the last status writes of the initial cycles land before counting, and the
            # Events they handed over be posted (a start of 128 pods hands over 128).
            before = _wait_stats(operator, settings.consumers, interval * 2 + slack)
            before_at = time.monotonic()
            after = _wait_stats(operator, cycles, settings.steady_cycles * interval * 2 + slack)
            after_at = time.monotonic()
            steady_cycles = after["cycles"] - before["cycles"]
            rounds = []
            serial = settings.pods
            pods = {f"{CONSUMER}-{m}" for m in members}
            server.ask("record")  # the records start with the rounds
            operator.ask("cycles")
            start = operator.stats()
            for _ in range(settings.rounds):
                figures, pods = _round(cluster, view, pods, p, serial)
                rounds.append(figures)
                serial += 2
            end = operator.stats()
            stage_durations = _stages(server, operator, rounds)
            relist_lists = _forced_relist(server, operator, settings)
            # kopf lists every pod it watches again while it still holds them: a peak of its own.
            relist_peak_rss_mb = float(operator.stats()["peak_rss_mb"])
        finally:
            operator.stop()
            doubles.stop()
            stopped.set()
    return operatorreports.Report(
        settings=settings,
        rounds=tuple(rounds),
        steady_writes=after["writes"] - before["writes"],
        # The cycles' requests; the periodic relisting of pods runs beside them and is
        # counted on its own.
        steady_requests=(after["requests"] - before["requests"])
        - (after["relistings"] - before["relistings"]),
        steady_relistings=after["relistings"] - before["relistings"],
        steady_seconds=after_at - before_at,
        steady_cpu_s=after["cpu_s"] - before["cpu_s"],
        steady_cycles=steady_cycles,
        cycle_cpu_s=(end["cpu_s"] - start["cpu_s"]) / max(1, end["cycles"] - start["cycles"]),
        rss_mb=float(end["rss_mb"]),
        peak_rss_mb=float(end["peak_rss_mb"]),
        relist_peak_rss_mb=relist_peak_rss_mb,
        first_balance_s=first_balance_s,
        other_pod_bytes=other_pod_bytes,
        pods_list_bytes=pods_list_bytes,
        relist_lists=relist_lists,
        stage_durations=stage_durations,
    )


def _stages(
    server: processes.Child, operator: processes.Child, rounds: list[operatorreports.Round]
) -> dict[str, dict[str, list[float]]]:
    """Each kind of step's stage durations over the rounds, from the API server's record of
    its commits and the operator's cycle lines."""
    taken = server.ask("writes")
    if taken["dropped"]:
        logger.warning("%d writes fell out of the API server's record", taken["dropped"])
    pods, maps = stagerecords.commits(tuple(w) for w in taken["writes"])
    cycles = [stagerecords.Cycle(**c) for c in operator.ask("cycles")["cycles"]]
    records = stages.Records(pods=pods, maps=maps, cycles=cycles)
    scope = stages.Scope(
        namespace=NAMESPACE, consumer=CONSUMER, labels={"app": operatorreports.consumer_app(0)}
    )
    found: dict[str, dict[str, list[float]]] = {}
    for r in rounds:
        for step, (start, end) in r.windows.items():
            found[step] = stages.merge(
                found.get(step, {}), stages.durations(records, scope, start=start, end=end)
            )
    return found


def _forced_relist(
    server: processes.Child, operator: processes.Child, settings: operatorreports.Settings
) -> int:
    """The operator's LISTs after the API server breaks every pod and ConfigMap watch and
    answers their resumes with 410 Gone: kopf lists both kinds again, and each consumer reads
    what it may have missed. Counted until both kinds' watches have listed again
    (`RELISTED_KINDS`), every consumer has cycled twice since on average (a cycle woken by
    the first kind's re-list may have begun before the second's), and no LIST came for
    `RELIST_QUIET_SECONDS`: kopf hands the operator a listing of thousands of pods for
    longer than the quiet, and the cycles' reads come after it.

    The pods listed afresh every 10 s beside the cycles (``relistings``) are left out, as in
    the steady count: on the real control plane the re-list is a kube-apiserver restart of
    seconds, and the periodic relisting falls into it, failed or not."""
    start = operator.stats()
    before = start["lists"] - start["relistings"]
    # On the real control plane this restarts kube-apiserver: seconds, not a fault's instant.
    server.ask("relist", timeout=processes.START_SECONDS)
    deadline = time.monotonic() + clusters.WAIT_SECONDS + settings.consumers * 0.1
    deadline += settings.other_pods / 200
    last, quiet_since = before, time.monotonic()
    cycled_from: int | None = None  # the cycles run when both kinds had listed again
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = operator.stats()
        lists = now["lists"] - now["relistings"]
        if cycled_from is None and all(
            now["relists"].get(kind, 0) > start["relists"].get(kind, 0) for kind in RELISTED_KINDS
        ):
            cycled_from = now["cycles"]
        cycled = cycled_from is not None and now["cycles"] - cycled_from >= 2 * settings.consumers
        if lists != last:
            last, quiet_since = lists, time.monotonic()
        elif cycled and lists > before and time.monotonic() - quiet_since >= RELIST_QUIET_SECONDS:
            logger.info(
                "after the forced re-list: %d LISTs of the consumers, %d of the periodic"
                " relisting (left out)",
                lists - before,
                now["relistings"] - start["relistings"],
            )
            return int(lists - before)
    raise TimeoutError("the operator's LISTs after a forced re-list did not settle")


def _round(
    cluster: clusterviews.Cluster, view: clusterviews.View, members: set[str], p: int, serial: int
) -> tuple[operatorreports.Round, set[str]]:
    """On the first consumer: join one pod, let it leave gracefully, delete another outright,
    refill: the members after the round are as many as before."""
    app = operatorreports.consumer_app(0)
    joiner = f"{CONSUMER}-c-{serial}"
    windows: dict[str, tuple[float, float]] = {}
    # A real pod takes a second or more from its creation to Ready, and the operator writes
    # its empty ConfigMap meanwhile: the join is timed from the readiness, as `ehb bench
    # balance` times it from every pod being up.
    cluster.pod(joiner, app=app, ready=False)
    clusters.wait_for(lambda: joiner in view.pods(CONSUMER), what=f"{joiner}'s ConfigMap")
    wall = time.time()
    cluster.make_ready(joiner)
    started = time.monotonic()
    grown = members | {joiner}
    clusters.wait_for(lambda: view.balanced_over(CONSUMER, grown, p), what=f"{joiner} joined")
    join_s = time.monotonic() - started
    windows["join"] = (wall, time.time())

    wall = time.time()
    cluster.terminate(joiner)
    started = time.monotonic()
    clusters.wait_for(lambda: view.balanced_over(CONSUMER, members, p), what=f"{joiner} drained")
    leave_s = time.monotonic() - started
    windows["planned_leave"] = (wall, time.time())
    cluster.delete_pod(joiner)
    clusters.wait_for(
        lambda: joiner not in view.pods(CONSUMER), what=f"{joiner}'s ConfigMap deleted"
    )

    victim = min(members)
    wall = time.time()
    cluster.delete_pod(victim)
    started = time.monotonic()
    rest = members - {victim}
    clusters.wait_for(
        lambda: view.owned(CONSUMER, rest) == p, what=f"{victim}'s partitions reassigned"
    )
    deleted_s = time.monotonic() - started
    windows["deleted_pod"] = (wall, time.time())

    refill = f"{CONSUMER}-c-{serial + 1}"
    cluster.pod(refill, app=app)
    after = rest | {refill}
    clusters.wait_for(lambda: view.balanced_over(CONSUMER, after, p), what=f"{refill} joined")
    return operatorreports.Round(
        join_s=join_s, leave_s=leave_s, deleted_s=deleted_s, windows=windows
    ), after
