"""Observations built from plain bodies, and decisions applied back to them, with no API.

`applied` plays the API server for a pure test: it turns a decision's writes into the next
observation (merge patches, created and deleted ConfigMaps), so that a test walks a consumer
through several cycles with data alone.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from eventhub_balancer import errors
from eventhub_balancer.contracts import (
    configmaps,
    podassignments,
    specs,
    startpositions,
    timestamps,
)
from eventhub_balancer.reconciling import deciding, decisions, observations
from tests.support import fakes

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
NS, NAME = "shop", "orders"
SPEC: dict[str, Any] = {
    "eventHub": {
        "fullyQualifiedNamespace": "shop.servicebus.windows.net",
        "name": "orders",
        "credentials": {"connectionStringSecretRef": {"name": "eh", "key": "cs"}},
    },
    "checkpointStore": {
        "containerName": "checkpoints",
        "credentials": {"connectionStringSecretRef": {"name": "b", "key": "cs"}},
    },
    "selector": {"matchLabels": {"app": "c"}},
}
IDS = ("0", "1", "2", "3")


def decide(observation: observations.Observation, *, now: datetime.datetime) -> decisions.Decision:
    """A cold decision: nothing carried from an earlier one."""
    decision, _carry = deciding.decide(observation, None, now=now)
    return decision


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def pod(
    name: str, *, ready: bool = True, since: float = 0.0, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": dict(labels if labels is not None else {"app": "c"}),
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


def observe(
    *,
    pods: Sequence[Mapping[str, Any]],
    spec: Mapping[str, Any] = SPEC,
    ids: tuple[str, ...] | None = IDS,
    checkpoints: Mapping[str, tuple[int, int]] | None = None,
) -> observations.Observation:
    """The first observation of a consumer: nothing written yet."""
    body: specs.ConsumerBody = {
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-ehc", "generation": 1},
        "spec": copy.deepcopy(dict(spec)),  # type: ignore[typeddict-item]
    }
    try:
        parsed: specs.ConsumerSpec | None = specs.parse_spec(spec)
        error = None
    except errors.InvalidInput as e:
        parsed, error = None, e
    return observations.Observation(
        namespace=NS,
        name=NAME,
        body=body,
        spec=parsed,
        spec_error=error,
        hub=observations.HubRead(ids=ids),
        pods=tuple(pods),
        store=observations.StoreRead(checkpoints=checkpoints, listed=checkpoints is not None),
    )


def ends(
    last: Mapping[str, int], *, first: Mapping[str, int] | None = None
) -> dict[str, startpositions.PartitionBounds]:
    """What Event Hubs says of each partition: its ``last`` sequence number, and the ``first``
    it still holds (0 when not named; past the last when it holds none)."""
    first = first or {}
    return {
        p: startpositions.PartitionBounds(
            beginning_sequence_number=first.get(p, 0),
            last_sequence_number=n,
            last_offset=str(n),
            empty=first.get(p, 0) > n,
        )
        for p, n in last.items()
    }


def read_blobs(
    observation: observations.Observation, checkpoints: Mapping[str, tuple[int, int]]
) -> observations.Observation:
    """What the cycle does when a decision needs the checkpoint blobs."""
    store = observations.StoreRead(checkpoints=dict(checkpoints), listed=True)
    return dataclasses.replace(observation, store=store)


def decide_fully(
    observation: observations.Observation,
    *,
    now: datetime.datetime,
    checkpoints: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[observations.Observation, decisions.Decision]:
    """Decide as a cycle does: again with the blobs (default: none stored) when asked."""
    decision = decide(observation, now=now)
    if decision.needs_checkpoints:
        observation = read_blobs(observation, checkpoints or {})
        decision = decide(observation, now=now)
    return observation, decision


def applied(
    observation: observations.Observation, decision: decisions.Decision
) -> observations.Observation:
    """The next cycle's observation once ``decision`` was written (and nothing else moved)."""
    body: Any = copy.deepcopy(observation.body)
    if decision.epochs is not None:
        first: dict[str, Any] = {"epochs": dict(decision.epochs)}
        if decision.record is not None:
            first["assignment"] = [dict(entry) for entry in decision.record]
        body = fakes.merge_patch(body, {"status": first})
    body = fakes.merge_patch(body, {"status": dict(decision.status)})
    maps = {m["metadata"]["name"]: copy.deepcopy(dict(m)) for m in observation.configmaps}
    for write in decision.writes.maps:
        if write.create:
            created = copy.deepcopy(dict(write.body))
            created["metadata"]["uid"] = f"uid-cm-{write.name}"
            maps[write.name] = created
        else:
            maps[write.name] = fakes.merge_patch(maps[write.name], write.body)
    for delete in decision.writes.deletes:
        maps.pop(delete.name, None)
    pods = {p["metadata"]["name"]: copy.deepcopy(dict(p)) for p in observation.pods}
    for annotation in decision.writes.pods:
        patch = {"metadata": {"annotations": dict(annotation.annotations)}}
        pods[annotation.pod] = fakes.merge_patch(pods[annotation.pod], patch)
    return dataclasses.replace(
        observation,
        body=body,
        configmaps=tuple(maps.values()),
        pods=tuple(pods.values()),
        store=observations.StoreRead(listed=observation.store.listed),
        last_sequences=None,
    )


def with_pods(
    observation: observations.Observation, *pods: Mapping[str, Any]
) -> observations.Observation:
    """Replace (by name) or add pods, keeping the annotations the operator wrote."""
    by_name = {p["metadata"]["name"]: dict(p) for p in observation.pods}
    for new in pods:
        old = by_name.get(new["metadata"]["name"], {})
        merged = copy.deepcopy(dict(new))
        annotations = (old.get("metadata") or {}).get("annotations")
        if annotations:
            merged["metadata"]["annotations"] = annotations
        by_name[new["metadata"]["name"]] = merged
    return dataclasses.replace(observation, pods=tuple(by_name.values()))


def acknowledged(
    observation: observations.Observation, pod: str, only: Collection[str] | None = None
) -> observations.Observation:
    """``pod`` released every partition it is revoking, or ``only`` those (the pod's runtime
    writes this as each release is done)."""
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        if cm["data"].get(configmaps.KEY_POD) == pod:
            parsed = podassignments.parse_data(cm["data"])
            released = {
                str(p): e.epoch
                for p, e in parsed.partitions.items()
                if e.state == "revoking" and (only is None or str(p) in only)
            }
            cm["metadata"].setdefault("annotations", {})[configmaps.ANNOTATION_RELEASED] = (
                configmaps.build_released(released)
            )
        maps.append(cm)
    return dataclasses.replace(observation, configmaps=tuple(maps))


def applying(observation: observations.Observation, pod_name: str) -> observations.Observation:
    """``pod_name`` applied the generation its ConfigMap gives it (what `ehb consume` writes)."""
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        if cm["data"].get(configmaps.KEY_POD) == pod_name:
            generation = podassignments.parse_data(cm["data"]).generation
            cm["metadata"].setdefault("annotations", {})[
                configmaps.ANNOTATION_APPLIED_GENERATION
            ] = configmaps.build_applied_generation(generation)
        maps.append(cm)
    return dataclasses.replace(observation, configmaps=tuple(maps))


def assignment(observation: observations.Observation) -> dict[str, dict[str, tuple[int, str]]]:
    """pod -> {partition: (epoch, state)} as the observed ConfigMaps say."""
    result: dict[str, dict[str, tuple[int, str]]] = {}
    for cm in observation.configmaps:
        parsed = podassignments.parse_data(cm["data"])
        result[parsed.pod] = {p: (e.epoch, e.state) for p, e in parsed.partitions.items()}
    return result


def condition(observation: observations.Observation, type_: str) -> Mapping[str, Any]:
    found = next(c for c in observation.status.get("conditions") or [] if c["type"] == type_)
    return found


def with_reports(
    observation: observations.Observation, pod_name: str, value: str
) -> observations.Observation:
    """``pod_name`` writes ``value`` as its reports' annotation, as its runtime does (it
    replaces the annotation as a whole)."""
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        if cm["data"].get(configmaps.KEY_POD) == pod_name:
            cm["metadata"].setdefault("annotations", {})[
                configmaps.ANNOTATION_PARTITION_REPORTS
            ] = value
        maps.append(cm)
    return dataclasses.replace(observation, configmaps=tuple(maps))
