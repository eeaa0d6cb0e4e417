"""What one decision costs, and the planner inside it, as the fleet grows and one pod changes.

A consumer of P partitions over N pods is decided cycle by cycle, in memory (the decision's
writes applied to the bodies as the API server would), until nothing is left to write. Then
two figures are taken, each a median:

- cold: the settled observation decided with an empty carry, every body read afresh: what
  a restarted operator's first decision costs;
- warm: each decision sees one pod flip its readiness (a new body object for that pod, the
  very same objects for the rest, as the watch's cache hands them out) and takes the carry
  of the decision before it (`decisions.Carry`), so only the flipped pod is read again.

For the warm decisions the planner inside (`planning.plan`, timed on the way) and the
difference, what the rest of a decision costs, are given too. Nothing of the API, kopf or the
network is in them (`ehb bench operator` measures the whole operator).

The rule these figures decide: `deciding.decide` carries only the fleet's reads from one
decision to the next, and works over the whole observation otherwise; it stays that way while
a warm decision at 1,024 partitions over 512 pods costs under 50 ms.
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
from eventhub_balancer.contracts import specs, timestamps
from eventhub_balancer.reconciling import deciding, decisions, observations
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
    #: a decision with an empty carry (every body read); the rest: warm, one pod flipped
    cold_ms: float
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
            "creationTimestamp": timestamps.format_time(T0),
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": timestamps.format_time(at(since)),
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
    observation: observations.Observation, decision: decisions.Decision
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


def settled(partitions: int, pods: int) -> tuple[observations.Observation, decisions.Carry, float]:
    """The consumer decided until nothing is left to write, the carry of its last decision,
    and the time it got there."""
    observation, carry, second = observe(partitions, pods), decisions.COLD, 0.0
    for _ in range(MAX_SETTLE_CYCLES):
        decision, carry = deciding.decide(observation, carry, now=at(second))
        second += 1.0
        if decision.epochs is None and not decision.writes.count and not decision.status:
            return observation, carry, second
        observation = applied(observation, decision)
    raise RuntimeError(f"{partitions} x {pods} did not settle in {MAX_SETTLE_CYCLES} cycles")


def measure(partitions: int, pods: int, *, repeat: int) -> Figure:
    observation, carry, second = settled(partitions, pods)
    cold: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        deciding.decide(observation, None, now=at(second))
        cold.append(time.perf_counter() - started)
    planned: list[float] = []
    plan: Callable[[models.Scenario], models.Plan] = planning.plan

    def timed(scenario: models.Scenario) -> models.Plan:
        started = time.perf_counter()
        try:
            return plan(scenario)
        finally:
            planned.append(time.perf_counter() - started)

    decided: list[float] = []
    others = tuple(p for p in observation.pods if p["metadata"]["name"] != "pod-1")
    planning.plan = timed
    try:
        for i in range(repeat):
            # As the watch's cache hands them out: a new object for the pod that changed.
            flipped = (*others, pod("pod-1", ready=i % 2 == 1, since=second))
            started = time.perf_counter()
            _decision, carry = deciding.decide(
                dataclasses.replace(observation, pods=flipped), carry, now=at(second)
            )
            decided.append(time.perf_counter() - started)
    finally:
        planning.plan = plan  # type: ignore[assignment]
    decide_ms = statistics.median(decided) * 1000
    planner_ms = statistics.median(planned) * 1000
    return {
        "partitions": partitions,
        "pods": pods,
        "cold_ms": round(statistics.median(cold) * 1000, 3),
        "decide_ms": round(decide_ms, 3),
        "planner_ms": round(planner_ms, 3),
        "outside_planner_ms": round(decide_ms - planner_ms, 3),
    }


def run(*, repeat: int, sizes: tuple[tuple[int, int], ...] = SIZES) -> list[Figure]:
    return [measure(partitions, pods, repeat=repeat) for partitions, pods in sizes]
