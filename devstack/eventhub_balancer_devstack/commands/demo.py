"""``ehb demo``: the whole system on this machine, through a scenario, with a live view.

Starts the local stack (Event Hubs emulator, Azurite, the local Kubernetes API), the
operator, an EventHubConsumer over a 32-partition hub, consumer processes as pods and a
producer; then scales 2 -> 6 -> 3, deletes a pod, grows the hub to 40 partitions, SIGKILLs a
pod, drains, and says what was produced, processed, lost and duplicated, and how long
each step took to balance.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes, operator_cmd
from eventhub_balancer_devstack.commands import stopping

if TYPE_CHECKING:
    from eventhub_balancer_devstack.scenarios import models

COMMAND = ("demo",)
HELP = "run the operator and consumer pods locally through scale-out/in, deletion, kill, growth"
#: The most partitions an Event Hub (and so the local one) has.
MAX_PARTITIONS = 1024
#: The CRD's maximum of spec.balancing.intervalSeconds.
MAX_INTERVAL_SECONDS = 3600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print only the summary, as JSON (progress on stderr)"
    )
    parser.add_argument("--partitions", type=int, default=32, help="partitions at the start (32)")
    parser.add_argument(
        "--grow-to",
        type=int,
        default=None,
        help="partitions after growth (default: a quarter more than --partitions, 40 for 32)",
    )
    parser.add_argument(
        "--rate",
        type=flagtypes.number(float, positive=True),
        default=300.0,
        help="events per second (300)",
    )
    parser.add_argument(
        "--interval", type=int, default=5, help="spec.balancing.intervalSeconds (5)"
    )
    parser.add_argument(
        "--settle",
        type=flagtypes.number(float, least=0),
        default=4.0,
        help="seconds to watch after each step (4)",
    )
    parser.add_argument(
        "--balance-timeout",
        type=flagtypes.number(float, positive=True),
        default=60.0,
        help="the longest wait for balance after a step; then it is reported unbalanced (60)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="keep records and pod logs here (default: a temporary directory, removed)",
    )
    parser.add_argument(
        "--kube",
        choices=("local", "real"),
        default="local",
        help="the Kubernetes API: local (this project's, the default) or real (kube-apiserver, "
        "kube-controller-manager and etcd; `make controlplane` builds them)",
    )


def grown(partitions: int) -> int:
    """The partitions after growth when ``--grow-to`` is not given: a quarter more, at least
    one (32 -> 40), within what a hub has. ``--partitions 100`` alone was refused for the
    fixed default of 40, naming ``--grow-to``, a flag its user had not given."""
    return min(MAX_PARTITIONS, partitions + max(1, partitions // 4))


def check_scenario(*, partitions: int, grow_to: int, rate: float, interval: int) -> None:
    """The flags the demo shares with `ehb bench balance`, within what the local Event Hubs
    (1 to 1024 partitions a hub) and the CRD (a cycle of 1 to 3600 s) take: past those, the
    run would start the stack and fail in it. ``nan`` fails every comparison, so each check
    says what is in range rather than what is out of it."""
    if not partitions >= 6:
        raise errors.InvalidInput("--partitions", "must be at least 6 (the demo scales to 6)")
    if not partitions < MAX_PARTITIONS:
        raise errors.InvalidInput(
            "--partitions",
            f"must be below {MAX_PARTITIONS}, the most partitions a hub has, to leave room for "
            "the growth step",
        )
    if not grow_to > partitions:
        raise errors.InvalidInput(
            "--grow-to", f"must be more than --partitions ({partitions}), not {grow_to}"
        )
    if not grow_to <= MAX_PARTITIONS:
        raise errors.InvalidInput(
            "--grow-to", f"must be at most {MAX_PARTITIONS}, the most partitions a hub has"
        )
    if not 1 <= rate <= 5000:
        raise errors.InvalidInput("--rate", "must be between 1 and 5000 events/s")
    if not 1 <= interval <= MAX_INTERVAL_SECONDS:
        raise errors.InvalidInput(
            "--interval",
            f"must be 1 to {MAX_INTERVAL_SECONDS} (spec.balancing.intervalSeconds' bounds)",
        )


def check_work_dir(path: Path | None) -> None:
    """Make ``--work-dir`` (and its parents) before anything starts: a path that cannot be a
    directory (a file, below a file, no right to make it) used to end the run in mkdir's
    stack trace, for the demo and the chaos run after the stack had started."""
    check_directory(path, flag="--work-dir")


def check_directory(path: Path | None, *, flag: str) -> None:
    """Make the directory ``flag`` gives (and its parents), or refuse it in one line naming
    the flag; None: none given."""
    if path is None:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        # mkdir says "File exists" of a file that is there: say what it is.
        why = "it is a file" if path.exists() else (e.strerror or str(e)).lower()
        raise errors.InvalidInput(
            flag,
            f"{path} cannot be made a directory ({why}): give a directory, or a path where one "
            "can be made",
        ) from None


def check_flags(args: argparse.Namespace) -> None:
    if args.grow_to is None:
        args.grow_to = grown(args.partitions)
    check_scenario(
        partitions=args.partitions, grow_to=args.grow_to, rate=args.rate, interval=args.interval
    )
    check_work_dir(args.work_dir)


def _log_to_file(path: Path) -> None:
    """Logs go to a file: they would tear the live view apart."""
    root = logging.getLogger()
    level = root.level
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    for noisy in ("azure", "kubernetes", "urllib3", "aiohttp.access", "uamqp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not root.isEnabledFor(logging.DEBUG):  # as `ehb operator` logs: a line per watch event
        logging.getLogger(operator_cmd.KOPF_OBJECTS_LOGGER).setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    with stopping.stopping_cleanly("the pods, the operator and the local stack"):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack import terminalviews
    from eventhub_balancer_devstack.scenarios import operatorsystems, runs

    options = runs.ScenarioOptions(
        partitions=args.partitions,
        grow_to=args.grow_to,
        rate=args.rate,
        interval_seconds=args.interval,
        settle_s=args.settle,
        balance_timeout_s=args.balance_timeout,
        work_dir=args.work_dir,
    )
    out = sys.stderr if args.json else sys.stdout
    hub = "orders"
    with runs.local_stack(
        hubs={hub: args.partitions}, work_dir=args.work_dir, kube_kind=args.kube
    ) as (
        stack,
        loop,
        root,
    ):
        _log_to_file(root / "demo.log")
        site = runs.make_site(
            stack=stack, loop=loop, root=root, label="demo", hub=hub, interval_seconds=args.interval
        )
        with terminalviews.LiveView(out, tty=False if args.json else None, labelled=False) as view:
            scenario = runs.ScenarioRun(
                site=site, system=operatorsystems.OursSystem(site), options=options, observer=view
            )
            summary = scenario.run()
    if args.json:
        print(json.dumps(summary))
    else:
        print()
        print(
            f"produced {summary['produced']}, processed {summary['processed']}, "
            f"lost {summary['lost']}, duplicates {summary['duplicates']}"
        )
        for line in runs.format_steps(summary["steps"]):
            print(line)
        if args.work_dir is not None:
            print(f"records and pod logs: {args.work_dir}")
    problems = verdict(summary)
    print(
        ("FAILED: " + "; ".join(problems))
        if problems
        else "PASSED: every step balanced, no event lost, no duplicate on a planned step",
        file=out,
    )
    return 1 if problems else 0


def verdict(summary: models.Summary) -> list[str]:
    """What went wrong, a phrase each; empty when the demo did what it shows."""
    from eventhub_balancer.contracts import conditions
    from eventhub_balancer_devstack.scenarios import models

    problems = [
        f"{s['step']} was not balanced in time" for s in summary["steps"] if s["balanced_s"] is None
    ]
    if summary["lost"]:
        problems.append(f"{conditions.amount(summary['lost'], 'event')} lost")
    planned = sum(s["duplicates"] for s in summary["steps"] if s["kind"] in models.PLANNED)
    if planned:
        problems.append(f"{conditions.amount(planned, 'duplicate')} on planned steps")
    return problems
