"""Reading the assignment back and deriving writes, without any API."""

from __future__ import annotations

import dataclasses
import datetime

from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import configmaps, podstates, specs
from eventhub_balancer.handlers import assignments
from tests.contracts.test_contracts import SPEC

T0 = datetime.datetime(2024, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
P = models.PartitionId


def ready(name: str) -> podstates.PodState:
    return podstates.PodState(name=name, uid=f"uid-{name}", state="ready", since=T0)


def cm(
    pod: str,
    parts: dict[str, int],
    *,
    uid: str | None = None,
    released: dict[str, int] | None = None,
) -> assignments.StoredMap:
    spec = specs.parse_spec(SPEC)
    data = configmaps.build_data(
        spec=spec,
        consumer="orders",
        pod=pod,
        generation=1,
        partitions={P(p): configmaps.PartitionEntry(epoch=e, since=T0) for p, e in parts.items()},
    )
    annotations = {configmaps.ANNOTATION_POD_UID: uid or f"uid-{pod}"}
    if released:
        annotations[configmaps.ANNOTATION_RELEASED] = configmaps.build_released(released)
    return assignments.stored_map(
        {
            "metadata": {
                "name": configmaps.configmap_name(consumer="orders", pod=pod),
                "uid": "cm",
                "annotations": annotations,
            },
            "data": data,
        }
    )


def test_duplicate_claims_highest_epoch_wins_and_loser_is_repaired() -> None:
    back = assignments.read_back(
        maps=[cm("a", {"0": 2}), cm("b", {"0": 3})],
        pods={"a": ready("a"), "b": ready("b")},
        status_epochs={},
        stored_epochs={},
        now=T0,
    )
    assert back.assignment[P("0")].owner == "b"
    assert configmaps.configmap_name(consumer="orders", pod="a") in back.problems


def test_epoch_below_floor_is_void_and_floor_kept() -> None:
    back = assignments.read_back(
        maps=[cm("a", {"0": 2})],
        pods={"a": ready("a")},
        status_epochs={"0": 5, "1": 4},
        stored_epochs={"0": 6},
        now=T0,
    )
    assert back.assignment[P("0")] == models.Ownership(owner=None, epoch=6, since=T0.timestamp())
    assert back.assignment[P("1")].epoch == 4
    assert back.assignment[P("1")].owner is None


def test_recreated_pod_gets_a_new_epoch() -> None:
    back = assignments.read_back(
        maps=[cm("a", {"0": 2}, uid="old")],
        pods={"a": ready("a")},
        status_epochs={},
        stored_epochs={},
        now=T0,
    )
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"),),
            members=assignments.members({"a": ready("a")}),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert plan.assignment[P("0")].epoch == 3


def test_steady_state_derives_no_writes() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"a": ready("a"), "b": ready("b")}
    maps = [cm("a", {"0": 1}), cm("b", {"1": 1})]
    back = assignments.read_back(maps=maps, pods=pods, status_epochs={}, stored_epochs={}, now=T0)
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=assignments.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert plan.moves == ()
    annotations = {
        n: configmaps.pod_annotations(
            consumer="orders", partitions=assignments.owned_by(plan.assignment, n)
        )
        for n in pods
    }
    writes = assignments.derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations=annotations,
    )
    assert writes.count == 0


def test_configmap_under_an_older_name_is_kept_not_duplicated() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"a": ready("a")}
    old = dataclasses.replace(cm("a", {"0": 1}), name="ehb-orders-a")  # before the hash suffix
    back = assignments.read_back(maps=[old], pods=pods, status_epochs={}, stored_epochs={}, now=T0)
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=assignments.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    writes = assignments.derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=[old],
        pods=pods,
        pod_annotations={},
    )
    # Partition 1 is added to the existing ConfigMap; nothing is created or deleted.
    assert [(w.name, w.create) for w in writes.maps] == [("ehb-orders-a", False)]
    assert writes.deletes == ()


def test_gone_pod_taken_over_gaining_first_and_stale_deleted() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"b": ready("b")}
    maps = [cm("a", {"0": 1}), cm("b", {"1": 1})]
    back = assignments.read_back(maps=maps, pods=pods, status_epochs={}, stored_epochs={}, now=T0)
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=assignments.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert [(m.kind, m.reason, m.epoch) for m in plan.moves] == [("takeover", "gone", 2)]
    writes = assignments.derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations={},
    )
    assert [w.name for w in writes.maps] == [configmaps.configmap_name(consumer="orders", pod="b")]
    assert writes.maps[0].gains
    assert [d.name for d in writes.deletes] == [
        configmaps.configmap_name(consumer="orders", pod="a")
    ]
    assert [e.reason for e in assignments.move_events(plan.moves)] == ["PartitionTakenOver"]


def test_released_acknowledgement_is_read_from_the_owner() -> None:
    maps = [cm("a", {"0": 4}, released={"0": 4})]
    back = assignments.read_back(
        maps=maps, pods={"a": ready("a")}, status_epochs={}, stored_epochs={}, now=T0
    )
    assert back.released == {P("0"): 4}


def test_status_epochs_never_go_back() -> None:
    assignment = {P("0"): models.Ownership(owner=None, epoch=2)}
    assert assignments.epochs(assignment, {}, {"0": 5, "9": 1}) == {"0": 5, "9": 1}
