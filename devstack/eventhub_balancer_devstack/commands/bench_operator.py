"""`ehb bench operator`: hand-off and fail-over times and steady-state API writes (figures)."""

from __future__ import annotations

import argparse
import json

from eventhub_balancer import errors

COMMAND = ("bench", "operator")
HELP = (
    "Run the operator on the local stack and measure join, planned leave and deleted-pod "
    "times and the API writes per steady cycle."
)

#: The project's targets (docs/benchmarks.md): what the figures are judged against.
TARGET_DELETED_S = 2.0
TARGET_STEADY_WRITES = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--partitions", type=int, default=32, help="partitions of the hub (32)")
    parser.add_argument("--pods", type=int, default=4, help="consumer pods at the start (4)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="join/leave/delete rounds; medians count (3)"
    )
    parser.add_argument(
        "--interval", type=int, default=2, help="spec.balancing.intervalSeconds (2)"
    )
    parser.add_argument(
        "--steady-cycles", type=int, default=3, help="cycles over which steady writes count (3)"
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import operating

    if args.pods < 2:
        raise errors.InvalidInput("--pods", "must be at least 2 (one is deleted in each round)")
    if args.partitions <= args.pods:
        raise errors.InvalidInput("--partitions", "must be more than --pods")
    for flag, value in (
        ("--rounds", args.rounds),
        ("--interval", args.interval),
        ("--steady-cycles", args.steady_cycles),
    ):
        if value < 1:
            raise errors.InvalidInput(flag, "must be at least 1")
    settings = operating.Settings(
        partitions=args.partitions,
        pods=args.pods,
        rounds=args.rounds,
        interval_seconds=args.interval,
        steady_cycles=args.steady_cycles,
    )
    try:
        report = operating.run(settings)
    except TimeoutError as e:
        print(f"ehb: error: the operator did not get there: {e}")
        return 1
    figures = report.figures()
    if args.json:
        print(json.dumps(figures))
        return 0
    print(
        f"{settings.partitions} partitions, {settings.pods} pods, interval "
        f"{settings.interval_seconds} s, {settings.rounds} rounds (medians)"
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
    ]
    print(f"{'figure':<26}  {'measured':>10}  target")
    for name, value, target in rows:
        print(f"{name:<26}  {value:>10}  {target}")
    for i, r in enumerate(report.rounds, 1):
        print(
            f"  round {i}: join {r.join_s:.3f} s, leave {r.leave_s:.3f} s, "
            f"deleted {r.deleted_s:.3f} s"
        )
    return 0
