"""``ehb status``: the assignment table of EventHubConsumers, read from the cluster."""

from __future__ import annotations

import argparse
import json
from typing import Any

from eventhub_balancer.cli import tables
from eventhub_balancer.contracts import bounds, conditions

COMMAND = ("status",)
HELP = "print pods, partitions, epochs, readiness and hand-offs of EventHubConsumers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="one EventHubConsumer (default: all)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="namespace (default: the kubeconfig context's, as kubectl)",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (without a NAME)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG)")


def unserved(body: dict[str, Any]) -> str | None:
    """What to look at when no operator has concluded anything about the consumer's current
    spec (no status, or one of an older generation); None: its status is current."""
    meta = body.get("metadata", {})
    namespace, name = meta.get("namespace"), meta.get("name")
    status = body.get("status") or {}
    seen, generation = status.get("observedGeneration"), meta.get("generation")
    serve = (
        f"is an operator running that serves namespace {namespace}? (`ehb operator -n "
        f"{namespace}`, or the chart's watchNamespaces; kubectl -n <its namespace> logs "
        "deploy/<its release> says why it does not)"
    )
    if not isinstance(seen, int):
        return f"{namespace}/{name}: no status yet: no operator has reconciled it; {serve}"
    if isinstance(generation, int) and seen < generation:
        return (
            f"{namespace}/{name}: the status is of generation {seen}, the spec is at "
            f"{generation}: no operator has reconciled the change; {serve}"
        )
    return None


def _count(value: Any, word: str) -> str:
    """``1 member``, ``2 members``; ``? members`` when the status does not say."""
    if not isinstance(value, int):
        return f"? {word}s"
    return f"{value} {word}" + ("" if value == 1 else "s")


def render(body: dict[str, Any]) -> str:
    """One consumer's table, from its status (what the operator last concluded), after a hint
    when no operator concluded anything about its current spec (`unserved`)."""
    meta = body.get("metadata", {})
    status = body.get("status") or {}
    epochs = status.get("epochs") or {}
    hint = unserved(body)
    if hint is not None and not status:
        return hint
    lines = [] if hint is None else [hint]
    lines += [
        f"{meta.get('namespace')}/{meta.get('name')}: "
        + ", ".join(
            _count(status.get(field), word)
            for field, word in (
                ("partitionCount", "partition"),
                ("memberCount", "member"),
                ("movesTotal", "move"),
            )
        )
    ]
    for c in conditions.ORDER:
        found = conditions.find(status.get("conditions"), c)
        if found:
            lines.append(
                f"  {c:<25} {found.get('status'):<8} {found.get('reason')}: {found.get('message')}"
            )
    if not status.get("consumers"):
        lines.append("  no pod holds a partition (see Ready above)")
        return _shown(lines)
    rows = [("POD", "READY", "STATE", "PARTITIONS", "EPOCHS", "REVOKING")]
    for consumer in status.get("consumers") or []:
        held = tables.partition_runs(
            [str(p) for p in consumer.get("partitions") or []],
            label=lambda p: str(epochs.get(p, "?")),
        )
        revoking = tables.partition_runs([str(p) for p in consumer.get("revoking") or []])
        rows.append(
            (
                str(consumer.get("pod")),
                "yes" if consumer.get("ready") else "no",
                str(consumer.get("state", "")),
                ",".join(run for run, _ in held) or "-",
                ",".join(epoch for _, epoch in held) or "-",
                ",".join(run for run, _ in revoking) or "-",
            )
        )
    cells = [[bounds.printable(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines += [
        "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]
    handoffs = status.get("handoffs") or []
    if handoffs:
        lines.append("  hand-offs in flight:")
        for h in handoffs:
            lines.append(
                f"    partition {h.get('partition')} from {h.get('from')} "
                f"(epoch {h.get('epoch')}) since {h.get('since')}"
            )
    return _shown(lines)


def _shown(lines: list[str]) -> str:
    """The lines as printed: what tenants wrote in them (a pod's error in a condition, names
    in a spec) as printable text (`bounds.printable`), never acting on the terminal."""
    return "\n".join(bounds.printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from eventhub_balancer import errors
    from eventhub_balancer.adapters import kubeapi
    from eventhub_balancer.cli import kubecontexts

    if args.all_namespaces and args.name:
        raise errors.InvalidInput("--all-namespaces", "lists every consumer: drop it or the NAME")
    namespace: str | None = None
    if not args.all_namespaces:
        namespace = args.namespace or kubecontexts.default_namespace(args.kubeconfig)

    async def fetch() -> list[dict[str, Any]]:
        api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
        try:
            if args.name:
                assert namespace is not None
                return [dict(await api.get_consumer(namespace=namespace, name=args.name))]
            return [dict(b) for b in await api.list_consumers(namespace=namespace)]
        finally:
            api.close()

    bodies = asyncio.run(fetch())
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "namespace": b["metadata"].get("namespace"),
                        "name": b["metadata"].get("name"),
                        "status": b.get("status") or {},
                    }
                    for b in bodies
                ],
                indent=2,
            )
        )
    elif not bodies:
        where = "in any namespace" if namespace is None else f"in namespace {namespace}"
        print(f"no EventHubConsumers found {where}")
    else:
        print("\n\n".join(render(b) for b in bodies))
    return 0
