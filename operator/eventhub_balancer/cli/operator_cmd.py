"""``ehb operator``: run the operator (kopf) with its metrics and liveness endpoint."""

from __future__ import annotations

import argparse
import random

COMMAND = ("operator",)
HELP = "run the operator: balance every EventHubConsumer's partitions over its pods"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="serve this namespace (repeatable; glob patterns as in kopf)",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="serve every namespace (cluster-wide)"
    )
    parser.add_argument(
        "--peering",
        metavar="NAME",
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
        help="peering priority (default: random, so replicas never tie and freeze)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        help="port of /metrics and /healthz (0: any free port)",
    )
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address to serve metrics on")
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig (default: in-cluster or $KUBECONFIG)"
    )
    parser.add_argument(
        "--partition-refresh-seconds",
        type=float,
        default=60.0,
        help="re-read partition ids at least this often (default 60)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer.adapters import eventhubs, kubeapi
    from eventhub_balancer.handlers import registering, running

    if not args.namespace and not args.all_namespaces:
        from eventhub_balancer import errors

        raise errors.InvalidInput(
            "--namespace", "give --namespace NS (repeatable) or --all-namespaces"
        )
    api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
    runtime = registering.Operator(
        kube=api,
        hubs=eventhubs.EventHubs(refresh_seconds=args.partition_refresh_seconds),
        connection=api.connection_info,
    )
    standalone = args.standalone or args.peering is None
    options = running.Options(
        namespaces=tuple(args.namespace),
        clusterwide=bool(args.all_namespaces),
        standalone=standalone,
        peering_name=args.peering,
        priority=args.priority if args.priority is not None else random.randint(1, 2**31 - 1),
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
    )
    try:
        asyncio.run(running.serve(runtime, options))
    finally:
        api.close()
    return 0
