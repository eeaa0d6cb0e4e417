"""``ehb bench balance``: the SDK's balancing and ours through the same scenario, side by side."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer.cli import flagtypes

if TYPE_CHECKING:
    from eventhub_balancer_devstack.benchmarks import balancing

COMMAND = ("bench", "balance")
HELP = "compare the SDK's balancer with eventhub-balancer on the demo's scenario"
DESCRIPTION = (
    "Run the demo's scenario with the SDK's EventProcessorClient and with eventhub-balancer "
    "on one local stack; compare time to balance, moves, duplicates and lost events."
)
#: The group's line in ``ehb --help``.
GROUP_HELP = "benchmarks that print figures (--json: one JSON document on stdout)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="8 -> 10 partitions, 100 events/s, a 2 s cycle: about 2 minutes",
    )
    parser.add_argument("--partitions", type=int, default=None, help="partitions at the start (32)")
    parser.add_argument(
        "--grow-to",
        type=int,
        default=None,
        help="partitions after growth (default: a quarter more than --partitions, 40 for 32)",
    )
    parser.add_argument(
        "--rate",
        type=flagtypes.number(float, positive=True),
        default=None,
        help="events per second (300)",
    )
    parser.add_argument(
        "--interval",
        type=int,
        default=None,
        help="our intervalSeconds and the SDK's load_balancing_interval (5)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep records and pod logs here"
    )
    parser.add_argument(
        "--kube",
        choices=("local", "real"),
        default="local",
        help="the Kubernetes API: local (this project's, the default) or real (kube-apiserver, "
        "kube-controller-manager and etcd; `make controlplane` builds them)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack import terminalviews
    from eventhub_balancer_devstack.benchmarks import balancing
    from eventhub_balancer_devstack.commands import demo

    base = balancing.QUICK if args.quick else balancing.Settings()
    changes: dict[str, object] = {"work_dir": args.work_dir, "kube": args.kube}
    for flag, field in (
        ("partitions", "partitions"),
        ("grow_to", "grow_to"),
        ("rate", "rate"),
        ("interval", "interval_seconds"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
    if args.partitions is not None and args.grow_to is None:
        changes["grow_to"] = demo.grown(args.partitions)
    settings = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    demo.check_scenario(
        partitions=settings.partitions,
        grow_to=settings.grow_to,
        rate=settings.rate,
        interval=settings.interval_seconds,
    )
    demo.check_work_dir(args.work_dir)
    if args.work_dir is not None:
        demo._log_to_file(args.work_dir / "bench.log")
    view = terminalviews.LiveView(sys.stderr, tty=False)
    report = balancing.run(settings, observer=view)
    if args.json:
        print(json.dumps(report))
        return 0
    for line in format_report(report):
        print(line)
    return 0


def format_report(report: balancing.Report) -> list[str]:
    lines = [
        "balanced: from every pod of the step being up to balanced (end to end: from the step's"
        " action)",
        f"{'step':<26} {'balanced s SDK/ours':>20} {'ratio':>6} {'end to end SDK/ours':>20} "
        f"{'failover SDK/ours':>18} {'moved':>7} {'duplicates':>11} {'lost':>7}",
    ]
    for step in report["steps"]:
        sdk, ours = step["sdk"], step["ours"]
        lines.append(
            f"{step['step']:<26} {_s(sdk['balanced_s']):>9} / {_s(ours['balanced_s']):<8} "
            f"{_r(step['ratio']):>6} {_s(sdk['end_to_end_s']):>9} / {_s(ours['end_to_end_s']):<8} "
            f"{_f(sdk['failover_s']):>8} / {_f(ours['failover_s']):<7} "
            f"{sdk['moved']:>3}/{ours['moved']:<3} {sdk['duplicates']:>5}/{ours['duplicates']:<5} "
            f"{sdk['lost']:>3}/{ours['lost']:<3}"
        )
    lines.append(
        f"SDK/ours over the steps both balanced: {_r(report['ratio_balanced_s'])} "
        f"({_r(report['ratio_end_to_end_s'])} end to end)"
    )
    for name, target in report["targets"].items():
        lines.append(
            f"target {name}: {target['target']}, measured {target['measured']}: {_met(target)}"
        )
    from eventhub_balancer_devstack.benchmarks import stages

    lines.append("ours, stage by stage (median / max):")
    lines += stages.format_table([(s["step"], s["stages"]) for s in report["steps"]])
    return lines


def _met(target: balancing.Target) -> str:
    if target["met"] is None:
        return f"not judged ({target.get('not_judged', 'not at this size')})"
    return "met" if target["met"] else "MISSED"


def _s(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.2f}"


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"
