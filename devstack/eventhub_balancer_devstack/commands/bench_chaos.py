"""``ehb bench chaos``: the chaos run with its strict recovery bound (prints the report)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes

COMMAND = ("bench", "chaos")
HELP = "inject faults on the local stack and check that no event is lost or epoch reused"
DESCRIPTION = (
    "Kill and replace pods, restart the operator, inject blob faults, drop connections, send "
    "poison events, hang a handler, pause the Kubernetes API, kill a pod mid-fence, change "
    "the spec, delay, silence and re-list watches for a while; report lost events, checkpoint "
    "regressions, writer conflicts, epochs given twice or going down, and recovery time. "
    "Exits 1 when the report is not ok."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--seconds",
        type=flagtypes.number(float, positive=True),
        default=40.0,
        help="how long faults are injected (40)",
    )
    parser.add_argument("--seed", type=int, default=1, help="the seed of the fault schedule (1)")
    parser.add_argument(
        "--faults",
        default="all",
        help="the fault kinds, comma-separated (all): kill, delete, operator, blob, amqp, "
        "poison, hang, apipause, midfence, specchange, watchlag, relist, watchstall "
        "(watchlag delays watch events 75 s and watchstall silences the pod watches 80 s: "
        "give them --seconds 150 or more)",
    )
    parser.add_argument(
        "--gap",
        default="1,3",
        help="seconds between two faults, MIN,MAX (1,3); above 60 (--gap 62,68) a watchlag "
        "run has the operator write, stay quiet past its 60 s wait for echoes, then write",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep records and pod logs here"
    )
    parser.add_argument(
        "--kube",
        choices=("local", "real"),
        default="local",
        help="the Kubernetes API: local (the default) or real (kube-apiserver, "
        "kube-controller-manager and etcd). A real server has no pause or watch faults on "
        "demand: with real, 'all' leaves out apipause, watchlag, relist and watchstall",
    )


def parse_gap(text: str) -> tuple[float, float]:
    """``--gap 1,3`` -> (1.0, 3.0): the range of seconds between two faults."""
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise errors.InvalidInput("--gap", f"{text!r} is not MIN,MAX in seconds") from None
    if not 0 < low <= high:
        raise errors.InvalidInput("--gap", f"{text!r}: need 0 < MIN <= MAX")
    return low, high


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack import chaos, chaosfaults, terminalviews
    from eventhub_balancer_devstack.commands import demo

    options = chaosfaults.ChaosOptions(
        duration_s=args.seconds,
        seed=args.seed,
        faults=chaosfaults.parse_faults(args.faults, kube=args.kube),
        gap_s=parse_gap(args.gap),
        work_dir=args.work_dir,
        kube=args.kube,
    )
    demo.check_work_dir(args.work_dir)
    view = terminalviews.LiveView(sys.stderr, tty=False)
    report = chaos.run(options, observer=view)
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>24}  {value}")
    return 0 if report["ok"] else 1
