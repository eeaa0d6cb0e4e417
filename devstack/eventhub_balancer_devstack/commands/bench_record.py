"""`ehb bench record`: run a benchmark and keep its JSON output as the manual's figures.

``ehb bench record [OPTIONS] planner -- ehb bench planner --json`` (options before the name:
everything after it is the command) writes
``docs/benchmarks/planner.json`` (see ``benchmarks.records``); ``--result FILE`` records a run
whose stdout was saved earlier (a long one, run in the background); ``--refresh FILE``
re-renders the figure blocks of a file that the docs site's hook does not read (the README).
``make figures`` runs it for every recorded benchmark.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from eventhub_balancer import errors
from eventhub_balancer.cli import flagtypes

COMMAND = ("bench", "record")
HELP = "run a benchmark with --json and save its output, date and load as docs figures"

logger = logging.getLogger(__name__)

#: The command's own flags, which must come before NAME (everything after it is COMMAND).
OWN_FLAGS = frozenset({"--directory", "--result", "--load-average", "--refresh", "-h", "--help"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="the record's name: docs/benchmarks/NAME.json")
    parser.add_argument(
        "benchmark",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the benchmark command, printing one JSON document on stdout",
    )
    parser.add_argument(
        "--directory",
        type=Path,
        default=None,
        help="where the records live (default docs/benchmarks)",
    )
    parser.add_argument(
        "--result",
        type=Path,
        metavar="FILE",
        help="record this saved stdout of COMMAND instead of running it",
    )
    parser.add_argument(
        "--load-average",
        type=flagtypes.number(float, least=0),
        nargs=3,
        metavar=("1MIN", "5MIN", "15MIN"),
        help="with --result: the load average noted at the end of that run",
    )
    parser.add_argument(
        "--refresh",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="re-render the figure blocks of FILE from the records (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    from eventhub_balancer_devstack.benchmarks import records

    directory: Path = args.directory or records.DIRECTORY
    command = list(args.benchmark)
    first = command[0].split("=")[0] if command else ""
    if command[:1] == ["--"]:
        command = command[1:]
    elif first in OWN_FLAGS:
        # argparse gives everything after NAME to COMMAND: `NAME --directory D -- cmd` ran
        # `--directory` as the benchmark ("cannot run --directory").
        raise errors.InvalidInput(
            first,
            "give ehb bench record's own flags before NAME, as in `ehb bench record "
            f"{first} ... {args.name or 'NAME'} -- COMMAND`",
        )
    if args.name is None and not args.refresh:
        raise errors.InvalidInput("NAME", "give a record name and a command, or --refresh FILE")
    if args.name is not None:
        if args.result is not None:
            if not command:
                raise errors.InvalidInput("COMMAND", "with --result, give the command that ran")
            load: tuple[float, float, float] | None = None
            if args.load_average:
                one, five, fifteen = args.load_average
                load = (one, five, fifteen)
            record = records.from_output(
                args.name, " ".join(command), output=args.result, load=load
            )
        else:
            record = records.run(args.name, command)
        path = records.write(record, directory=directory)
        print(f"recorded {path} (load average {record.load_average})", file=sys.stderr)
    for target in args.refresh:
        try:
            text = target.read_text()
        except OSError as e:
            raise errors.InvalidInput("--refresh", f"cannot read {target}: {e.strerror}") from e
        updated = records.refresh(text, directory=directory)
        if updated != text:
            target.write_text(updated)
            print(f"refreshed the figures in {target}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ehb bench record", description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except errors.EventHubBalancerError as e:
        print(f"ehb bench record: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, errors.InvalidInput) else 1


if __name__ == "__main__":
    sys.exit(main())
