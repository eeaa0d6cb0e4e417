"""``ehb operator``: run the operator (kopf) with its metrics and liveness endpoint.

The metrics name every tenant's consumers, pods and backlogs, so by default they are served
over HTTPS to callers the cluster's RBAC allows ``get`` on ``/metrics`` (TokenReview and
SubjectAccessReview, `adapters.metricsaccess`); plain HTTP only on loopback, behind a proxy.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import sys
import threading
import time
from typing import TYPE_CHECKING

from eventhub_balancer.cli import flagtypes
from eventhub_balancer.contracts import endpoints, labelselectors, namespacepatterns
from eventhub_balancer.reconciling import conflicts

if TYPE_CHECKING:
    from eventhub_balancer.adapters import accessreviews, eventhubs, kubeapi
    from eventhub_balancer.handlers import registering, running

logger = logging.getLogger(__name__)

COMMAND = ("operator",)
HELP = "run the operator: balance every EventHubConsumer's partitions over its pods"
#: Once the operator has stopped, the Kubernetes API requests still in flight get this long to
#: end. Nothing awaits their answers any more (the cycles that made them were stopped), but
#: the interpreter joins their threads at exit: behind an API server that does not answer,
#: each waits out its timeout on every attempt the client makes (four of 15 s), and the
#: operator outlived its SIGTERM by a minute instead of the seconds its daemons take.
EXIT_SECONDS = 1.0
#: kopf's logger of the objects it handles. Its INFO lines are one per watch event (each watch
#: handler's success, ``Handler '...pod_changed' succeeded.``), for every pod of the namespaces
#: served, other workloads' included: below -vv they are not shown, its warnings and errors are.
KOPF_OBJECTS_LOGGER = "kopf.objects"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="serve this namespace (repeatable); a kopf pattern (team-*, !kube-system) "
        "needs the right to list and watch namespaces, a plain name does not",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="serve every namespace (cluster-wide)"
    )
    parser.add_argument(
        "--pod-selector",
        default="",
        metavar="SELECTOR",
        help="watch only the pods this label selector matches, as kubectl -l writes it "
        f"(e.g. {labelselectors.CONSUMER_PODS}, which the consumer chart's pods carry); a "
        "consumer's pods outside it are not its members (default: every pod)",
    )
    parser.add_argument(
        "--peering",
        metavar="NAME",
        type=_peering_name,
        default=None,
        help="kopf peering object: of several replicas only the highest priority acts",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="no peering: this replica acts regardless of others",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: the earlier a replica started, the higher, so that "
        "a replica starting never takes over from the one acting; never two alike)",
    )
    metrics = parser.add_argument_group(
        "metrics and liveness (/metrics for whom RBAC allows get on it, /healthz for probes)"
    )
    metrics.add_argument(
        "--metrics-port",
        type=flagtypes.port(),
        default=8443,
        help="port of /metrics and /healthz (0: any free port; default 8443)",
    )
    metrics.add_argument(
        "--metrics-host",
        type=flagtypes.listen_address,
        default="0.0.0.0",
        help="address to serve them on",
    )
    metrics.add_argument(
        "--metrics-cert-dir",
        type=flagtypes.given(
            "a folder",
            "give the one with tls.crt and tls.key, or drop the flag for a self-signed certificate",
        ),
        default=None,
        metavar="DIR",
        help="tls.crt and tls.key for the metrics port (default: a self-signed certificate)",
    )
    metrics.add_argument(
        "--metrics-insecure",
        action="store_true",
        help="plain HTTP and no TokenReview/SubjectAccessReview: only on a loopback "
        "--metrics-host, behind an authenticating proxy (or the local stack)",
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig (default: in-cluster or $KUBECONFIG)"
    )
    parser.add_argument(
        "--partition-refresh-seconds",
        type=_seconds,
        default=60.0,
        help="re-read partition ids at least this often (default 60)",
    )
    trust = parser.add_argument_group("where the operator's identity may go")
    trust.add_argument(
        "--allowed-eventhub-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help="a DNS suffix an EventHubConsumer's Event Hubs host may have (repeatable; default "
        ".servicebus.windows.net; add a sovereign cloud's, e.g. .servicebus.chinacloudapi.cn)",
    )
    trust.add_argument(
        "--allowed-blob-suffix",
        action="append",
        default=[],
        metavar="SUFFIX",
        help="a DNS suffix a checkpoint store's Blob host may have (repeatable; default "
        ".blob.core.windows.net)",
    )
    trust.add_argument(
        "--allow-development-endpoints",
        action="store_true",
        help="also allow connection strings to the local emulators on loopback (local stack)",
    )
    tenancy = parser.add_argument_group("what belongs to which namespace")
    tenancy.add_argument(
        "--identity-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="a namespace whose EventHubConsumers may use the operator's own Azure identity "
        "(workload identity) to list partitions and read checkpoints (repeatable; a name or "
        "a glob such as team-*, no '!' or ','; default: none, every consumer names a Secret)",
    )
    tenancy.add_argument(
        "--bind-location",
        action="append",
        default=[],
        metavar="NS=HOST",
        help="bind an Event Hubs namespace's or a checkpoint account's host to one namespace: "
        "an EventHubConsumer of any other namespace that names it is refused (repeatable)",
    )
    parser.add_argument(
        "--annotate-pods",
        action="store_true",
        help="write eventhub-balancer.dev/partitions on each consumer pod (needs patch on pods)",
    )


#: Above every default priority until the year 2100 (milliseconds since 1970, times 1,024).
PRIORITY_CEILING = 2**52


def seniority(now_ms: int | None = None, rng: random.Random | None = None) -> int:
    """The default peering priority: the higher, the earlier the replica started. A replica
    that starts (a rollout's, or the one replacing a lost pod) stays a standby beside the one
    acting; with random priorities it took over when it drew higher, handing every consumer
    over a second time. Ten random low bits keep two replicas started in the same millisecond
    apart (kopf pauses every replica of a tie)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return PRIORITY_CEILING - ms * 1024 - (rng or random).randint(0, 1023)


def _seconds(raw: str) -> float:
    """A period in seconds: finite and above 0 (float() takes "nan" and "inf")."""
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of seconds above 0")
    return seconds


def _peering_name(raw: str) -> str:
    """``--peering``'s type: the name of a KopfPeering object, as the API server takes it."""
    from eventhub_balancer import errors
    from eventhub_balancer.contracts import specvalues

    try:
        return specvalues.object_name(
            raw,
            "--peering",
            "peering object",
            "that exists (a KopfPeering in each namespace served, the ClusterKopfPeering with -A)",
        )
    except errors.InvalidInput as e:
        raise argparse.ArgumentTypeError(e.problem) from None


def endpoint_policy(args: argparse.Namespace) -> endpoints.EndpointPolicy:
    """The hosts the operator sends credentials to, from the flags (public cloud by default)."""
    # The operator takes its suffixes from its flags alone (the chart's allowedEndpoints).
    eventhub, blob = endpoints.configured_suffixes(
        args.allowed_eventhub_suffix, args.allowed_blob_suffix, {}
    )
    return endpoints.EndpointPolicy(
        eventhub_suffixes=eventhub,
        blob_suffixes=blob,
        allow_development=bool(args.allow_development_endpoints),
        setting="the operator's --allowed-eventhub-suffix / --allowed-blob-suffix "
        "(chart value allowedEndpoints)",
    )


def identity_policy(args: argparse.Namespace) -> eventhubs.IdentityPolicy:
    """The namespaces lent the operator's own identity: only those listed (none by default)."""
    from eventhub_balancer.adapters import eventhubs  # the SDKs: only when the operator runs

    return eventhubs.IdentityPolicy(namespaces=identity_namespaces(args))


def identity_namespaces(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--identity-namespace`` values, each one name or one glob (`namespacepatterns`)."""
    return namespacepatterns.lent(args.identity_namespace)


def pod_scope(args: argparse.Namespace) -> labelselectors.Selector | None:
    """The pods the operator watches at all, from ``--pod-selector`` (None: every pod)."""
    selector = labelselectors.parse_query(args.pod_selector, field="--pod-selector")
    return selector if selector.to_query() else None


def bindings(args: argparse.Namespace) -> conflicts.Bindings:
    """The hosts bound to one namespace each, from ``--bind-location NS=HOST``."""
    return conflicts.Bindings.parse(args.bind_location, field="--bind-location")


def operator_runtime(args: argparse.Namespace, api: kubeapi.KubeAPI) -> registering.Operator:
    """The operator as the flags configure it, on ``api`` (tests start the same one)."""
    import os

    from eventhub_balancer.adapters import eventhubs, tenantidentities
    from eventhub_balancer.handlers import registering

    return registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(
            refresh_seconds=args.partition_refresh_seconds,
            endpoint_policy=endpoint_policy(args),
            identity_policy=identity_policy(args),
            # spec.serviceAccountName: tokens of the consumers' own ServiceAccounts; the
            # tenant of one without a tenant-id annotation is the operator's own.
            tenant_identities=tenantidentities.TenantIdentities(
                api, default_tenant_id=os.environ.get("AZURE_TENANT_ID")
            ),
        ),
        connection=api.connection_info,
        annotate_pods=bool(args.annotate_pods),
        bindings=bindings(args),
        pod_scope=pod_scope(args),
    )


def check_serving(args: argparse.Namespace) -> None:
    """What to serve, as the flags say it: at least one namespace, and plain metrics only on
    loopback. Checked before the kubeconfig is read (`run`)."""
    import ipaddress

    from eventhub_balancer import errors

    if not args.namespace and not args.all_namespaces:
        raise errors.InvalidInput(
            "--namespace", "give --namespace NS (repeatable) or --all-namespaces"
        )
    namespacepatterns.served(args.namespace)
    if args.metrics_insecure:
        try:
            loopback = ipaddress.ip_address(args.metrics_host).is_loopback
        except ValueError:
            loopback = args.metrics_host == "localhost"
        if not loopback:
            raise errors.InvalidInput(
                "--metrics-insecure",
                f"serves every tenant's metrics to anyone who reaches {args.metrics_host}: "
                "give --metrics-host 127.0.0.1 and an authenticating proxy in front, or drop "
                "the flag (HTTPS, TokenReview and SubjectAccessReview)",
            )


def serving_options(
    args: argparse.Namespace, *, reviews: accessreviews.AccessReviews | None
) -> running.Options:
    """What the operator serves, and where and to whom its metrics and liveness listen.

    ``reviews`` (None only with ``--metrics-insecure``) answers who may read /metrics."""
    from eventhub_balancer.adapters import metricsaccess
    from eventhub_balancer.handlers import running

    check_serving(args)
    middlewares = []
    tls = None
    if not args.metrics_insecure:
        assert reviews is not None, "the secure metrics port needs the access reviews"
        middlewares.append(metricsaccess.guard(reviews))
        tls = metricsaccess.server_context(args.metrics_cert_dir)
    return running.Options(
        namespaces=tuple(args.namespace),
        clusterwide=bool(args.all_namespaces),
        standalone=args.standalone or args.peering is None,
        peering_name=args.peering,
        priority=args.priority if args.priority is not None else seniority(),
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
        metrics_middlewares=tuple(middlewares),
        metrics_tls=tls,
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer import errors
    from eventhub_balancer.adapters import accessreviews, kubeapi
    from eventhub_balancer.cli import crddefinitions
    from eventhub_balancer.handlers import running

    # The flags that need no cluster are checked before anything connects.
    for check in (check_serving, endpoint_policy, identity_namespaces, bindings, pod_scope):
        check(args)
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger(KOPF_OBJECTS_LOGGER).setLevel(logging.WARNING)
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    reviews = None if args.metrics_insecure else accessreviews.AccessReviews(api.configuration)
    try:
        options = serving_options(args, reviews=reviews)
        runtime = operator_runtime(args, api)

        async def serve() -> None:
            await api.check_reachable()
            await crddefinitions.check(api, options)
            try:
                await running.serve(runtime, options)
            except errors.ResourceGone as e:  # a CRD deleted while it ran: which one
                raise await crddefinitions.gone(api, options, e) from e

        asyncio.run(serve())
    finally:
        if reviews is not None:
            reviews.close()
        api.close()
    leave_requests_behind(limit_seconds=EXIT_SECONDS)
    return 0


def leave_requests_behind(*, limit_seconds: float) -> None:
    """Wait ``limit_seconds`` at most for the threads still running (the API requests in
    flight); if some still are, exit now, without them (`EXIT_SECONDS` says why)."""
    deadline = time.monotonic() + limit_seconds
    others = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.current_thread() and not thread.daemon
    ]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = sum(thread.is_alive() for thread in others)
    if not left:
        return
    logger.warning(
        "stopped; %d Kubernetes API requests still in flight after %g s (the API server does "
        "not answer): exiting without their answers",
        left,
        limit_seconds,
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
