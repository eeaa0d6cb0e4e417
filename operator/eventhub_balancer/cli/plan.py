"""`ehb plan`: run the planner on a scenario and show what it would do.

For trying the rules without a cluster, for bug reports (a scenario file reproduces a plan
exactly), and for other tools, which get the plan as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, partitionlists, planning, scenarios

COMMAND = ("plan",)
HELP = "plan one balancing cycle for a JSON scenario (file or stdin) and print the result"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        nargs="?",
        help="the scenario file; '-' or nothing reads standard input",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--partitions",
        type=int,
        metavar="P",
        help="plan a fresh start of P partitions (with --pods)",
    )
    parser.add_argument(
        "--pods", type=int, metavar="N", help="plan a fresh start over N pods (with --partitions)"
    )


def run(args: argparse.Namespace) -> int:
    scenario = _scenario(args)
    plan = planning.plan(scenario)
    text = json.dumps(scenarios.dump_plan(plan), indent=2) if args.json else render(scenario, plan)
    print(text, flush=True)
    return 0


def _scenario(args: argparse.Namespace) -> models.Scenario:
    if args.partitions is not None or args.pods is not None:
        if args.scenario is not None:
            raise errors.InvalidInput(
                "--partitions", "give either a scenario or --partitions/--pods"
            )
        if args.partitions is None or args.pods is None:
            raise errors.InvalidInput("--partitions", "--partitions and --pods go together")
        return scenarios.fresh(partition_count=args.partitions, member_count=args.pods)
    if args.scenario is None or args.scenario == "-":
        if sys.stdin.isatty():
            raise errors.InvalidInput(
                "scenario", "give a file, pipe a scenario in, or use --partitions P --pods N"
            )
        text = sys.stdin.read()
        if not text.strip():
            raise errors.InvalidInput(
                "scenario",
                "standard input is empty: give a file, pipe a scenario in, or use "
                "--partitions P --pods N",
            )
        return scenarios.load(text)
    try:
        with open(args.scenario, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise errors.InvalidInput("scenario", f"cannot read {args.scenario}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise errors.InvalidInput("scenario", f"{args.scenario} is not UTF-8 text") from e
    try:
        return scenarios.load(text)
    except errors.InvalidInput as e:
        # Which file, then where in it (the whole scenario's problems name no field).
        field = args.scenario if e.field == "scenario" else f"{args.scenario}: {e.field}"
        raise errors.InvalidInput(field, e.problem) from None


def render(scenario: models.Scenario, plan: models.Plan) -> str:
    """The plan as a table of members, then the moves, then whether it is balanced."""
    by_lag = scenario.options.weighting == "lag"
    holdings: dict[str | None, list[models.PartitionId]] = {}
    for p, entry in plan.assignment.items():
        holdings.setdefault(entry.owner, []).append(p)
    header = [
        "member",
        "state",
        "weight",
        "target",
        "owns",
        *(["load"] if by_lag else []),
        "partitions",
    ]
    rows = [header]
    members = sorted(scenario.members, key=lambda m: models.name_key(m.name))
    for m in members:
        owns = holdings.pop(m.name, [])
        row = [
            m.name,
            _state(scenario, m, plan),
            f"{m.weight:g}",
            str(plan.targets[m.name]) if m.name in plan.targets else "-",
            str(len(owns)),
        ]
        if by_lag:
            row.append(str(sum(scenario.lag.get(p, 0) + 1 for p in owns)))
        row.append(_partitions(owns, plan))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = [
        "  ".join(
            [*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]
        ).rstrip()
        for row in rows
    ]
    unowned = [
        p
        for p in scenario.partitions
        if p not in plan.assignment or plan.assignment[p].owner is None
    ]
    if unowned:
        lines.append(f"no owner: {partitionlists.compact(unowned)}")
    lines.append("")
    lines.append(f"moves: {len(plan.moves)}" if plan.moves else "moves: none")
    # One line per kind of move between the same members, partitions folded into ranges.
    groups: dict[tuple[str, str, str, str], list[models.Move]] = {}
    for move in plan.moves:
        key = (move.kind, move.source or "-", move.target or "-", move.reason)
        groups.setdefault(key, []).append(move)
    table = [
        [
            kind,
            partitionlists.compact(m.partition for m in moves),
            f"{source} -> {target}",
            partitionlists.epochs(m.epoch for m in moves),
            f"({reason})",
        ]
        for (kind, source, target, reason), moves in groups.items()
    ]
    widths = [max((len(row[i]) for row in table), default=0) for i in range(5)]
    for row in table:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
    lines.append(f"balanced: {'yes' if plan.balanced else 'no'}")
    return "\n".join(lines)


def _state(scenario: models.Scenario, member: models.Member, plan: models.Plan) -> str:
    standing = planning.standing(member, now=scenario.now, options=scenario.options)
    if member.state == "ready" and standing == "held":
        return "ready (probation)"
    if member.name in plan.starting:
        return "notready (starting)"
    if member.state == "notready":
        return "notready (grace)" if standing == "held" else "notready (gone)"
    return member.state


def _partitions(owns: Sequence[models.PartitionId], plan: models.Plan) -> str:
    revoking = [p for p in owns if plan.assignment[p].state == "revoking"]
    text = partitionlists.compact(p for p in owns if plan.assignment[p].state == "owned")
    if revoking:
        text = f"{text} revoking {partitionlists.compact(revoking)}".strip()
    return text or "-"
