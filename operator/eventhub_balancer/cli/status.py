"""``ehb status``: the assignment table of EventHubConsumers, read from the cluster."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.balancing import models, partitionlists
from eventhub_balancer.cli import consumerlookups, flagtypes, kubecontexts
from eventhub_balancer.contracts import bounds, conditions, labelselectors, podstates

COMMAND = ("status",)
HELP = "print pods, partitions, epochs, readiness and hand-offs of EventHubConsumers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        type=flagtypes.consumer_name,
        help="one EventHubConsumer (default: all)",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        default=None,
        type=flagtypes.namespace_name,
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
    serve = _serve(namespace)
    if not isinstance(seen, int):
        return f"{namespace}/{name}: no status yet: no operator has reconciled it; {serve}"
    if isinstance(generation, int) and seen < generation:
        return (
            f"{namespace}/{name}: the status is of generation {seen}, the spec is at "
            f"{generation}: no operator has reconciled the change; {serve}"
        )
    return None


def _serve(namespace: object) -> str:
    return (
        f"is an operator running that serves namespace {namespace}? (`ehb operator -n "
        f"{namespace}`, or the chart's watchNamespaces; kubectl -n <its namespace> logs "
        "deploy/<its release> says why it does not)"
    )


#: Ready reasons of a consumer the operator leaves unwritten on purpose (its message says why).
UNWRITTEN = frozenset({"Conflict", "InvalidSpec"})


def outdated(body: dict[str, Any], pods: Sequence[Mapping[str, Any]]) -> str | None:
    """What the pods the selector matches now (``pods``, as listed) say that the status does
    not: a pod it lists that is gone, replaced or in another state, or one it lacks. The
    operator writes only what changes, so a status left by an operator that stopped reads as
    current; this is how ``ehb status`` tells. None: they agree."""
    meta = body.get("metadata", {})
    status = body.get("status") or {}
    listed = status.get("consumers")
    ready = conditions.find(status.get("conditions"), conditions.READY) or {}
    if not isinstance(listed, list) or ready.get("reason") in UNWRITTEN:
        return None
    live = {s.name: s for s in map(podstates.pod_state, pods)}
    uids = {
        str(a.get("pod")): str(a.get("podUid"))
        for a in status.get("assignment") or []
        if isinstance(a, Mapping) and a.get("podUid")
    }
    found: list[str] = []
    for entry in listed:
        name = str(entry.get("pod"))
        held = partitionlists.compact(str(p) for p in entry.get("partitions") or [])
        who = f"{name} (holding {held})" if held else name
        now = live.pop(name, None)
        said = str(entry.get("state") or "finished")
        if now is None:
            found.append(f"{who} is gone")
        elif name in uids and uids[name] != now.uid:
            found.append(f"{who} was replaced by a pod of the same name")
        elif (state := now.state or "finished") != said:
            found.append(f"{who} is {_STATES.get(state, state)}")
    found += [f"{name} is not in it" for name in live]
    if not found:
        return None
    return (
        f"{meta.get('namespace')}/{meta.get('name')}: the status is behind the pods: "
        f"{', '.join(found)}. An operator updates it within seconds of a change; if this "
        f"stays, none is reconciling it: {_serve(meta.get('namespace'))}"
    )


#: A pod's state (`podstates.PodState.state`) in the hint's words.
_STATES = {"ready": "Ready", "notready": "not Ready", "terminating": "terminating"}


def _count(value: Any, word: str) -> str:
    """``1 member``, ``2 members``; ``? members`` when the status does not say, and for the
    partitions (absent until the hub is listed) where to look instead."""
    if not isinstance(value, int):
        if word == "partition":
            return "partitions not listed yet (see EventHubReachable)"
        return f"? {word}s"
    return conditions.amount(value, word)


def hints(body: dict[str, Any], pods: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """What to know before reading the status: no operator concluded anything about the
    current spec (`unserved`), or the pods moved on since (`outdated`; ``pods`` None: not
    listed)."""
    hint = unserved(body)
    if hint is None and pods is not None:
        hint = outdated(body, pods)
    return [] if hint is None else [hint]


def render(body: dict[str, Any], pods: Sequence[Mapping[str, Any]] | None = None) -> str:
    """One consumer's table, from its status (what the operator last concluded), after the
    `hints` (``pods``: the pods its selector matches now)."""
    meta = body.get("metadata", {})
    status = body.get("status") or {}
    epochs = status.get("epochs") or {}
    lines = hints(body, pods)
    if lines and not status:
        return _shown(lines)
    counts = (
        _count(status.get("partitionCount"), "partition"),
        _count(status.get("memberCount"), "member"),
        # Not moves pending: every move the operator made of this consumer's partitions.
        _count(status.get("movesTotal"), "move") + " since it was created",
    )
    lines.append(f"{meta.get('namespace')}/{meta.get('name')}: {', '.join(counts)}")
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
        held = [str(p) for p in consumer.get("partitions") or []]
        revoking = partitionlists.runs([str(p) for p in consumer.get("revoking") or []])
        rows.append(
            (
                str(consumer.get("pod")),
                "yes" if consumer.get("ready") else "no",
                str(consumer.get("state", "")),
                partitionlists.compact(held) or "-",
                _epochs({p: str(epochs.get(p, "?")) for p in held}),
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
    return _shown(lines + _set_aside(status.get("deadLettered"), meta))


def _set_aside(entries: Any, meta: Mapping[str, Any]) -> list[str]:
    """What each pod set aside into the dead letters at the epochs it holds, a line a pod:
    ``orders-1: 12 batches of partitions 3,5``; nothing when none."""
    by_pod: dict[str, tuple[int, list[str]]] = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, Mapping) and isinstance(e.get("batches"), int):
            batches, partitions = by_pod.get(str(e.get("pod")), (0, []))
            by_pod[str(e.get("pod"))] = (
                batches + e["batches"],
                [*partitions, str(e.get("partition"))],
            )
    if not by_pod:
        return []
    command = f"ehb deadletters list {meta.get('name')} -n {meta.get('namespace')}"
    lines = [f"  set aside into the dead letters ({command}):"]
    for pod in sorted(by_pod, key=models.name_key):
        batches, partitions = by_pod[pod]
        plural = "es" if batches > 1 else ""
        which = (
            f"partition{'s' if len(partitions) > 1 else ''} {partitionlists.compact(partitions)}"
        )
        lines.append(f"    {pod}: {batches} batch{plural} of {which}")
    return lines


def _epochs(held: Mapping[str, str]) -> str:
    """The EPOCHS cell: the epoch the PARTITIONS share, or each epoch with its partitions,
    lowest first (``2 (10-11), 4 (0-1,3), 5 (2)``). Until 7 December PARTITIONS broke its runs
    where the epoch changed, one epoch a run, so a pod that took partitions in several moves
    read as scattered: ``0,11-12,24-26,27-29,30-31`` beside ``2,3,4,3,4``."""
    if not held:
        return "-"
    by_epoch: dict[str, list[str]] = {}
    for partition, epoch in held.items():
        by_epoch.setdefault(epoch, []).append(partition)
    if len(by_epoch) == 1:
        return next(iter(by_epoch))
    return ", ".join(
        f"{e} ({partitionlists.compact(by_epoch[e])})"
        for e in sorted(by_epoch, key=models.name_key)  # numerically; "?" (none) last
    )


def _shown(lines: list[str]) -> str:
    """The lines as printed: what tenants wrote in them (a pod's error in a condition, names
    in a spec) as printable text (`bounds.printable`), never acting on the terminal."""
    return "\n".join(bounds.printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: every command module is imported at each `ehb` start-up, and this
    # one imports the Kubernetes client (over half a second).
    from eventhub_balancer.adapters import kubeapi

    if args.all_namespaces and args.name:
        raise errors.InvalidInput("--all-namespaces", "lists every consumer: drop it or the NAME")
    namespace: str | None = None
    if not args.all_namespaces:
        namespace = args.namespace or kubecontexts.default_namespace(args.kubeconfig)

    #: What to say when nothing is found (`consumerlookups.none_in`).
    nothing = "no EventHubConsumers found in any namespace"

    async def fetch() -> list[tuple[dict[str, Any], list[Mapping[str, Any]] | None]]:
        nonlocal nothing
        api = kubeapi.KubeAPI.from_environment(args.kubeconfig)
        try:
            if args.name:
                assert namespace is not None
                bodies = [
                    await consumerlookups.get_consumer(api, namespace=namespace, name=args.name)
                ]
            else:
                bodies = [dict(b) for b in await api.list_consumers(namespace=namespace)]
                if not bodies and namespace is not None and not args.json:
                    nothing = await consumerlookups.none_in(api, namespace)
            return [(b, await selected(api, b)) for b in bodies]
        finally:
            api.close()

    shown = asyncio.run(fetch())
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "namespace": b["metadata"].get("namespace"),
                        "name": b["metadata"].get("name"),
                        "status": b.get("status") or {},
                        "hints": hints(b, pods),
                    }
                    for b, pods in shown
                ],
                indent=2,
            )
        )
    elif not shown:
        print(nothing)
    else:
        print("\n\n".join(render(b, pods) for b, pods in shown))
    return 0


async def selected(api: Any, body: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The pods the consumer's selector matches now; None when they cannot be listed (a
    selector the operator refuses too, no right to list pods): the status is shown alone."""
    try:
        selector = labelselectors.parse_selector(
            (body.get("spec") or {}).get("selector"), field="spec.selector"
        )
        pods: list[Mapping[str, Any]] = await api.select_pods(
            namespace=body["metadata"]["namespace"], selector=selector
        )
    except errors.EventHubBalancerError:
        return None
    return pods
