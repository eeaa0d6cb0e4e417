"""The operator benchmark's consumer doubles answer as the consumer runtime does."""

from __future__ import annotations

from typing import Any

from eventhub_balancer.balancing import models
from eventhub_balancer.contracts import configmaps, podassignments, specs
from eventhub_balancer_devstack.benchmarks import doubles
from tests.reconciling import bodies

SPEC = specs.parse_spec(bodies.SPEC)


def body(
    partitions: dict[str, tuple[int, str]],
    *,
    pod: str = "p-1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    data = podassignments.build_data(
        spec=SPEC,
        consumer="orders",
        pod=pod,
        generation=4,
        partitions={
            models.PartitionId(pid): podassignments.PartitionEntry(
                epoch=epoch,
                state="revoking" if state == "revoking" else "owned",
            )
            for pid, (epoch, state) in partitions.items()
        },
    )
    meta = {"name": f"ehb-orders-{pod}", "annotations": dict(annotations or {})}
    return {"metadata": meta, "data": data}


def pod(name: str = "p-1", *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T18:00:00Z"
    return {"metadata": meta}


def released(annotations: dict[str, Any]) -> dict[str, int]:
    return dict(configmaps.parse_released(annotations))


def test_a_revocation_is_released_and_the_generation_applied() -> None:
    answer = doubles.acknowledgement(body({"0": (2, "owned"), "1": (3, "revoking")}))
    assert answer is not None
    assert released(answer) == {"1": 3}
    assert configmaps.parse_applied_generation(answer) == 4
    assert doubles.acknowledgement(body({"1": (3, "revoking")}, annotations=answer)) is None


def test_a_shutdown_releases_everything_held_and_applies_nothing() -> None:
    answer = doubles.shutdown_release(body({"0": (2, "owned"), "1": (3, "revoking")}))
    assert answer is not None
    assert released(answer) == {"0": 2, "1": 3}
    assert configmaps.ANNOTATION_APPLIED_GENERATION not in answer
    # Written once: the same ConfigMap with the release on it asks for nothing more.
    assert doubles.shutdown_release(body({"0": (2, "owned")}, annotations=answer)) is None


def test_a_pod_being_deleted_releases_what_its_configmap_holds_at_once() -> None:
    writes: list[tuple[str, dict[str, Any]]] = []
    fleet = doubles.Doubles(lambda name, annotations: writes.append((name, annotations)))
    fleet.on_map("ADDED", body({"0": (2, "owned")}, annotations={}))
    assert writes == [("ehb-orders-p-1", doubles.acknowledgement(body({"0": (2, "owned")})))]
    fleet.on_pod("MODIFIED", pod())  # Ready, not deleting: nothing
    fleet.on_pod("MODIFIED", pod(deleting=True))
    assert released(writes[-1][1]) == {"0": 2}
    fleet.on_pod("MODIFIED", pod(deleting=True))  # the SIGTERM comes once
    assert len(writes) == 2
    # A revocation the operator still writes to it is answered by the release it made.
    fleet.on_map("MODIFIED", body({"0": (2, "revoking"), "1": (2, "owned")}))
    assert released(writes[-1][1]) == {"0": 2, "1": 2}
    assert fleet.acknowledged == 1
    assert fleet.released_on_shutdown == 2


def test_a_configmap_seen_after_the_deletion_is_released_when_it_comes() -> None:
    writes: list[tuple[str, dict[str, Any]]] = []
    fleet = doubles.Doubles(lambda name, annotations: writes.append((name, annotations)))
    fleet.on_pod("MODIFIED", pod("p-2", deleting=True))
    assert writes == []
    fleet.on_map("ADDED", body({"5": (1, "owned")}, pod="p-2"))
    assert [(name, released(annotations)) for name, annotations in writes] == [
        ("ehb-orders-p-2", {"5": 1})
    ]
