"""`ehb bench operator`: hand-off and fail-over times, steady-state API requests, the
operator's CPU per cycle and memory, for one EventHubConsumer or a fleet of them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eventhub_balancer_devstack.benchmarks.operatorreports import Settings

COMMAND = ("bench", "operator")
HELP = "measure the operator's reaction times, API requests, CPU and memory"
DESCRIPTION = (
    "Run the operator on the local stack (API server, operator and consumer doubles as "
    "processes of their own) and measure join, planned leave and deleted-pod times, the API "
    "requests per steady cycle, the operator's CPU per cycle and its memory."
)

#: The project's targets (docs/benchmarks.md): what the figures are judged against.
TARGET_DELETED_S = 2.0
TARGET_STEADY_WRITES = 0.0
TARGET_STEADY_REQUESTS = 0.0
#: After one forced re-list of the pod and ConfigMap watches: one LIST of each per consumer.
TARGET_RELIST_LISTS = 2.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--partitions", type=int, default=32, help="partitions of each hub (32)")
    parser.add_argument(
        "--pods", type=int, default=4, help="consumer pods at the start, per consumer (4)"
    )
    parser.add_argument(
        "--consumers",
        type=int,
        default=1,
        help="EventHubConsumers on the one operator, each with its own hub (1)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="join/leave/delete rounds; medians count (3)"
    )
    parser.add_argument(
        "--interval", type=int, default=2, help="spec.balancing.intervalSeconds (2)"
    )
    parser.add_argument(
        "--steady-cycles", type=int, default=3, help="cycles over which steady writes count (3)"
    )
    parser.add_argument(
        "--kube",
        choices=("local", "real"),
        default="local",
        help="the Kubernetes API: local (the default) or real (kube-apiserver, "
        "kube-controller-manager and etcd; the re-list is then a restart of kube-apiserver)",
    )
    parser.add_argument(
        "--other-pods",
        type=int,
        default=0,
        metavar="N",
        help="pods of other workloads in the namespace, created before the operator starts "
        "(three containers each, with env, ports, probes and mounts; no consumer selects "
        "them) (0)",
    )
    parser.add_argument(
        "--pod-selector",
        metavar="SELECTOR",
        help="the operator's --pod-selector, as kubectl -l writes it: the only pods it "
        "watches; the consumer pods carry app.kubernetes.io/part-of=eventhub-balancer "
        "(default: every pod)",
    )


def settings_of(args: argparse.Namespace) -> Settings:
    """The run's settings; `errors.InvalidInput` naming the flag to change."""
    from eventhub_balancer_devstack.benchmarks import operatorreports

    return operatorreports.Settings(
        partitions=args.partitions,
        pods=args.pods,
        consumers=args.consumers,
        rounds=args.rounds,
        interval_seconds=args.interval,
        steady_cycles=args.steady_cycles,
        kube=args.kube,
        other_pods=args.other_pods,
        # As ``ehb operator``'s: an empty selector selects every pod.
        pod_selector=args.pod_selector or None,
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import operating

    settings = settings_of(args)
    try:
        report = operating.run(settings)
    except TimeoutError as e:
        print(f"ehb: error: the operator did not get there: {e}", file=sys.stderr)
        return 1
    figures = report.figures()
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"{settings.consumers} consumer(s) x {settings.partitions} partitions x "
        f"{settings.pods} pods, interval "
        f"{settings.interval_seconds} s, {settings.rounds} rounds (medians)"
    )
    print(
        f"{settings.other_pods} pods of other workloads beside them "
        f"({figures['pods_list_bytes'] / 1e6:.1f} MB of pods LIST); the operator watches "
        + (f"the pods of {settings.pod_selector}" if settings.pod_selector else "every pod")
    )
    rows = [
        ("join balanced", f"{figures['join_balanced_s']:.3f} s", "one cycle + the hand-off"),
        ("planned leave balanced", f"{figures['planned_leave_balanced_s']:.3f} s", "-"),
        (
            "deleted pod reassigned",
            f"{figures['deleted_pod_reassigned_s']:.3f} s",
            f"< {TARGET_DELETED_S:g} s",
        ),
        (
            "steady-state writes/cycle",
            f"{figures['steady_state_writes_per_cycle']:g}",
            f"{TARGET_STEADY_WRITES:g}",
        ),
        (
            "steady-state requests/cycle",
            f"{figures['steady_state_requests_per_cycle']:g}",
            f"{TARGET_STEADY_REQUESTS:g}",
        ),
        ("operator CPU per cycle", f"{figures['cycle_cpu_ms']:.2f} ms", "-"),
        ("operator CPU, steady", f"{figures['steady_cpu_cores']:.2f} cores", "-"),
        ("first balance", f"{figures['first_balance_s']:.3f} s", "-"),
        ("operator resident memory", f"{figures['operator_rss_mb']:.0f} MB", "-"),
        ("operator peak memory", f"{figures['operator_peak_rss_mb']:.0f} MB", "-"),
        ("peak memory after re-list", f"{figures['relist_peak_rss_mb']:.0f} MB", "-"),
        (
            "LISTs per consumer, re-list",
            f"{figures['relist_lists_per_consumer']:g}",
            f"<= {TARGET_RELIST_LISTS:g}",
        ),
    ]
    print(f"{'figure':<28}  {'measured':>10}  target")
    for name, value, target in rows:
        print(f"{name:<28}  {value:>10}  {target}")
    for i, r in enumerate(report.rounds, 1):
        print(
            f"  round {i}: join {r.join_s:.3f} s, leave {r.leave_s:.3f} s, "
            f"deleted {r.deleted_s:.3f} s"
        )
    from eventhub_balancer_devstack.benchmarks import stages

    print("stage by stage, over the rounds (median / max):")
    for line in stages.format_table(list(figures["stages"].items())):
        print(line)
    return 0
