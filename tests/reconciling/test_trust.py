"""The trust boundary of a cycle: only what the operator wrote decides who owns what, pure.

A consumer pod may patch ConfigMaps (RBAC cannot narrow that to annotations): each attack
here is a pod (or a blob writer) writing something and the cycle not believing it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from eventhub_balancer.contracts import bounds, configmaps
from eventhub_balancer.reconciling import decisions, observations, readbacks, writes
from tests.reconciling import bodies
from tests.reconciling.bodies import at, pod


def started(*pods: dict[str, Any]) -> observations.Observation:
    first, decision = bodies.decide_fully(bodies.observe(pods=pods), now=at(0))
    return bodies.applied(first, decision)


def edited(observation: observations.Observation, pod_name: str, **changes: Any) -> Any:
    """``observation`` with ``pod_name``'s ConfigMap changed as a pod could (data/annotations)."""
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        if cm["data"].get(configmaps.KEY_POD) == pod_name:
            cm["data"].update(changes.get("data", {}))
            cm["metadata"].setdefault("annotations", {}).update(changes.get("annotations", {}))
        maps.append(cm)
    return dataclasses.replace(observation, configmaps=tuple(maps))


def test_a_pod_that_writes_a_higher_epoch_into_its_data_gets_nothing() -> None:
    observation = started(pod("a"), pod("b"))
    owned_by_a = bodies.assignment(observation)["a"]
    stolen = next(iter(owned_by_a))
    forged = bodies.assignment(observation)["b"]
    data = {pid: {"epoch": e, "state": s} for pid, (e, s) in forged.items()}
    data[stolen] = {"epoch": 999, "state": "owned"}
    tampered = edited(
        observation, "b", data={configmaps.KEY_PARTITIONS: json.dumps(data), "extra": "x"}
    )
    observation2, decision = bodies.decide_fully(tampered, now=at(5))
    assert decision.moves == ()
    assert decision.epochs is None  # no epoch goes up: nobody is fenced out
    assert [(w.pod, w.create) for w in decision.writes.maps] == [("b", False)]
    assert decision.writes.maps[0].body["data"]["extra"] is None
    assert [e.reason for e in decision.events] == ["AssignmentTampered"]
    after = bodies.applied(observation2, decision)
    assert bodies.assignment(after)["a"] == owned_by_a
    assert stolen not in bodies.assignment(after)["b"]
    assert bodies.decide(after, now=at(6)).writes.count == 0


def test_a_restarted_operator_resumes_from_the_status_even_without_the_configmaps() -> None:
    observation = started(pod("a"), pod("b"))
    before = bodies.assignment(observation)
    # Same status, ConfigMaps lost (or all rewritten by pods): the record decides.
    lost = dataclasses.replace(observation, configmaps=())
    _, decision = bodies.decide_fully(lost, now=at(5))
    assert decision.moves == ()
    assert decision.epochs is None
    assert {w.pod for w in decision.writes.maps} == {"a", "b"}
    assert bodies.assignment(bodies.applied(lost, decision)) == before


def test_an_acknowledgement_above_the_assigned_epoch_or_oversized_is_ignored() -> None:
    observation = started(pod("a"), pod("b"))
    # b grows: a revokes one partition for it.
    grown = bodies.with_pods(observation, pod("c"))
    _, decision = bodies.decide_fully(grown, now=at(5))
    after = bodies.applied(grown, decision)
    revoking = {
        p: e
        for owner, parts in bodies.assignment(after).items()
        for p, (e, s) in parts.items()
        if s == "revoking"
    }
    assert revoking
    owner = next(o for o, parts in bodies.assignment(after).items() if set(revoking) & set(parts))
    above = {p: e + 1 for p, e in revoking.items()}
    for value in (
        configmaps.build_released(above),
        " " * (bounds.MAX_ANNOTATION_BYTES + 1) + configmaps.build_released(revoking),
    ):
        forged = edited(after, owner, annotations={configmaps.ANNOTATION_RELEASED: value})
        decision = bodies.decide(forged, now=at(6))
        assert [m.kind for m in decision.moves] == [], value[:40]
    honest = edited(
        after,
        owner,
        annotations={configmaps.ANNOTATION_RELEASED: configmaps.build_released(revoking)},
    )
    _, decision = bodies.decide_fully(honest, now=at(6))
    assert {m.reason for m in decision.moves} == {"released"}


def test_a_blob_epoch_beyond_int64_is_ignored_and_named_in_a_condition() -> None:
    observation = bodies.observe(pods=[pod("a")])
    _, decision = bodies.decide_fully(
        observation, now=at(0), checkpoints={"2": (2**63, 1), "3": (bounds.MAX_EPOCH, 1)}
    )
    assert decision.epochs is not None
    assert max(decision.epochs.values()) <= bounds.MAX_EPOCH
    store = next(
        c for c in decision.status["conditions"] if c["type"] == "CheckpointStoreReachable"
    )
    assert (store["status"], store["reason"]) == ("False", "EpochOutOfRange")
    assert "partition 2" in store["message"]
    assert "partition 3" in store["message"]


def test_a_status_epoch_out_of_range_does_not_block_the_cycle() -> None:
    observation = started(pod("a"))
    body: Any = copy.deepcopy(observation.body)
    body["status"]["epochs"]["1"] = 2**64
    _, decision = bodies.decide_fully(dataclasses.replace(observation, body=body), now=at(5))
    assert all(bounds.is_epoch(e) for e in (decision.epochs or {}).values())
    assert all(bounds.is_epoch(e) for e in decision.status.get("epochs", {}).values())


def test_a_record_that_lists_a_partition_twice_is_read_at_its_highest_epoch() -> None:
    # status.assignment is an atomic list (crds/): the API server no longer refuses a hand
    # edit that lists a partition twice, so the reader settles it, and the next write
    # lists each partition once.
    observation = started(pod("a"), pod("b"))
    body: Any = copy.deepcopy(observation.body)
    (owned,) = [e for e in body["status"]["assignment"] if e["partition"] == "0"]
    assert (owned["pod"], owned["epoch"]) == ("a", 1)
    body["status"]["assignment"].append({**owned, "pod": "b", "podUid": "uid-b", "epoch": 0})
    observation2, decision = bodies.decide_fully(
        dataclasses.replace(observation, body=body), now=at(5)
    )
    assert decision.moves == ()
    assert decision.epochs is None
    assert decision.writes.maps == ()
    after = bodies.applied(observation2, decision)
    listed = [(e["partition"], e["pod"]) for e in after.body["status"]["assignment"]]
    assert listed == [("0", "a"), ("1", "a"), ("2", "b"), ("3", "b")]
    assert bodies.decide(after, now=at(6)).writes.count == 0


def test_pod_annotations_are_written_only_when_switched_on() -> None:
    # Off by default: the default install grants no patch on pods (it allows image changes).
    _, decision = bodies.decide_fully(bodies.observe(pods=[pod("a")]), now=at(0))
    assert decision.writes.maps
    assert decision.writes.pods == ()
    observation = dataclasses.replace(bodies.observe(pods=[pod("a")]), annotate_pods=True)
    _, decision = bodies.decide_fully(observation, now=at(0))
    assert [a.pod for a in decision.writes.pods] == ["a"]


def test_a_new_incarnation_under_the_same_name_gets_a_new_epoch() -> None:
    observation = started(pod("a"))
    reborn = pod("a")
    reborn["metadata"]["uid"] = "uid-a-2"
    _, decision = bodies.decide_fully(bodies.with_pods(observation, reborn), now=at(5))
    assert decision.epochs is not None
    assert set(decision.epochs.values()) == {2}


def released_everything(observation: observations.Observation, pod_name: str) -> Any:
    """``pod_name`` writes ``released`` for every partition it owns, before any revocation."""
    held = {p: e for p, (e, _s) in bodies.assignment(observation)[pod_name].items()}
    return edited(
        observation,
        pod_name,
        annotations={configmaps.ANNOTATION_RELEASED: configmaps.build_released(held)},
    )


def revoking_of(observation: observations.Observation) -> dict[str, int]:
    return {
        p: e
        for parts in bodies.assignment(observation).values()
        for p, (e, s) in parts.items()
        if s == "revoking"
    }


def test_a_release_written_ahead_of_the_revocation_does_not_end_the_handoff() -> None:
    observation = started(pod("a"), pod("b"))
    ahead = released_everything(released_everything(observation, "a"), "b")
    # c joins: a and b each revoke a partition for it.
    grown = bodies.with_pods(ahead, pod("c"))
    seen, decision = bodies.decide_fully(grown, now=at(5))
    revoked = {m.partition for m in decision.moves if m.kind == "revoke"}
    assert revoked
    # The revocation drops the releases written before it (a patch, under the ConfigMap's
    # resourceVersion as read).
    for write in decision.writes.maps:
        annotations = (write.body.get("metadata") or {}).get("annotations") or {}
        if write.pod in ("a", "b") and configmaps.ANNOTATION_RELEASED in annotations:
            kept = configmaps.parse_released(annotations)
            assert not set(kept) & revoked
            assert not write.create
    after = bodies.applied(seen, decision)
    assert set(revoking_of(after)) == revoked
    # The next cycles wait for a release written after the revocation.
    waiting, decision = bodies.decide_fully(after, now=at(6))
    assert [m for m in decision.moves if m.target == "c"] == []
    # Once the pods answer the revocation, the hand-off ends.
    answered = bodies.acknowledged(bodies.acknowledged(waiting, "a"), "b")
    _, decision = bodies.decide_fully(answered, now=at(7))
    assert {(m.partition, m.reason) for m in decision.moves if m.target == "c"} == {
        (p, "released") for p in revoked
    }


def test_a_release_ahead_does_not_count_while_the_revocation_is_only_in_the_record() -> None:
    observation = started(pod("a"), pod("b"))
    ahead = released_everything(released_everything(observation, "a"), "b")
    grown = bodies.with_pods(ahead, pod("c"))
    seen, decision = bodies.decide_fully(grown, now=at(5))
    assert [m for m in decision.moves if m.kind == "revoke"]
    # The record says revoking, the owner's ConfigMap does not (its data was put back by
    # hand, or a write went missing): the release written ahead still does not count.
    interrupted = bodies.applied(seen, dataclasses.replace(decision, writes=writes.Writes()))
    _, decision = bodies.decide_fully(interrupted, now=at(6))
    assert [m for m in decision.moves if m.target == "c" and m.reason == "released"] == []


def revoked_for_c(
    granted: float = 0.0, joined: float = 5.0
) -> tuple[observations.Observation, decisions.Decision, str]:
    """a and b own everything since ``granted``; c joins at ``joined``: b's decision revokes one
    of its."""
    first, decision = bodies.decide_fully(
        bodies.observe(pods=[pod("a"), pod("b")]), now=at(granted)
    )
    grown = bodies.with_pods(bodies.applied(first, decision), pod("c"))
    seen, decision = bodies.decide_fully(grown, now=at(joined))
    (revoked,) = [m.partition for m in decision.moves if m.kind == "revoke" and m.source == "b"]
    return seen, decision, revoked


#: Granted and revoked seconds apart, or within one second (pods that turn Ready together: the
#: record's and the ConfigMaps' times are kept to the millisecond, so the two still differ).
MOMENTS = pytest.mark.parametrize(
    ("granted", "joined"), [(0.0, 5.0), (0.2, 0.7)], ids=["apart", "same-second"]
)


@MOMENTS
def test_a_revocation_recorded_but_not_written_yet_is_no_tampering(
    granted: float, joined: float
) -> None:
    seen, decision, revoked = revoked_for_c(granted, joined)
    # The status went out, b's ConfigMap patch was refused (an API server throttling: 429).
    interrupted = bodies.applied(seen, dataclasses.replace(decision, writes=writes.Writes()))
    assert bodies.assignment(interrupted)["b"][revoked] == (1, "owned")
    _, again = bodies.decide_fully(interrupted, now=at(6))
    assert [e.reason for e in again.events] == []
    assert bodies.assignment(bodies.applied(interrupted, again))["b"][revoked] == (1, "revoking")


@MOMENTS
@pytest.mark.parametrize("since", ["kept", "dropped", "later"])
def test_a_revocation_someone_put_back_to_owned_is_tampering(
    since: str, granted: float, joined: float
) -> None:
    seen, decision, revoked = revoked_for_c(granted, joined)
    written = bodies.applied(seen, decision)
    cm = next(m for m in written.configmaps if m["data"][configmaps.KEY_POD] == "b")
    data = json.loads(cm["data"][configmaps.KEY_PARTITIONS])
    assert data[revoked]["state"] == "revoking"
    data[revoked]["state"] = "owned"
    if since == "dropped":
        del data[revoked]["since"]
    elif since == "later":
        data[revoked]["since"] = "2024-05-01T12:00:07Z"
    flipped = edited(written, "b", data={configmaps.KEY_PARTITIONS: json.dumps(data)})
    _, again = bodies.decide_fully(flipped, now=at(8))
    assert [e.reason for e in again.events] == ["AssignmentTampered"]
    assert f"partition {revoked} at epoch 1 (owned)" in again.events[0].message
    assert bodies.assignment(bodies.applied(flipped, again))["b"][revoked] == (1, "revoking")


def test_a_configmap_under_an_older_name_is_never_updated_in_place() -> None:
    observation = started(pod("a"), pod("b"))
    fixed = configmaps.configmap_name(consumer=bodies.NAME, pod="a")
    maps = []
    for cm in observation.configmaps:
        cm = copy.deepcopy(dict(cm))
        if cm["metadata"]["name"] == fixed:
            cm["metadata"]["name"] = f"ehb-{bodies.NAME}-a"  # before the hash suffix
            cm["metadata"]["uid"] = "uid-older"
        maps.append(cm)
    older = dataclasses.replace(observation, configmaps=tuple(maps))
    seen, decision = bodies.decide_fully(older, now=at(5))
    assert [(w.name, w.create) for w in decision.writes.maps] == [(fixed, True)]
    assert [(d.name, d.uid) for d in decision.writes.deletes] == [
        (f"ehb-{bodies.NAME}-a", "uid-older")
    ]
    assert decision.epochs is None  # the record decides: a keeps its partitions and epochs
    after = bodies.applied(seen, decision)
    assert bodies.assignment(after)["a"] == bodies.assignment(observation)["a"]


def store_condition(decision: Any) -> Any:
    return next(c for c in decision.status["conditions"] if c["type"] == "CheckpointStoreReachable")


def test_a_blob_epoch_far_above_the_record_is_reported_and_bounded() -> None:
    near_top = bounds.MAX_FLOOR - 5  # in range, but the owners to come would have no room
    far = 2**40
    observation = bodies.observe(pods=[pod("a")])
    _, decision = bodies.decide_fully(
        observation, now=at(0), checkpoints={"0": (57, 1), "1": (far, 1), "2": (near_top, 1)}
    )
    assert decision.epochs is not None
    # Ahead by a plausible count of hand-offs (a recreated CR): the floor, silently.
    assert decision.epochs["0"] == 58
    # Far ahead but with room left: adopted, so the partition goes on, and reported.
    assert decision.epochs["1"] == far + 1
    # Near the top: not adopted (bounded), reported with what clears it.
    assert decision.epochs["2"] == 1
    assert max(decision.epochs.values()) <= readbacks.MAX_ADOPTED + 1
    store = store_condition(decision)
    assert (store["status"], store["reason"]) == ("False", "CheckpointEpochTampered")
    assert "partition 0" not in store["message"]
    assert f"partition 1 holds epoch {far}" in store["message"]
    assert f"partition 2 holds epoch {near_top}" in store["message"]
    assert "lowered by hand while the consumer is paused" in store["message"]
    warned = [e for e in decision.events if e.reason == "CheckpointEpochTampered"]
    assert len(warned) == 1
    assert warned[0].type == "Warning"


def test_a_blob_epoch_ahead_of_an_existing_record_by_little_is_no_tampering() -> None:
    observation = started(pod("a"), pod("b"))
    # a leaves: its partitions are given out again above the blobs' epochs (a pod fenced 9).
    gone = dataclasses.replace(
        observation, pods=tuple(p for p in observation.pods if p["metadata"]["name"] == "b")
    )
    _, decision = bodies.decide_fully(gone, now=at(60), checkpoints={"0": (9, 1), "1": (9, 1)})
    assert decision.epochs is not None
    assert (decision.epochs["0"], decision.epochs["1"]) == (10, 10)
    assert store_condition(decision)["status"] == "True"


def test_a_create_carries_the_event_of_a_squat_and_only_a_foreign_configmap_is_one() -> None:
    decision = bodies.decide(bodies.observe(pods=[pod("a")]), now=at(0))
    (create,) = [w for w in decision.writes.maps if w.create]
    assert create.squat_event is not None
    assert create.squat_event["reason"] == "AssignmentTampered"
    assert create.squat_event["involvedObject"]["name"] == bodies.NAME
    assert writes.squatter(copy.deepcopy(dict(create.body)), create) is None
    unlabelled = copy.deepcopy(dict(create.body))
    unlabelled["metadata"]["labels"] = {}
    assert writes.squatter(unlabelled, create) == "it lacks the operator's labels"
    other_pod = copy.deepcopy(dict(create.body))
    other_pod["metadata"]["ownerReferences"] = []
    assert writes.squatter(other_pod, create) == "the pod does not own it"
