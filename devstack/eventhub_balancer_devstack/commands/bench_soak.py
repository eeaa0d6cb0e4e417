"""``ehb bench soak``: one consumer under steady traffic for minutes (``benchmarks.soaking``),
or with ``--operator`` the operator under churn (``benchmarks.churning``); what it holds, and
its slope, so that growth shows before a pod runs for weeks or an operator for months."""

from __future__ import annotations

import argparse
import json
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes

COMMAND = ("bench", "soak")
HELP = "sample a consumer's or the operator's memory, threads and descriptors over time"
DESCRIPTION = (
    "Run one consumer under steady traffic on the local stack (or with --operator the "
    "operator under churn of pods, ConfigMaps and consumers) and sample its memory, threads "
    "and descriptors; report the slopes over the second half."
)

#: The partitions when --partitions is not given: a consumer pod's share, an operator's hub.
CONSUMER_PARTITIONS = 4
OPERATOR_PARTITIONS = 32
RATE = 1000.0
#: The consumer's pods in an operator's soak when --pods is not given.
OPERATOR_PODS = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument(
        "--seconds",
        type=flagtypes.number(float, positive=True),
        default=600.0,
        help="seconds of traffic or churn (default 600)",
    )
    parser.add_argument(
        "--rate",
        type=flagtypes.number(float, positive=True),
        default=None,
        help=f"events/s (default {RATE:g}; not --operator)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=None,
        help=f"partitions (default {CONSUMER_PARTITIONS}, with --operator {OPERATOR_PARTITIONS})",
    )
    parser.add_argument(
        "--sample-seconds",
        type=flagtypes.number(float, positive=True),
        default=5.0,
        help="seconds between samples (default 5)",
    )
    parser.add_argument(
        "--spark", action="store_true", help="run the consumer in Spark mode (local[2])"
    )
    parser.add_argument(
        "--operator",
        action="store_true",
        help="soak the operator instead: pods join, drain, are deleted, ConfigMaps are deleted "
        "and overwritten, consumers come and go",
    )
    parser.add_argument(
        "--pods",
        type=int,
        default=None,
        help=f"with --operator: the consumer's pods (default {OPERATOR_PODS})",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="with --operator: trace the operator's allocations and report what grew between "
        "a fifth of the run and its end (slower; its slopes are not the figures)",
    )


def run(args: argparse.Namespace) -> int:
    if args.operator:
        return _operator(args)
    # A consumer's soak has one pod: an operator's flag would be ignored without a word.
    for flag, given in (("--tracemalloc", args.tracemalloc), ("--pods", args.pods is not None)):
        if given:
            raise errors.InvalidInput(flag, "goes with --operator")
    from eventhub_balancer_devstack.benchmarks import soaking

    report = soaking.run(
        soaking.Settings(
            seconds=args.seconds,
            rate=RATE if args.rate is None else args.rate,
            partitions=CONSUMER_PARTITIONS if args.partitions is None else args.partitions,
            spark=args.spark,
            sample_seconds=args.sample_seconds,
        )
    )
    if args.json:
        # The figures are the result, met or not (``ok`` says): a recording keeps them either way.
        print(json.dumps(report))
        return 0
    print(
        f"{report['mode']} consumer, {report['rate']:g} events/s over {report['partitions']} "
        f"partitions for {report['seconds']:g} s"
    )
    _memory(report)
    print(
        f"sent {report['sent']}, processed {report['processed']}, lost {report['lost']}, "
        f"duplicates {report['duplicates']}; target {report['target_rss_mb_per_min']} MB/min: "
        + _verdict(report["ok"], report.get("not_judged"))
    )
    return 0


def _operator(args: argparse.Namespace) -> int:
    for flag, given in (("--spark", args.spark), ("--rate", args.rate is not None)):
        if given:
            raise errors.InvalidInput(flag, "is for a consumer's soak, not with --operator")
    from eventhub_balancer_devstack.benchmarks import churning

    report = churning.run(
        churning.Settings(
            seconds=args.seconds,
            partitions=OPERATOR_PARTITIONS if args.partitions is None else args.partitions,
            pods=OPERATOR_PODS if args.pods is None else args.pods,
            sample_seconds=args.sample_seconds,
            tracemalloc=args.tracemalloc,
        )
    )
    if args.json:
        print(json.dumps(report))
        return 0
    churned = report["churned"]
    print(
        f"operator, {report['partitions']} partitions x {report['pods']} pods, churned for "
        f"{report['seconds']:g} s: {churned['rounds']} rounds, {churned['joined']} pods joined, "
        f"{churned['drained']} drained, {churned['deleted']} deleted, "
        f"{churned['configmaps_deleted'] + churned['configmaps_overwritten']} ConfigMaps "
        f"deleted or overwritten, {churned['consumers_created']} consumers created and deleted"
    )
    _memory(report)
    print(
        f"target {report['target_rss_mb_per_min']} MB/min: "
        + _verdict(report["ok"], report.get("not_judged"))
        + (" (traced: not the figures)" if report["traced"] else "")
    )
    for growth in report["growths"]:
        print(f"  +{growth['kb']:.1f} KiB in {growth['count']:+d} blocks:")
        for where in growth["traceback"]:
            print(f"      {where}")
    return 0


def _memory(report: Any) -> None:
    print(
        f"resident memory: {report['rss_mb_mid']} MB at half time, "
        f"{report['rss_mb_end']} MB at the end"
    )
    for name, value in report["slopes"].items():
        print(f"  {name}: {value}")


def _verdict(ok: bool | None, not_judged: str | None) -> str:
    """``met``, ``NOT met``, or ``not judged (why)`` for a run too short to judge."""
    if ok is None and not_judged:
        return f"not judged ({not_judged})"
    return "met" if ok else "NOT met"
