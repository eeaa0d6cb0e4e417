"""What one decision costs outside the planner, as the fleet grows and one pod changes.

A consumer of P partitions over N pods is decided cycle by cycle, in memory (the decision's
writes applied to the bodies as the API server would), until nothing is left to write. Then
each measured decision sees one pod flip its readiness: its fleet is advanced by that one pod
(`fleets.advance_by`, as the operator's reader does with the watch's change feed) and
decided. The figures are medians: the fleet's advance and the whole `deciding.decide`, the
planner inside it (`planning.plan`, timed on the way), and the difference, which is what the
rest of a decision costs. Nothing of the API, kopf or the network is in them
(`ehb bench operator` measures the whole operator).

The target of the fleet-scale work: the part outside the planner grows with what changed, so
that at a fixed partition count it stays nearly flat from 64 to 1,024 pods.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import specs
from eventhub_balancer.reconciling import deciding, fleets, observations
from eventhub_balancer_devstack.kube import patching

#: (partitions, pods): 1,024 partitions (a dedicated hub) over a growing fleet, and a small hub.
SIZES: tuple[tuple[int, int], ...] = ((32, 31), (1024, 64), (1024, 256), (1024, 512), (1024, 1024))
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
NAMESPACE, NAME = "bench", "orders"
SPEC: Mapping[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "bench.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "blob", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "orders"}},
}
#: Cycles to reach a steady state before measuring; more means the fleet never settled.
MAX_SETTLE_CYCLES = 20


class Figure(TypedDict):
    partitions: int
    pods: int
    decide_ms: float
    planner_ms: float
    outside_planner_ms: float


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def pod(name: str, *, ready: bool = True, since: float = 0.0) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "labels": {"app": "orders"},
            "creationTimestamp": specs.format_time(T0),
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": specs.format_time(at(since)),
                }
            ],
        },
    }


def observe(partitions: int, pods: int) -> observations.Observation:
    body: specs.ConsumerBody = {
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "uid-ehc", "generation": 1},
        "spec": copy.deepcopy(dict(SPEC)),  # type: ignore[typeddict-item]
    }
    return observations.Observation(
        namespace=NAMESPACE,
        name=NAME,
        body=body,
        spec=specs.parse_spec(SPEC),
        hub=observations.HubRead(ids=tuple(map(str, range(partitions)))),
        pods=tuple(pod(f"pod-{i}") for i in range(pods)),
        store=observations.StoreRead(checkpoints={}, listed=True),
    )


def applied(
    observation: observations.Observation, decision: deciding.Decision
) -> observations.Observation:
    """The next observation once the decision was written: the status merged, the
    ConfigMaps created, patched or deleted (new objects only for what was written)."""
    body: Any = observation.body
    if decision.epochs is not None:
        first: dict[str, Any] = {"epochs": dict(decision.epochs)}
        if decision.record is not None:
            first["assignment"] = [dict(entry) for entry in decision.record]
        body = patching.merge(body, {"status": first})
    body = patching.merge(body, {"status": dict(decision.status)})
    maps = {m["metadata"]["name"]: m for m in observation.configmaps}
    for write in decision.writes.maps:
        if write.create:
            created = copy.deepcopy(dict(write.body))
            created["metadata"]["uid"] = f"uid-cm-{write.name}"
            maps[write.name] = created
        else:
            maps[write.name] = patching.merge(maps[write.name], write.body)
    for delete in decision.writes.deletes:
        maps.pop(delete.name, None)
    return dataclasses.replace(observation, body=body, configmaps=tuple(maps.values()))


def settled(partitions: int, pods: int) -> tuple[observations.Observation, float]:
    """The consumer decided until nothing is left to write, and the time it got there."""
    observation, second = observe(partitions, pods), 0.0
    for _ in range(MAX_SETTLE_CYCLES):
        decision = deciding.decide(observation, now=at(second))
        second += 1.0
        if decision.epochs is None and not decision.writes.count and not decision.status:
            return observation, second
        observation = applied(observation, decision)
    raise RuntimeError(f"{partitions} x {pods} did not settle in {MAX_SETTLE_CYCLES} cycles")


def measure(partitions: int, pods: int, *, repeat: int) -> Figure:
    observation, second = settled(partitions, pods)
    planned: list[float] = []
    plan: Callable[[models.Scenario], models.Plan] = planning.plan

    def timed(scenario: models.Scenario) -> models.Plan:
        started = time.perf_counter()
        try:
            return plan(scenario)
        finally:
            planned.append(time.perf_counter() - started)

    decided: list[float] = []
    spec = observation.spec
    assert spec is not None
    fleet = fleets.last(fleets.scope_of(NAMESPACE, NAME, spec.selector))
    assert fleet is not None, "the settled decision kept its fleet"
    planning.plan = timed
    try:
        for i in range(repeat):
            flip = pod("pod-1", ready=i % 2 == 1, since=second)
            started = time.perf_counter()
            # As the operator's reader does with the watch's change feed: the one pod changed.
            fleet = fleets.advance_by(
                fleet, pods={"pod-1": flip}, configmaps={}, selector=spec.selector
            )
            deciding.decide(dataclasses.replace(observation, fleet=fleet), now=at(second))
            decided.append(time.perf_counter() - started)
    finally:
        planning.plan = plan  # type: ignore[assignment]
    decide_ms = statistics.median(decided) * 1000
    planner_ms = statistics.median(planned) * 1000
    return {
        "partitions": partitions,
        "pods": pods,
        "decide_ms": round(decide_ms, 3),
        "planner_ms": round(planner_ms, 3),
        "outside_planner_ms": round(decide_ms - planner_ms, 3),
    }


def run(*, repeat: int, sizes: tuple[tuple[int, int], ...] = SIZES) -> list[Figure]:
    return [measure(partitions, pods, repeat=repeat) for partitions, pods in sizes]
