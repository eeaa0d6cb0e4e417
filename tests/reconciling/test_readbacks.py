"""Reading the assignment back, deriving writes, status epochs and move Events: pure."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping, Sequence

from eventhub_balancer.balancing import models, planning
from eventhub_balancer.contracts import (
    configmaps,
    podassignments,
    podstates,
    specs,
    statusbodies,
    timestamps,
)
from eventhub_balancer.reconciling import kubeevents, observations, readbacks, statuses, writes
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
    state: models.OwnershipState = "owned",
) -> observations.StoredMap:
    spec = specs.parse_spec(SPEC)
    data = podassignments.build_data(
        spec=spec,
        consumer="orders",
        pod=pod,
        generation=1,
        partitions={
            P(p): podassignments.PartitionEntry(epoch=e, state=state, since=T0)
            for p, e in parts.items()
        },
    )
    annotations = {configmaps.ANNOTATION_POD_UID: uid or f"uid-{pod}"}
    if released:
        annotations[configmaps.ANNOTATION_RELEASED] = configmaps.build_released(released)
    return observations.stored_map(
        {
            "metadata": {
                "name": configmaps.configmap_name(consumer="orders", pod=pod),
                "uid": "cm",
                "annotations": annotations,
            },
            "data": data,
        }
    )


def recorded(
    owners: dict[str, dict[str, int]],
    *,
    epochs: dict[str, int] | None = None,
    state: models.OwnershipState = "owned",
    uid: str | None = None,
) -> statusbodies.StatusBody:
    """A status whose record gives ``{pod: {partition: epoch}}`` (epochs: the highest)."""
    entries: list[statusbodies.AssignmentEntryBody] = [
        {
            "partition": p,
            "pod": pod,
            "podUid": uid or f"uid-{pod}",
            "epoch": e,
            "state": state,
            "since": timestamps.format_time(T0),
        }
        for pod, parts in owners.items()
        for p, e in parts.items()
    ]
    highest = {p: e for parts in owners.values() for p, e in parts.items()}
    return {"assignment": entries, "epochs": {**highest, **(epochs or {})}}


def derive_writes(
    *,
    spec: specs.ConsumerSpec,
    consumer: str,
    namespace: str,
    assignment: Mapping[models.PartitionId, models.Ownership],
    maps: Sequence[observations.StoredMap],
    pods: Mapping[str, podstates.PodState],
    pod_annotations: Mapping[str, Mapping[str, str]],
    problems: Mapping[str, tuple[str, ...]] | None = None,
) -> writes.Writes:
    """What `writes.derive` gives for a fleet, from ConfigMaps and pod states as a test has
    them: every pod's need (`writes.pod_writes`), and the ConfigMaps nobody wants."""
    by_name = {m.name: m for m in maps}
    owners = writes.by_owner(assignment)
    needs = []
    for pod in pods.values():
        own = configmaps.configmap_name(consumer=consumer, pod=pod.name)
        found = by_name.get(own)
        needs.append(
            writes.pod_writes(
                pod,
                spec=spec,
                consumer=consumer,
                namespace=namespace,
                partitions=owners.get(pod.name, {}),
                cm=found,
                annotations=pod_annotations.get(pod.name, {}),
                problem=found is not None and found.name in (problems or {}),
                annotate_pods=True,
            )
        )
    wanted = {n.wanted for n in needs}
    return writes.assemble(needs, [m for m in maps if m.name not in wanted])


def test_ownership_comes_from_the_record_and_a_forged_claim_is_tampering() -> None:
    # Pod b wrote {"0": {"epoch": 999}} into its own ConfigMap's data: the highest epoch no
    # longer wins, the operator's record does, and b's ConfigMap is flagged for rewriting.
    back = readbacks.read_back(
        maps=[cm("a", {"0": 2}), cm("b", {"0": 999})],
        pods={"a": ready("a"), "b": ready("b")},
        status=recorded({"a": {"0": 2}}),
        stored_epochs={},
        now=T0,
    )
    assert back.assignment[P("0")].owner == "a"
    assert back.assignment[P("0")].epoch == 2
    assert back.floors[P("0")] == 2
    forged = configmaps.configmap_name(consumer="orders", pod="b")
    assert set(back.tampered) == {forged}
    assert "partition 0 at epoch 999" in back.tampered[forged][0]


def test_epoch_below_floor_is_void_and_floor_kept() -> None:
    back = readbacks.read_back(
        maps=[cm("a", {"0": 2})],
        pods={"a": ready("a")},
        status=recorded({"a": {"0": 2}}, epochs={"0": 5, "1": 4}),
        stored_epochs={"0": 6},
        now=T0,
    )
    assert back.assignment[P("0")] == models.Ownership(owner=None, epoch=6, since=T0.timestamp())
    assert back.assignment[P("1")].epoch == 4
    assert back.assignment[P("1")].owner is None


def test_recreated_pod_gets_a_new_epoch() -> None:
    back = readbacks.read_back(
        maps=[cm("a", {"0": 2}, uid="old")],
        pods={"a": ready("a")},
        status=recorded({"a": {"0": 2}}, uid="old"),
        stored_epochs={},
        now=T0,
    )
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"),),
            members=readbacks.members({"a": ready("a")}),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert plan.assignment[P("0")].epoch == 3


def test_steady_state_derives_no_writes() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"a": ready("a"), "b": ready("b")}
    maps = [cm("a", {"0": 1}), cm("b", {"1": 1})]
    status = recorded({"a": {"0": 1}, "b": {"1": 1}})
    back = readbacks.read_back(maps=maps, pods=pods, status=status, stored_epochs={}, now=T0)
    assert back.problems == {}
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=readbacks.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert plan.moves == ()
    annotations = {
        n: configmaps.pod_annotations(
            consumer="orders", partitions=writes.by_owner(plan.assignment).get(n, {})
        )
        for n in pods
    }
    planned = derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations=annotations,
    )
    assert planned.count == 0


def test_configmap_under_an_older_name_is_replaced_by_one_under_the_fixed_name() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"a": ready("a")}
    old = dataclasses.replace(cm("a", {"0": 1}), name="ehb-orders-a")  # before the hash suffix
    status = recorded({"a": {"0": 1}})
    back = readbacks.read_back(maps=[old], pods=pods, status=status, stored_epochs={}, now=T0)
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=readbacks.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    planned = derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=[old],
        pods=pods,
        pod_annotations={},
    )
    # Pods apply only the fixed name: the older one is never patched in place (the pod would
    # refuse it), the pod's own is created and the older one deleted.
    fixed = configmaps.configmap_name(consumer="orders", pod="a")
    assert [(w.name, w.create) for w in planned.maps] == [(fixed, True)]
    assert set(json.loads(planned.maps[0].body["data"][configmaps.KEY_PARTITIONS])) == {"0", "1"}
    assert [(d.name, d.uid) for d in planned.deletes] == [("ehb-orders-a", old.uid)]


def test_gone_pod_taken_over_gaining_first_and_stale_deleted() -> None:
    spec = specs.parse_spec(SPEC)
    pods = {"b": ready("b")}
    maps = [cm("a", {"0": 1}), cm("b", {"1": 1})]
    status = recorded({"a": {"0": 1}, "b": {"1": 1}})
    back = readbacks.read_back(maps=maps, pods=pods, status=status, stored_epochs={}, now=T0)
    plan = planning.plan(
        models.Scenario(
            partitions=(P("0"), P("1")),
            members=readbacks.members(pods),
            assignment=back.assignment,
            now=T0.timestamp(),
        )
    )
    assert [(m.kind, m.reason, m.epoch) for m in plan.moves] == [("takeover", "gone", 2)]
    planned = derive_writes(
        spec=spec,
        consumer="orders",
        namespace="ns",
        assignment=plan.assignment,
        maps=maps,
        pods=pods,
        pod_annotations={},
    )
    assert [w.name for w in planned.maps] == [configmaps.configmap_name(consumer="orders", pod="b")]
    assert planned.maps[0].gains
    assert [d.name for d in planned.deletes] == [
        configmaps.configmap_name(consumer="orders", pod="a")
    ]
    assert [e.reason for e in kubeevents.move_events(plan.moves)] == ["PartitionTakenOver"]


def test_released_acknowledgement_is_read_from_the_owner() -> None:
    maps = [cm("a", {"0": 4}, released={"0": 4}, state="revoking")]
    status = recorded({"a": {"0": 4}}, state="revoking")
    back = readbacks.read_back(
        maps=maps, pods={"a": ready("a")}, status=status, stored_epochs={}, now=T0
    )
    assert back.released == {P("0"): 4}


def test_an_acknowledgement_counts_only_for_the_epoch_being_revoked() -> None:
    # A release of an older epoch (the pod's previous ownership), and one of an owned
    # partition, do not end any hand-off: the hand-off table says so.
    maps = [
        cm("a", {"0": 5}, released={"0": 4}, state="revoking"),
        cm("b", {"1": 2}, released={"1": 2}),
    ]
    status = recorded({"a": {"0": 5}}, state="revoking")
    status["assignment"].append(
        {"partition": "1", "pod": "b", "podUid": "uid-b", "epoch": 2, "state": "owned"}
    )
    back = readbacks.read_back(
        maps=maps,
        pods={"a": ready("a"), "b": ready("b")},
        status=status,
        stored_epochs={},
        now=T0,
    )
    assert back.released == {}


def test_a_terminating_pods_own_release_of_an_owned_partition_ends_its_ownership() -> None:
    # On SIGTERM the pod released everything and said so before the operator revoked
    # anything: the partition is free in this cycle, without a revocation to wait on.
    maps = [cm("a", {"0": 4, "1": 4}, released={"0": 4, "1": 3})]
    status = recorded({"a": {"0": 4, "1": 4}})
    for pod, expected in (
        (dataclasses.replace(ready("a"), state="terminating"), {P("0"): 4}),
        # Not terminating (a live pod that let go to switch coordinates runs it again, a
        # NotReady one may restart): its release of an owned partition does not count.
        (ready("a"), {}),
        (dataclasses.replace(ready("a"), state="notready"), {}),
    ):
        back = readbacks.read_back(
            maps=maps, pods={"a": pod}, status=status, stored_epochs={}, now=T0
        )
        assert back.released == expected, pod.state
    terminating = {"a": dataclasses.replace(ready("a"), state="terminating"), "b": ready("b")}
    back = readbacks.read_back(maps=maps, pods=terminating, status=status, stored_epochs={}, now=T0)
    scenario = models.Scenario(
        partitions=(P("0"), P("1")),
        members=readbacks.members(terminating),
        assignment=back.assignment,
        released=back.released,
        now=T0.timestamp(),
    )
    # Partition 0 goes to b at once; 1 (an older epoch's release) waits a moment for the
    # pod's own release of its epoch, then is revoked as any hand-off.
    plan = planning.plan(scenario)
    assert [(m.partition, m.kind, m.target, m.epoch) for m in plan.moves] == [
        (P("0"), "takeover", "b", 5)
    ]
    later = dataclasses.replace(scenario, now=T0.timestamp() + 2)
    assert sorted((m.partition, m.kind, m.target, m.epoch) for m in planning.plan(later).moves) == [
        (P("0"), "takeover", "b", 5),
        (P("1"), "revoke", "b", 4),
    ]


def test_status_epochs_never_go_back() -> None:
    assignment = {P("0"): models.Ownership(owner=None, epoch=2)}
    assert statuses.epochs(assignment, {}, {"0": 5, "9": 1}) == {"0": 5, "9": 1}


def test_a_move_events_epoch_is_said_once_however_many_partitions_share_it() -> None:
    def move(partition: str, epoch: int) -> models.Move:
        return models.Move(
            kind="assign",
            partition=models.PartitionId(partition),
            source=None,
            target="c-0",
            epoch=epoch,
            reason="new",
        )

    (same,) = kubeevents.move_events([move(p, 1) for p in ("2", "0", "1")])
    assert same.message == "Assigned partitions 0-2 to c-0 (epoch 1)"
    (mixed,) = kubeevents.move_events([move("0", 3), move("1", 2), move("2", 3)])
    assert mixed.message == "Assigned partitions 0-2 to c-0 (epochs 2-3)"
    # Past 16 runs the epochs are counted, as the partitions are; they were cut silently.
    (many,) = kubeevents.move_events([move(str(p), 2 * p + 1) for p in range(40)])
    assert many.message == (
        "Assigned partitions 0-39 to c-0 (epochs "
        + ", ".join(str(2 * p + 1) for p in range(16))
        + " and 24 more)"
    )


def test_an_event_of_one_partition_with_no_pod_to_go_to_says_has() -> None:
    def unassigned(partitions: tuple[str, ...]) -> str:
        moves = [
            models.Move(
                kind="takeover",
                partition=models.PartitionId(p),
                source="c-0",
                target=None,
                epoch=2,
                reason="gone",
            )
            for p in partitions
        ]
        (event,) = kubeevents.move_events(moves)
        assert (event.reason, event.type) == ("PartitionUnassigned", "Warning")
        return event.message

    assert unassigned(("3",)).startswith("Partition 3 of c-0 (gone) has no pod to go to: ")
    assert unassigned(("3", "4")).startswith("Partitions 3-4 of c-0 (gone) have no pod to go to")
